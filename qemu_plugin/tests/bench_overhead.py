#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""bench_overhead.py - wall-clock cost of the pvperf plugin under TCG.

Runs pvbench.bin (pvtest.S -DBENCH: a kernel-half loop of loads, stores,
ALU, a call and a ret per iteration, ~4.4e9 instructions) in:

  plain          qemu-system-x86_64, no plugin
  count=off      plugin loaded, nothing open (marker scan only)
  count=on       plugin counting, one vCPU (inline adds)
  count=on smp2  plugin counting, two vCPUs (exec callbacks; the second
                 vCPU stays in wait-for-SIPI, so only the callback path
                 differs)

Each configuration runs --runs times; the best wall time is reported,
with the ratio to plain.  Boot is ~0.1 s of that.

  python3 qemu_plugin/tests/bench_overhead.py [--runs 3]
"""
import argparse
import re
import sys

import pvharness as h

CONFIGS = [
    ("plain", 1, None),
    ("count=off", 1, ["count=off"]),
    ("count=on", 1, ["count=on"]),
    ("count=on smp2", 2, ["count=on"]),
]


def best_of(runs, smp, opts):
    best = None
    report = ""
    for _ in range(runs):
        res = h.run_guest(h.TESTS_DIR / "pvbench.bin", smp=smp, plugin_opts=opts,
                          timeout=600)
        if res.exit_code != 0:
            sys.exit(f"bench guest failed: rc={res.returncode} {res.stderr}")
        best = res.seconds if best is None else min(best, res.seconds)
        report = res.stderr
    return best, report


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    h.build()
    base = None
    insns = None
    for name, smp, opts in CONFIGS:
        verbose = opts + ["verbose=on"] if opts and "count=on" in opts else opts
        secs, report = best_of(args.runs, smp, verbose)
        m = re.search(r"vcpu 0: insn k=(\d+)", report)
        if m and int(m.group(1)):
            insns = int(m.group(1))
        base = base or secs
        print(f"{name:14s} {secs:7.2f} s  x{secs / base:5.2f}")
    if insns:
        print(f"kernel instructions counted: {insns} "
              f"({insns / base / 1e6:.0f} MIPS plain)")


if __name__ == "__main__":
    main()
