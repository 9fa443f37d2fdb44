#!/usr/bin/env python3
"""What --deterministic costs: host wall time of the same `pvperf run`,
normal and deterministic, alternating in one run of this script.

Inside a deterministic guest, time is virtual (1 ns per instruction), so
the guest's own task-clock cannot measure the cost: the host's clock
does.  Each figure is the minimum over the rounds (the shared host's noise
only adds time).  "boot" is `pvperf run -- true`; a workload's own cost is
its run minus boot, so that the ratio is not diluted by the boot.

  .venv/bin/python bench/bench_determinism.py [--rounds 3]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time

from benchlib import PROGRAMS, REPO

PVPERF = REPO / ".venv" / "bin" / "pvperf"
TUNABLES = ("GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold=0x10000000:"
            "glibc.cpu.x86_non_temporal_threshold=0x10000000")

WORKLOADS = {
    "boot": "true",
    "stat hotcold": "perf stat -e instructions,instructions:u,branches "
                    "./hotcold 100000",
    "record hotcold": "perf record -q -e instructions:u -c 10007 -o "
                      "/tmp/p.data ./hotcold 20000",
    "stat qs": f"{TUNABLES} perf stat -e instructions,instructions:u,"
               "branches ./qs 400000",
}
MODES = {"normal": [], "deterministic": ["--deterministic"]}


def wall(mode: str, command: str) -> float:
    t0 = time.monotonic()
    r = subprocess.run([str(PVPERF), "run", *MODES[mode], "--share",
                        str(PROGRAMS), "--", "sh", "-c", command],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        sys.exit(f"bench: {mode} {command!r} failed:\n{r.stderr[-2000:]}")
    return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    subprocess.run(["make", "-s", "-C", str(PROGRAMS)], check=True)
    wall("normal", "true")                     # the image, built if needed
    best: dict[tuple[str, str], float] = {}
    for rnd in range(args.rounds):
        for name, command in WORKLOADS.items():
            for mode in MODES:
                t = wall(mode, command)
                key = (name, mode)
                best[key] = min(best.get(key, t), t)
                print(f"round {rnd + 1}: {name:<15} {mode:<13} {t:6.2f} s",
                      file=sys.stderr)
    print(f"{'workload':<16}{'normal s':>10}{'determ. s':>11}{'ratio':>8}"
          f"{'ratio w/o boot':>16}")
    boot = {m: best[("boot", m)] for m in MODES}
    for name in WORKLOADS:
        n, d = best[(name, "normal")], best[(name, "deterministic")]
        own = ("" if name == "boot" else
               f"{(d - boot['deterministic']) / max(n - boot['normal'], 1e-3):16.2f}")
        print(f"{name:<16}{n:10.2f}{d:11.2f}{d / n:8.2f}{own}")


if __name__ == "__main__":
    main()
