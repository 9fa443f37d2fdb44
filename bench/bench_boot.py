#!/usr/bin/env python3
"""Boot benchmark: `pvperf run -- true` against a bare QEMU boot.

Both boot the same kernel and initramfs to power-off, side by side in one
run, alternating so machine noise hits both alike.  Prints medians and the
ratio (target: <= 1.5x), and pvperf's boot-to-READY time (target <= 3 s).

With --arches, `pvperf run --arch A -- true` for each guest instead,
interleaved round by round, and each one's ratio to the first's (the
riscv64 guest's target: <= 2x x86_64's).

  .venv/bin/python bench/bench_boot.py [--runs N] [--no-pmu]
  .venv/bin/python bench/bench_boot.py --arches x86_64,aarch64,riscv64
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchlib import REPO, default_image


def bare_boot(img) -> float:
    argv = ["qemu-system-x86_64", "-nodefaults", "-no-user-config",
            "-machine", "pc,accel=tcg", "-cpu", "max", "-m", "1024M",
            "-display", "none", "-serial", "null", "-no-reboot",
            "-kernel", str(img.vmlinux), "-initrd", str(img.initramfs),
            "-fw_cfg", "name=opt/org.pvperf/cmd,string=true",
            "-append", "console=ttyS0 quiet panic=-1 pvperf.mode=run"]
    t0 = time.monotonic()
    subprocess.run(argv, check=True, stdin=subprocess.DEVNULL)
    return time.monotonic() - t0


def pvperf_run(pmu: bool, arch: str | None = None) -> float:
    argv = [str(REPO / ".venv" / "bin" / "pvperf"), "run"]
    argv += [] if pmu else ["--no-pmu"]
    argv += ["--arch", arch] if arch else []
    t0 = time.monotonic()
    subprocess.run(argv + ["--", "true"], check=True, cwd="/tmp")
    return time.monotonic() - t0


def ready_time(pmu: bool) -> float:
    """Boot-to-READY measured inside the launcher."""
    import asyncio
    from pyhost.vm.launcher import VM, VMConfig

    async def go():
        cfg = VMConfig(image=default_image(), command="true",
                       share=Path("/tmp"), pmu=pmu)
        async with VM(cfg) as vm:
            await vm.wait_ready()
            t = vm.ready_at - vm.started_at
            await vm.wait_exit(30)
            return t
    return asyncio.run(go())


def arch_boots(arches: list[str], runs: int, pmu: bool) -> None:
    """`pvperf run --arch A -- true` per guest, the guests in turn within
    each round so that the machine's drift hits them alike."""
    times = {a: [] for a in arches}
    for i in range(runs):
        for a in arches:
            times[a].append(pvperf_run(pmu, a))
        print(f"run {i + 1}/{runs}: " + "  ".join(
            f"{a} {times[a][-1]:.2f}s" for a in arches), file=sys.stderr)
    base = statistics.median(times[arches[0]])
    for a in arches:
        t = times[a]
        m = statistics.median(t)
        print(f"pvperf run --arch {a:<8} -- true   median {m:6.2f} s "
              f"(min {min(t):.2f}, max {max(t):.2f})   "
              f"{m / base:.2f}x {arches[0]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--no-pmu", action="store_true",
                    help="measure `pvperf run --no-pmu` instead")
    ap.add_argument("--arches", metavar="A,B,...",
                    help="compare the boots of these guests (the first is "
                         "the base) instead of pvperf against bare QEMU")
    args = ap.parse_args()
    if args.arches:
        arch_boots(args.arches.split(","), args.runs, not args.no_pmu)
        return
    img = default_image()
    pmu = not args.no_pmu
    bare, ours, ready = [], [], []
    for i in range(args.runs):
        bare.append(bare_boot(img))
        ours.append(pvperf_run(pmu))
        ready.append(ready_time(pmu))
        print(f"run {i + 1}/{args.runs}: bare {bare[-1]:.2f}s  pvperf "
              f"{ours[-1]:.2f}s  boot-to-READY {ready[-1]:.2f}s",
              file=sys.stderr)
    b, o, r = (statistics.median(x) for x in (bare, ours, ready))
    label = "pvperf run -- true" + ("" if pmu else " (--no-pmu)")
    print(f"bare qemu boot to power-off   median {b:.2f} s")
    print(f"{label:<29} median {o:.2f} s   ratio {o / b:.2f}x (target <= 1.5x)")
    print(f"boot to READY                 median {r:.2f} s   (target <= 3 s)")


if __name__ == "__main__":
    main()
