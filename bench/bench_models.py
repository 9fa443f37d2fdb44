#!/usr/bin/env python3
"""Model overhead: the cache and branch-predictor models against plain
TCG, QEMU's contrib cache plugin and cachegrind, in one run.

Each configuration boots the default image and times the same guest
program with perf stat's task-clock (a software event), REPS times per
boot; cachegrind runs the same binary on the host (wall time):

  plain       pvperf run --no-pmu         plain TCG
  idle        pvperf run                  driver loaded, no PMU event open
  counting    instructions                the inline counters only
  models      --cachegrind-compat with cache and predictor events
  models-all  the same events without --cachegrind-compat (kernel too)
  timing      --timing: cycles (every model: caches, predictor, TLBs)
  contrib     --no-pmu, QEMU's contrib/plugins/cache.c (built from the
              orig tarball of the installed QEMU, same geometry, L2 on)
  cachegrind  valgrind --tool=cachegrind --cache-sim=yes --branch-sim=yes
              on the host

Targets: models <= 3x plain on both workloads; contrib / models >= 10;
cachegrind / models > 1; idle and counting unchanged (bench_counting.py).
aarch64 and riscv64 guests (--arch aarch64 riscv64,
tests/guest_programs/<arch>/'s builds of the same programs): models <= 4x
plain; no cachegrind row (the host cannot run their valgrind;
tests/vm/test_models.py runs it in the guest).  Each figure is the
minimum over its runs (host noise only adds time); then the median ratio
(medians of the configuration's and plain's runs) and the range of its
runs against plain's median.

  .venv/bin/python bench/bench_models.py [--rounds 2] [--reps 3]
      [--workload memory tight] [--configs plain models contrib ...]
      [--arch x86_64 aarch64]
"""
from __future__ import annotations

import argparse
import asyncio
import io
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import PROGRAMS, REPO, arch_command, build_qemu_plugin, \
    default_image
from benchlib import task_clock_ms as parse_task_clock

from pyhost import arch as arches
from pyhost.pmu.geometry import DEFAULT_D1, DEFAULT_I1, DEFAULT_LL
from pyhost.vm.launcher import VMConfig, run_command

WORKLOADS = {"memory": "./memwalk 0 24", "tight": "./loop 300000000"}
MODEL_EVENTS = ("task-clock,L1-icache-load-misses,L1-dcache-load-misses,"
                "L1-dcache-store-misses,cache-misses,branch-misses")
GEOMETRY = {"I1": DEFAULT_I1, "D1": DEFAULT_D1, "LL": DEFAULT_LL}
CONFIGS = {
    "plain": (False, {}, "task-clock"),
    "idle": (True, {}, "task-clock"),
    "counting": (True, {}, "task-clock,instructions"),
    "models": (True, {**GEOMETRY, "compat": "on"}, MODEL_EVENTS),
    "models-all": (True, GEOMETRY, MODEL_EVENTS),
    # every model (caches, predictor, TLBs) and cycles from the timing model
    "timing": (True, GEOMETRY, "task-clock,cycles,instructions,"
               "dTLB-load-misses,iTLB-load-misses"),
    "contrib": (False, {}, "task-clock"),
}


def build_contrib_cache(workdir: Path) -> Path:
    """libcache.so from the installed QEMU's own source."""
    return build_qemu_plugin("contrib/plugins/cache.c",
                             workdir / "libcache.so")


def contrib_wrapper(workdir: Path, libcache: Path, arch: arches.Arch
                    ) -> Path:
    """arch's QEMU (qemu-system-x86_64, ...) loading contrib's cache
    plugin."""
    def kb(geom):
        return geom.split(",")
    i1, d1, ll = kb(DEFAULT_I1), kb(DEFAULT_D1), kb(DEFAULT_LL)
    args = (f"icachesize={i1[0]},iassoc={i1[1]},iblksize={i1[2]},"
            f"dcachesize={d1[0]},dassoc={d1[1]},dblksize={d1[2]},"
            f"l2=on,l2cachesize={ll[0]},l2assoc={ll[1]},l2blksize={ll[2]}")
    wrapper = workdir / f"qemu-contrib-cache-{arch.name}"
    wrapper.write_text(f"#!/bin/sh\nexec {arch.qemu} \"$@\" "
                       f"-plugin {libcache},{args}\n")
    wrapper.chmod(0o755)
    return wrapper


def guest_runs(config: str, workload: str, reps: int,
               qemu: str | None, arch: arches.Arch) -> list[float]:
    """task-clock (ms) of ``reps`` runs of the workload in one boot."""
    pmu, options, events = CONFIGS[config]
    cmd = (f"i=0; while [ $i -lt {reps} ]; do i=$((i + 1)); perf stat -x, "
           f"-e {events} {arch_command(WORKLOADS[workload], arch)}; done")
    cfg = VMConfig(image=default_image(arch),
                   command=cmd,
                   share=PROGRAMS, pmu=pmu, plugin_options=dict(options),
                   timeout=900, timing=config == "timing", arch=arch)
    if qemu:
        cfg.qemu = qemu
    out, err = io.BytesIO(), io.BytesIO()
    status = asyncio.run(run_command(cfg, out, err))
    text = err.getvalue().decode()
    if status:
        raise SystemExit(f"bench: {config} exited {status}:\n{text[-2000:]}")
    return [parse_task_clock(line) for line in text.splitlines()
            if "task-clock" in line]


def cachegrind_ms(workload: str) -> float:
    argv = WORKLOADS[workload].split()
    t0 = time.monotonic()
    subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=yes",
                    "--branch-sim=yes", f"--I1={DEFAULT_I1}",
                    f"--D1={DEFAULT_D1}", f"--LL={DEFAULT_LL}",
                    "--cachegrind-out-file=/dev/null", *argv],
                   cwd=PROGRAMS, capture_output=True, check=True)
    return (time.monotonic() - t0) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--workload", nargs="+", default=list(WORKLOADS))
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS),
                    choices=list(CONFIGS),
                    help="a subset (plain and models are always run: the "
                    "ratios are against them)")
    ap.add_argument("--arch", nargs="+", default=[arches.host().name],
                    choices=sorted(arches.ARCHES))
    args = ap.parse_args()
    configs = ["plain", "models"] + [c for c in args.configs
                                     if c not in ("plain", "models")]
    subprocess.run(["make", "-s", "-C", str(PROGRAMS)], check=True)
    # Scratch in the tree's build/ (ignored), not /tmp: nothing there
    # for test runs' leftover checks to trip on.
    (REPO / "build").mkdir(exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="bench-models-",
                                    dir=REPO / "build"))
    try:
        libcache = build_contrib_cache(workdir)
        print(f"{'arch':<8} {'workload':<8} {'config':<11} {'ms':>9} "
              f"{'/plain':>8} {'/models':>8} {'median':>8} range")
        for arch in map(arches.get, args.arch):
            qemu = str(contrib_wrapper(workdir, libcache, arch))
            for wl in args.workload:
                bench(arch, wl, configs, qemu, args)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def bench(arch: arches.Arch, wl: str, configs: list[str], qemu: str,
          args) -> None:
    best: dict[str, float] = {}
    every: dict[str, list[float]] = {}
    for i in range(args.rounds):
        for c in configs:
            runs = guest_runs(c, wl, args.reps,
                              qemu if c == "contrib" else None, arch)
            best[c] = min([best.get(c, float("inf")), *runs])
            every.setdefault(c, []).extend(runs)
        if arch.name == arches.host().name:
            best["cachegrind"] = min(best.get("cachegrind", float("inf")),
                                     cachegrind_ms(wl))
        print(f"  {arch.name} round {i + 1}/{args.rounds}: " + " ".join(
            f"{c}={t:.0f}" for c, t in best.items()), file=sys.stderr)
    for c, t in best.items():
        print(f"{arch.name:<8} {wl:<8} {c:<11} {t:>9.0f} "
              f"{t / best['plain']:>7.2f}x {t / best['models']:>7.2f}x"
              f"{spread(every, c)}")


def spread(every: dict[str, list[float]], c: str) -> str:
    """The median of c's runs against plain's median, and the range of
    c's runs against it: how far the host's noise moved the ratio."""
    if c not in every or len(every[c]) < 2:
        return ""
    base = statistics.median(every["plain"])
    return (f" {statistics.median(every[c]) / base:>7.2f}x "
            f"{min(every[c]) / base:.2f}-{max(every[c]) / base:.2f}")


if __name__ == "__main__":
    main()
