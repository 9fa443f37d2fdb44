#!/usr/bin/env python3
"""Counting overhead: the paravirtual PMU against plain TCG, in one run.

For each workload and vCPU count, boots three configurations and times the
same guest program with perf stat's task-clock (a software event, so it
opens nothing on the paravirtual PMU):

  plain      pvperf run --no-pmu       (no plugin, no driver: plain TCG)
  idle       pvperf run                (plugin + driver, no PMU event open)
  counting   pvperf run, perf stat -e instructions,branches as well

Targets (issue 3): counting <= 1.15x plain at smp 1, <= 1.5x at smp 2;
idle <= 1.03x.  Configurations alternate within each round.

  .venv/bin/python bench/bench_counting.py [--rounds 3] [--smp 1 2]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

from benchlib import task_clock_ms as parse_task_clock

REPO = Path(__file__).resolve().parent.parent
PROGRAMS = REPO / "tests" / "guest_programs"
PVPERF = REPO / ".venv" / "bin" / "pvperf"

# Long enough (about 1.5 s of guest time) that boot-time noise does not matter.
WORKLOADS = {"work": "./work 200000000", "loop": "./loop 2000000000"}
CONFIGS = {
    "plain": (["--no-pmu"], "task-clock"),
    "idle": ([], "task-clock"),
    "counting": ([], "task-clock,instructions,branches"),
}


def task_clock_ms(smp: int, config: str, workload: str) -> float:
    opts, events = CONFIGS[config]
    cmd = f"perf stat -x, -e {events} {WORKLOADS[workload]}"
    r = subprocess.run([str(PVPERF), "run", "--smp", str(smp), *opts,
                        "--share", str(PROGRAMS), "--", "sh", "-c", cmd],
                       capture_output=True, text=True, timeout=900)
    return parse_task_clock(r.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--smp", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--workload", nargs="+", default=list(WORKLOADS))
    args = ap.parse_args()
    print(f"{'workload':<8} {'smp':>3} {'config':<9} {'task-clock ms':>14}"
          f" {'ratio':>7}")
    for wl in args.workload:
        for smp in args.smp:
            times = {c: [] for c in CONFIGS}
            for i in range(args.rounds):
                for c in CONFIGS:
                    times[c].append(task_clock_ms(smp, c, wl))
                print(f"  round {i + 1}/{args.rounds} " + "  ".join(
                    f"{c}={times[c][-1]:.0f}" for c in CONFIGS),
                    file=sys.stderr)
            base = statistics.median(times["plain"])
            for c in CONFIGS:
                m = statistics.median(times[c])
                print(f"{wl:<8} {smp:>3} {c:<9} {m:>14.0f} {m / base:>6.2f}x")


if __name__ == "__main__":
    main()
