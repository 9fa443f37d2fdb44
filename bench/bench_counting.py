#!/usr/bin/env python3
"""Counting overhead: the paravirtual PMU against plain TCG, in one run.

For each guest architecture, workload and vCPU count, boots each
configuration and times the same guest program with perf stat's
task-clock (a software event, so it opens nothing on the paravirtual
PMU), REPS times per boot:

  plain      pvperf run --no-pmu       (no plugin, no driver: plain TCG)
  idle       pvperf run                (plugin + driver, no PMU event open)
  counting   pvperf run, perf stat -e instructions,branches as well
  insns      pvperf run, perf stat -e instructions only (what the branch
             count adds is counting's cost less this one's)
  qemu-bb    pvperf run --no-pmu with QEMU's own tests/tcg/plugins/bb.c
             (inline=on; built from the installed QEMU's source tarball):
             the QEMU project's minimal instruction counter, an inline add
             per translation block for its instructions and one for the
             block itself, the floor of what any plugin counting per block
             costs (pvperf folds both of its counts into one add)
  pmuv3      aarch64 only, smp 1: QEMU's own PMUv3 counting instructions
             under -icount shift=0 (scripts/pvperf-qemu-pmuv3.py), what a
             user would use instead of pvperf; icount makes the guest's clock
             virtual, so this row is host wall time between markers the
             guest prints around each run, against plain's the same way
  rvpmu      riscv64 only, smp 1: the same of QEMU's own riscv PMU
             (sscofpmf, SBI PMU; scripts/pvperf-qemu-riscv-pmu.py
             --icount): without -icount its instructions read the host's
             clock, so icount is what a user would have to add

Targets: x86_64: counting <= 1.05x plain at smp 1 and at smp 2 with
both vCPUs busy (workload loop2), idle <= 1.03x; aarch64 and riscv64:
counting <= 1.15x.  Configurations alternate within each
round.  Each figure is the minimum over all runs of its configuration
(and, in the "median" column, the median ratio over every run but each
boot's first; "IQR" the interquartile range of those ratios):
the host's noise (other tenants) only ever adds time, and it moved single
runs by up to 30% here, so the minimum is the stable statistic.  "first
run" is the minimum over the first run of each boot only: it includes
switching the plugin's counting on, which retranslates all guest code
once; later runs within PVPERF_COUNT_LINGER_MS of the last one reuse the
instrumentation.

Across architectures: with --arch x86_64 aarch64 (alternating within each
round, like the configurations), the last lines compare
plain TCG on the same C program built for each (memwalk: the same
source, freestanding), as time and as guest instructions per second
(instructions from the counting configuration).

  .venv/bin/python bench/bench_counting.py [--rounds 3] [--reps 5] [--smp 1 2]
      [--arch x86_64 aarch64] [--workload loop memwalk] [--configs ...]
      [--metric cpu]   (QEMU's vCPU threads' host CPU time between the
                        guest's markers: steadier than guest time on a
                        loaded host)
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys

from benchlib import (PROGRAMS, REPO, arch_command, build_qemu_plugin,
                      marked_runs)
from pyhost import arch as arches

PVPERF = REPO / ".venv" / "bin" / "pvperf"
PYTHON = REPO / ".venv" / "bin" / "python"

# About 0.7 s of guest time each, several per boot.  "loop2" runs two
# loops at once (perf stat's task-clock sums them): at smp 2 both vCPUs
# are busy, which is where per-vCPU counting costs most.  Programs are
# tests/guest_programs' (aarch64/ for arm64 guests; work is x86's only).
WORKLOADS = {"work": "./work 100000000", "loop": "./loop 1000000000",
             "loop2": "sh -c './loop 1000000000 & ./loop 1000000000; wait'",
             "memwalk": "./memwalk 0 24",
             # ordinary C: dynamically linked, libc's qsort and a callback
             "qs": "./qs 2000000",
             # kernel-heavy: 300,000 read+write pairs
             "syscalls": "dd if=/dev/zero of=/dev/null bs=1 count=300000"}
CONFIGS = {
    "plain": (["--no-pmu"], "task-clock"),
    "idle": ([], "task-clock"),
    "counting": ([], "task-clock,instructions,branches"),
    "insns": ([], "task-clock,instructions"),
    "pmuv3": (None, "task-clock,instructions"),
    "rvpmu": (None, "task-clock,instructions"),
    "qemu-bb": (["--no-pmu"], "task-clock"),
}


def runs(arch: arches.Arch, smp: int, config: str, cmd: str, reps: int
         ) -> list[dict[str, float]]:
    """The counts and wall ms of `reps` runs in one boot, in order."""
    opts, events = CONFIGS[config]
    if opts is None:            # QEMU's own PMU: pmuv3, rvpmu
        argv = [str(PYTHON), str(REPO / "scripts" / QEMU_PMU[config][1]),
                *QEMU_PMU[config][2:], str(PROGRAMS)]
    else:
        argv = [str(PVPERF), "run", "--arch", arch.name, "--smp", str(smp),
                *opts, "--share", str(PROGRAMS), "--", "sh", "-c"]
    env = qemu_bb_env(arch) if config == "qemu-bb" else None
    return marked_runs(argv, cmd, events, reps, env)


def qemu_bb_env(arch: arches.Arch) -> dict[str, str]:
    """An environment whose PATH finds arch's QEMU as a wrapper that loads
    QEMU's own bb plugin (inline counting) in front of the real one."""
    wrapdir = REPO / "build" / "bench-qemu-bb"
    wrapdir.mkdir(parents=True, exist_ok=True)
    lib = wrapdir / "libbb.so"
    if not lib.exists():
        build_qemu_plugin("tests/tcg/plugins/bb.c", lib)
    real = shutil.which(arch.qemu)
    if real is None:
        raise SystemExit(f"bench: {arch.qemu} not installed")
    wrapper = wrapdir / arch.qemu
    wrapper.write_text(f"#!/bin/sh\nexec {real} \"$@\" "
                       f"-plugin {lib},inline=on\n")
    wrapper.chmod(0o755)
    return {**os.environ, "PATH": f"{wrapdir}:{os.environ['PATH']}"}


# QEMU's own PMU: (the architecture, the script that boots it, its options)
QEMU_PMU = {"pmuv3": ("aarch64", "pvperf-qemu-pmuv3.py"),
            "rvpmu": ("riscv64", "pvperf-qemu-riscv-pmu.py", "--icount")}


def configs_for(arch: arches.Arch, smp: int, args) -> list[str]:
    return [c for c in args.configs
            if c not in QEMU_PMU or (arch.name == QEMU_PMU[c][0] and
                                     smp == 1)]


def bench(archs, wl, smp, args) -> dict[tuple[str, str], list[list[dict]]]:
    """{(arch, config): per boot its runs}; architectures and
    configurations alternate within each round, so that the host's noise
    hits them alike."""
    todo = [(a, c) for a in archs for c in configs_for(a, smp, args)]
    boots = {(a.name, c): [] for a, c in todo}
    for i in range(args.rounds):
        for a, c in todo:
            boots[a.name, c].append(runs(a, smp, c,
                                         arch_command(WORKLOADS[wl], a),
                                         args.reps))
        print(f"  {wl} smp {smp} round {i + 1}/{args.rounds} " + "  ".join(
            f"{a.name}:{c}=" + "/".join(f"{r[key(c)]:.0f}"
                                        for r in boots[a.name, c][-1])
            for a, c in todo), file=sys.stderr)
    return boots


METRIC = "task-clock"


def key(config: str) -> str:
    """What a configuration's time is: icount makes pmuv3's guest clock
    virtual, so its figure is host wall time (against plain's); --metric
    cpu: QEMU's host CPU time (benchlib.cpu_ms) for every configuration."""
    if METRIC == "cpu":
        return "cpu"
    return "wall" if config in QEMU_PMU else "task-clock"


def report(arch, wl, smp, boots, args_reps: int) -> tuple[float, float]:
    """Print the rows; return plain's best task-clock and the
    instructions counting saw."""
    def best(c, k, first=False):
        return min(b[0][k] if first else min(r[k] for r in b)
                   for b in boots[c])

    def median(c, k):
        """Over every run but each boot's first (which switches on)."""
        return statistics.median(r[k] for b in boots[c] for r in b[1:])
    def spread(c, k):
        """The ratios' interquartile range: each run (but each boot's
        first) against plain's median."""
        ratios = [r[k] / median("plain", k) for b in boots[c] for r in b[1:]]
        if len(ratios) < 2:
            return "-"
        q = statistics.quantiles(ratios, n=4)
        return f"{q[0]:.2f}-{q[2]:.2f}"
    for c in boots:
        k = key(c)
        m, base = best(c, k), best("plain", k)
        med = median(c, k) / median("plain", k) if args_reps > 1 else 0.0
        iqr = spread(c, k) if args_reps > 1 else "-"
        # The first run of a boot also pays for switching the plugin's
        # counting on (all guest code is retranslated); later ones reuse
        # it (PVPERF_COUNT_LINGER_MS).
        f, base_first = best(c, k, True), best("plain", k, True)
        print(f"{arch.name:<8} {wl:<8} {smp:>3} {c:<9} {m:>10.0f}"
              f"{' ' + k[:4] if k != 'task-clock' else '     '} {m / base:>6.2f}x"
              f" {med:>6.2f}x {iqr:>9}   {f:>9.0f} {f / base_first:>6.2f}x")
    counted = boots.get("counting", [[{}]])[0][0]
    return best("plain", "task-clock"), counted.get("instructions", 0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--smp", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--arch", nargs="+", default=[arches.host().name],
                    choices=sorted(arches.ARCHES))
    ap.add_argument("--workload", nargs="+", choices=list(WORKLOADS),
                    default=[w for w in WORKLOADS if w != "syscalls"],
                    help="syscalls (kernel-heavy; 11 s a run on arm64) only "
                    "when asked")
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS),
                    choices=list(CONFIGS), help="a subset (plain is always "
                    "run: the ratios are against it)")
    ap.add_argument("--metric", choices=["task-clock", "cpu"],
                    default="task-clock", help="cpu: QEMU's host CPU time "
                    "between the guest's markers instead of guest time "
                    "(steadier on a loaded host)")
    args = ap.parse_args()
    global METRIC
    METRIC = args.metric
    args.configs = ["plain"] + [c for c in args.configs if c != "plain"]
    plain = {}
    print(f"{'arch':<8} {'workload':<8} {'smp':>3} {'config':<9} "
          f"{'task-clock ms':>14} {'ratio':>7} {'median':>7} {'IQR':>9}   {'first run':>9} "
          f"{'ratio':>7}")
    for wl in args.workload:
        # the architectures it is built for
        archs = [a for a in map(arches.get, args.arch)
                 if arch_command(WORKLOADS[wl], a) is not None]
        for smp in args.smp:
            boots = bench(archs, wl, smp, args)
            for a in archs:
                plain[a.name, wl, smp] = report(a, wl, smp, {
                    c: b for (n, c), b in boots.items() if n == a.name},
                    args.reps)
    cross_arch(plain, args)
    shutil.rmtree(REPO / "build" / "bench-qemu-bb", ignore_errors=True)


def cross_arch(plain, args) -> None:
    """Plain TCG of each architecture on the same program, against the
    first architecture asked."""
    if len(args.arch) < 2:
        return
    for (name, wl, smp), (ms, insns) in plain.items():
        first = plain.get((args.arch[0], wl, smp))
        if first and name != args.arch[0]:
            print(f"plain {name} / plain {args.arch[0]} on {wl} smp {smp}: "
                  f"{ms:.0f} / {first[0]:.0f} ms = {ms / first[0]:.2f}x; "
                  f"guest instructions {insns:.0f} / {first[1]:.0f}, "
                  f"{insns / ms / 1e6:.2f} / {first[1] / first[0] / 1e6:.2f}"
                  " G/s (instructions: the counting configuration's)")


if __name__ == "__main__":
    main()
