#!/usr/bin/env python3
"""Plain TCG, QEMU 10.0 against QEMU 7.2, on the same loop, in one run.

What the platform upgrade itself changes, before pvperf adds anything:
boots the default image with no plugin and no driver (as `pvperf run
--no-pmu`) under each QEMU and times `./loop N` with the guest's perf stat
task-clock (a software event), REPS times per boot, boots alternating.
Each figure is the minimum over all runs (host noise only adds time).

QEMU 7.2 is Debian 12's own qemu-system-x86 and qemu-system-common (its
TCG accelerator is a module there), unpacked (not installed) from their
.debs into build/qemu72 so that both run side by side, started through a
small wrapper that points it at its own modules and at the installed
firmware (SeaBIOS, option ROMs).

  .venv/bin/python bench/bench_qemu_versions.py [--rounds 3] [--reps 3]
"""
from __future__ import annotations

import argparse
import asyncio
import glob
import io
import shutil
import subprocess
import sys

from benchlib import PROGRAMS, REPO, task_clock_ms
from pyhost.cli import ensure_image
from pyhost.vm.launcher import VMConfig, run_command
from pyhost.vm.qemu import qemu_version

QEMU72_DIR = REPO / "build" / "qemu72"
QEMU72_VERSION = "1:7.2+dfsg-7+deb12u18+b3"
WORKLOAD = "./loop 1000000000"


def qemu72() -> str:
    """A wrapper running Debian 12's QEMU 7.2, unpacked into build/qemu72."""
    root = QEMU72_DIR / "root"
    wrapper = QEMU72_DIR / "qemu-system-x86_64"
    for pkg in ("qemu-system-x86", "qemu-system-common"):
        if glob.glob(str(QEMU72_DIR / f"{pkg}_*.deb")):
            continue
        QEMU72_DIR.mkdir(parents=True, exist_ok=True)
        subprocess.run(["apt-get", "download", f"{pkg}={QEMU72_VERSION}"],
                       cwd=QEMU72_DIR, check=True, capture_output=True)
        deb, = glob.glob(str(QEMU72_DIR / f"{pkg}_*.deb"))
        subprocess.run(["dpkg", "-x", deb, str(root)], check=True)
    wrapper.write_text(
        "#!/bin/sh\n"
        f"QEMU_MODULE_DIR={root}/usr/lib/x86_64-linux-gnu/qemu exec "
        f"{root}/usr/bin/qemu-system-x86_64 "
        '-L /usr/share/seabios -L /usr/share/qemu "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def one_boot(qemu: str, reps: int) -> list[float]:
    cmd = (f"i=0; while [ $i -lt {reps} ]; do i=$((i + 1)); "
           f"perf stat -x, -e task-clock {WORKLOAD}; done")
    err = io.BytesIO()
    cfg = VMConfig(image=ensure_image(), command=cmd, share=PROGRAMS,
                   pmu=False, qemu=qemu)
    asyncio.run(run_command(cfg, stdout=io.BytesIO(), stderr=err))
    lines = err.getvalue().decode(errors="replace").splitlines()
    return [task_clock_ms(l) for l in lines if "task-clock" in l]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    subprocess.run(["make", "-s", "-C", str(PROGRAMS)], check=True)
    qemus = {"10": shutil.which("qemu-system-x86_64"), "7.2": qemu72()}
    runs: dict[str, list[float]] = {k: [] for k in qemus}
    for i in range(args.rounds):
        for name, path in qemus.items():
            runs[name] += one_boot(path, args.reps)
        print(f"  round {i + 1}/{args.rounds}: " + "  ".join(
            f"{k}=" + "/".join(f"{t:.0f}" for t in v[-args.reps:])
            for k, v in runs.items()), file=sys.stderr)
    base = min(runs["10"])
    for name, path in qemus.items():
        major, minor = qemu_version(path)
        best = min(runs[name])
        print(f"QEMU {major}.{minor:<3} plain TCG  {WORKLOAD}: "
              f"{best:7.0f} ms  {best / base:5.2f}x of QEMU 10.0")


if __name__ == "__main__":
    main()
