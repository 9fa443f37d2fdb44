#!/usr/bin/env python3
"""The first `perf stat` of a run against --no-pmu: what switching counting on costs.

Each boot runs `perf stat -e instructions ./loop 1000` a few times and
reads perf's own "seconds time elapsed" of each (guest time, so the boot
is not in it).  The first of a boot pays for switching the plugin's
counting on (all guest code is translated again, and any flush that a
tail disagreement forces: qemu_plugin/pvperf/count.c); the later ones run
within PVPERF_COUNT_LINGER_MS and reuse it.  Boots with and without the
PMU alternate so the host's noise hits both alike; the figures are
medians over the boots, and the extra cost is the median of the first
run's difference per round.

Target (issue 27): the first perf stat at most 0.1 s over --no-pmu.

  .venv/bin/python bench/bench_first_stat.py [--rounds 7] [--reps 2]
"""
from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROGRAMS = REPO / "tests" / "guest_programs"
PVPERF = REPO / ".venv" / "bin" / "pvperf"
ELAPSED = re.compile(r"([0-9.]+) seconds time elapsed")


def elapsed_s(pmu: bool, reps: int) -> list[float]:
    """perf stat's elapsed seconds of `reps` runs in one boot, in order."""
    cmd = "; ".join(["perf stat -e instructions ./loop 1000 2>&1"] * reps)
    argv = [str(PVPERF), "run", *([] if pmu else ["--no-pmu"]),
            "--share", str(PROGRAMS), "--", "sh", "-c", cmd]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    times = [float(m) for m in ELAPSED.findall(r.stdout + r.stderr)]
    if len(times) != reps:
        raise SystemExit(f"bench: {len(times)} of {reps} perf stat runs "
                         f"reported (exit {r.returncode}):\n{r.stderr}")
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=2,
                    help="perf stat runs per boot (>= 2)")
    args = ap.parse_args()
    if args.rounds < 1 or args.reps < 2:
        ap.error("--rounds >= 1 and --reps >= 2")
    runs: dict[bool, list[list[float]]] = {True: [], False: []}
    for i in range(args.rounds):
        for pmu in ((True, False) if i % 2 == 0 else (False, True)):
            runs[pmu].append(elapsed_s(pmu, args.reps))
        print(f"  round {i + 1}/{args.rounds}: pmu " +
              "/".join(f"{t:.3f}" for t in runs[True][-1]) + "  no-pmu " +
              "/".join(f"{t:.3f}" for t in runs[False][-1]), file=sys.stderr)
    med = statistics.median
    for label, idx in (("first", 0), ("later", slice(1, None))):
        def pick(b: list[float]) -> float:
            return b[idx] if isinstance(idx, int) else med(b[idx])
        on = [pick(b) for b in runs[True]]
        off = [pick(b) for b in runs[False]]
        extra = med([a - b for a, b in zip(on, off)])
        print(f"{label:<6} perf stat  pmu median {med(on):.3f} s   --no-pmu "
              f"median {med(off):.3f} s   extra {extra:+.3f} s" +
              ("   (target <= 0.100 s)" if idx == 0 else ""))


if __name__ == "__main__":
    main()
