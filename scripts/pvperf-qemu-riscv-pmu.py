#!/usr/bin/env python3
"""QEMU's own riscv PMU as a user would have it: run COMMAND in the
riscv64 image, with SHARE as /mnt/host, the way `pvperf run --arch
riscv64 --no-pmu` does (plain TCG: no plugin, no pvperf driver), but
with the CPU's PMU as QEMU 10.0 offers it (sscofpmf=true, pmu-mask at its
default) and the kernel's SBI PMU driver left to initialise (no
initcall_blacklist), so that the guest's perf counts through OpenSBI's
SBI PMU and QEMU's counters (target/riscv/pmu.c).  With --icount, also
as `--deterministic` does (-icount shift=0): only then are QEMU's
mcycle/minstret instruction counts; without it they read the host's
clock (docs/architectures.md, "QEMU's own riscv PMU").  Exit status:
COMMAND's.

  .venv/bin/python scripts/pvperf-qemu-riscv-pmu.py [--icount] SHARE COMMAND

(Its name holds "pvperf": tests/support.leftovers takes a QEMU whose
parent names no pvperf for an orphan.)
"""
import argparse
import asyncio
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from pyhost import arch, guest_contract  # noqa: E402
from pyhost.cli.options import make_config  # noqa: E402
from pyhost.vm.launcher import run_command  # noqa: E402

# QEMU 10.0's rv64 with the image's extensions, its PMU on: sscofpmf (the
# overflow interrupt perf record needs) and pmu-mask's default
# (hpmcounter3..31 programmable).
CPU = "rv64,v=false,ssaia=true,smaia=true,sscofpmf=true"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--icount", action="store_true",
                    help="-icount shift=0 (as --deterministic)")
    ap.add_argument("share", type=Path)
    ap.add_argument("command")
    args = ap.parse_args()
    config = make_config(guest_contract.RUN, args.command, 1, 1024,
                         args.share, 900, False, image_name="riscv64",
                         arch=arch.get("riscv64"), no_pmu=True,
                         deterministic=args.icount)
    config.arch = dataclasses.replace(config.arch, cpu=CPU, kernel_args=())
    return asyncio.run(run_command(config))


if __name__ == "__main__":
    sys.exit(main())
