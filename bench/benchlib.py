"""Helpers shared by the benchmarks."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from pyhost import image  # noqa: E402


def default_image() -> image.GuestImage:
    """The default image, built (or rebuilt when stale) as pvperf would:
    another checkout sharing the cache may have replaced it meanwhile."""
    return image.image_status("default") or image.build_image("default")


def task_clock_ms(perf_stat_stderr: str) -> float:
    """task-clock (ms) from the guest's `perf stat -x,` output."""
    for line in perf_stat_stderr.splitlines():
        f = line.split(",")
        if len(f) > 2 and f[2] == "task-clock":
            return float(f[0])
    raise SystemExit(f"bench: no task-clock in output:\n{perf_stat_stderr}")
