"""Helpers shared by the benchmarks."""
from __future__ import annotations


def task_clock_ms(perf_stat_stderr: str) -> float:
    """task-clock (ms) from the guest's `perf stat -x,` output."""
    for line in perf_stat_stderr.splitlines():
        f = line.split(",")
        if len(f) > 2 and f[2] == "task-clock":
            return float(f[0])
    raise SystemExit(f"bench: no task-clock in output:\n{perf_stat_stderr}")
