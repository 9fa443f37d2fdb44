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

Target: the first perf stat at most 0.1 s over --no-pmu.

--floor: what the switch costs, from the guest's own emulator events
(docs/events.md): each boot runs `perf stat -a -e emu-tb-translated,
emu-host-ns -- perf stat -e instructions ./loop 1000` twice; the outer
event switches counting on in the first (every block that runs after it
is translated again), not in the second (counting lingers).  Printed per
boot: blocks translated and the vCPU thread's host CPU ms in each, and the
difference's cost per block, which times the blocks a first perf stat
runs is the floor of any switch that retranslates.

  .venv/bin/python bench/bench_first_stat.py [--rounds 7] [--reps 2]
  .venv/bin/python bench/bench_first_stat.py --floor [--rounds 3]
"""
from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys

from benchlib import PROGRAMS, REPO

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


FLOOR_CMD = ("perf stat -x, -a -e r01ee,r08ee -- "
             "perf stat -e instructions ./loop 1000 2>&1")


def floor_boot() -> list[tuple[int, float]]:
    """(blocks translated, vCPU host ms) of FLOOR_CMD run twice in one
    boot: with the switch to counting, then without."""
    argv = [str(PVPERF), "run", "--share", str(PROGRAMS), "--", "sh", "-c",
            f"{FLOOR_CMD}; {FLOOR_CMD}"]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    v = {}
    for line in (r.stdout + r.stderr).splitlines():
        f = line.split(",")
        if len(f) > 2 and f[2] in ("r01ee", "r08ee") and f[0].isdigit():
            v.setdefault(f[2], []).append(int(f[0]))
    if len(v.get("r01ee", [])) != 2 or len(v.get("r08ee", [])) != 2:
        raise SystemExit(f"bench: no emulator counts (exit {r.returncode})"
                         f":\n{r.stderr}")
    return [(v["r01ee"][i], v["r08ee"][i] / 1e6) for i in range(2)]


def floor(rounds: int) -> None:
    per_tb = []
    for i in range(rounds):
        (tb1, ms1), (tb2, ms2) = floor_boot()
        per_tb.append((ms1 - ms2) / (tb1 - tb2) * 1000)
        print(f"boot {i + 1}: switch {tb1} blocks {ms1:.0f} ms, no switch "
              f"{tb2} blocks {ms2:.0f} ms: {per_tb[-1]:.1f} us a block "
              f"retranslated, {ms1 - ms2:.0f} ms in all")
    print(f"median {statistics.median(per_tb):.1f} us a block")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=2,
                    help="perf stat runs per boot (>= 2)")
    ap.add_argument("--floor", action="store_true",
                    help="the switch's cost per retranslated block instead")
    args = ap.parse_args()
    if args.floor:
        return floor(args.rounds)
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
