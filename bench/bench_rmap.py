#!/usr/bin/env python3
"""Reverse-map overhead against plain TCG 10.0, in one run; and, with
--compare, QEMU's -perfmap against the reverse map on the same samples.

Overhead.  Boots the default image in each configuration and times the
same guest workload:

  plain     no plugin, no jitdump (plain TCG, as `pvperf run --no-pmu`)
  jitdump   QEMU's -jitdump only (one record per TB, with its host code)
  rmap      -jitdump + pvperf-rmap.so with task=: what `pvperf profile`
            records (translation-time records, address-space switch callbacks)

Three timings per boot: the workload's task-clock from the guest's own
`perf stat -e task-clock` (a software event: guest time, which under TCG
without -icount follows host time; steady state, where TBs are mostly
translated already and the plugin only runs at address-space switches); the boot time
on the host, QEMU's start to the guest's READY on the control port
(translation-bound: about 100,000 TBs, every one recorded twice); and the
host CPU time (user + system) QEMU used over its whole life, boot,
workload and power-off (getrusage(RUSAGE_CHILDREN) around the run: QEMU
is our child, reaped by pexpect), which other tenants' load inflates far
less than the two wall-clock figures.  For rmap it also prints the
plugin's own time in its callbacks (its verbose summary: clock_gettime
around tb_trans and the switch callback) as a share of QEMU's CPU time: a
noise-free lower bound of the plugin's cost (the jitdump's is QEMU's).
Target: rmap <= 1.05x plain.  Configurations alternate within each round,
and each round starts one configuration later than the one before, so a
slow phase of the host does not always hit the same configuration.  The
table shows per configuration the median and the minimum over the rounds
and their ratios to plain's: the host is shared and noisy, and noise only
ever adds time, so the minimum is the steadier estimate.

--compare runs `pvperf profile --compare-perfmap` (host perf sampling) on
hotcold, and on codechurn with a 16 MiB code buffer (code-cache flushes
while profiling), and prints the shares of code-cache samples each map
resolves, resolves to a guest function, and (perfmap) agrees on with the
reverse map.

  .venv/bin/python bench/bench_rmap.py [--rounds 3] [--configs plain rmap]
                                       [--workload hotcold] [--compare]
"""
from __future__ import annotations

import argparse
import asyncio
import io
import re
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchlib import PROGRAMS, REPO, default_image
from benchlib import task_clock_ms as parse_task_clock
from pyhost.profile import record as prof
from pyhost.profile import resolve as prof_resolve
from pyhost.vm.launcher import VM, VMConfig

CFLAGS = ["-O2", "-static", "-nostdlib", "-fno-pic", "-no-pie",
          "-fno-stack-protector", "-fcf-protection=none",
          "-fno-asynchronous-unwind-tables", "-fno-omit-frame-pointer"]
# Each about 1.5 s of guest time under plain TCG, so start-up noise does
# not dominate (busybox: 60 md5sums of the busybox binary, ~25 ms each,
# 60 processes: 120 address-space switches at least).
WORKLOADS = {"hotcold": "./hotcold 600000",
             "busybox": "sh -c 'i=0; while [ $i -lt 60 ]; do "
                        "md5sum /bin/busybox >/dev/null; i=$((i+1)); done'"}
CONFIGS = ("plain", "jitdump", "rmap")
PLUGIN_TIME_RE = re.compile(r"([\d.]+) s in tb_trans, ([\d.]+) s in switch")
COMPARE = {"hotcold": (None, "./hotcold 300000"),
           "codechurn": (16, "./codechurn 200000 10000")}


def make_vm(cfg: VMConfig, config: str, outdir: Path) -> VM:
    if config == "plain":
        return VM(cfg)
    task = prof.guest_task_layout(cfg.image, cfg.arch) if config == "rmap" else None
    return prof.ProfiledVM(cfg, outdir, task, plugin=config == "rmap",
                           verbose=config == "rmap")


async def _run(vm: VM) -> tuple[str, float, float]:
    """The command's stderr, the boot time (s) and the plugin's own time
    in its callbacks (s, from its verbose summary; 0 without it); QEMU is
    reaped."""
    out, err = io.BytesIO(), io.BytesIO()
    async with vm:
        pumps = await vm.pump_output(out, err)
        await vm.wait_ready()
        await vm.wait_exit(900)
        await asyncio.wait(pumps, timeout=5)
    m = PLUGIN_TIME_RE.search(vm.console.log.tail(40))
    plugin_s = float(m.group(1)) + float(m.group(2)) if m else 0.0
    return err.getvalue().decode(), vm.ready_at - vm.started_at, plugin_s


def children_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def measure(share: Path, config: str, workload: str
            ) -> tuple[float, float, float, float]:
    """(task-clock ms, boot s, QEMU CPU s, plugin s) of one boot in
    `config`."""
    cmd = f"perf stat -x, -e task-clock {WORKLOADS[workload]}"
    cfg = VMConfig(image=default_image(), command=cmd,
                   share=share, pmu=False)
    with tempfile.TemporaryDirectory(dir=share) as outdir:
        cpu0 = children_cpu_s()
        stderr, boot_s, plugin_s = asyncio.run(_run(make_vm(
            cfg, config, Path(outdir))))
        cpu = children_cpu_s() - cpu0
    return parse_task_clock(stderr), boot_s, cpu, plugin_s


def overhead_table(share: Path, configs: list[str], workloads: list[str],
                   rounds: int) -> None:
    print(f"{'workload':<8} {'config':<8} {'metric':<10} {'median':>9} "
          f"{'ratio':>6} {'min':>9} {'ratio':>6}")
    n = len(configs)
    for wl in workloads:
        runs = {c: [] for c in configs}
        for i in range(rounds):
            for k in range(n):
                c = configs[(i + k) % n]
                runs[c].append(measure(share, c, wl))
            print(f"  round {i + 1}/{rounds} " + "  ".join(
                f"{c}={r[0]:.0f}ms/{r[1]:.2f}s/{r[2]:.2f}s/{r[3]:.3f}s"
                for c, r in ((c, runs[c][-1]) for c in configs)),
                file=sys.stderr)
        for j, (metric, unit) in enumerate((("task-clock", "ms"),
                                            ("boot", "s"),
                                            ("qemu-cpu", "s"))):
            base = [r[j] for r in runs[configs[0]]]
            for c in configs:
                xs = [r[j] for r in runs[c]]
                med, low = statistics.median(xs), min(xs)
                print(f"{wl:<8} {c:<8} {metric:<10} {med:>7.2f}{unit:<2} "
                      f"{med / statistics.median(base):>5.2f}x "
                      f"{low:>7.2f}{unit:<2} {low / min(base):>5.2f}x")
        if "rmap" in runs:
            own = statistics.median(r[3] / r[2] for r in runs["rmap"])
            print(f"{wl:<8} rmap     plugin's own time in its callbacks: "
                  f"{100 * own:.2f}% of QEMU's CPU time (median)")


def compare_perfmap(share: Path) -> None:
    print(f"\n{'workload':<10} {'flushes':>7} {'samples':>8} "
          f"{'map':<8} {'resolved':>9} {'function':>9} {'agrees':>7}")
    for name, (tb_size, command) in COMPARE.items():
        cfg = VMConfig(image=default_image(), command=command,
                       share=share, pmu=False)
        with tempfile.TemporaryDirectory(dir=share) as outdir:
            rec = asyncio.run(prof.record(cfg, Path(outdir), tb_size, True,
                                          stdout=io.BytesIO(),
                                          stderr=io.BytesIO()))
            try:
                meta = prof_resolve.resolve(rec, cfg.image, share)["meta"]
            finally:
                prof.remove_workdir(rec.workdir)
        c = meta["perfmap_comparison"]
        lead = f"{name:<10} {meta['rmap_flushes_in_window']:>7} " \
               f"{c['code_cache_samples']:>8}"
        print(f"{lead} {'rmap':<8} {100 * c['rmap_resolved']:>8.1f}% "
              f"{100 * c['rmap_guest_function']:>8.1f}% {'':>7}")
        print(f"{lead} {'perfmap':<8} {100 * c['perfmap_resolved']:>8.1f}% "
              f"{100 * c['perfmap_guest_function']:>8.1f}% "
              f"{100 * c['perfmap_agrees_with_rmap']:>6.1f}%")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS))
    ap.add_argument("--workload", nargs="+", default=list(WORKLOADS))
    ap.add_argument("--compare", action="store_true",
                    help="also compare QEMU's -perfmap (host perf runs)")
    ap.add_argument("--no-overhead", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=REPO / "build") as tmp:
        share = Path(tmp)
        for prog in ("hotcold", "codechurn"):
            subprocess.run(["gcc", *CFLAGS, "-o", str(share / prog),
                            str(PROGRAMS / f"{prog}.c")], check=True)
        if not args.no_overhead:
            overhead_table(share, args.configs, args.workload, args.rounds)
        if args.compare:
            compare_perfmap(share)


if __name__ == "__main__":
    main()
