#!/usr/bin/env python3
"""QEMU's own arm64 PMU as a second opinion: run COMMAND in the aarch64
image, with SHARE as /mnt/host, the way `pvperf run --arch aarch64
--no-pmu --deterministic` does (plain TCG: no plugin, no pvperf driver;
-icount shift=0), but with the CPU's PMUv3 on, so that the guest's perf
counts with the kernel's own armv8_pmuv3 driver.  QEMU counts
INST_RETIRED only under precise icount, and no branches:u
(docs/architectures.md).  Exit status: COMMAND's.

  .venv/bin/python scripts/pvperf-qemu-pmuv3.py SHARE COMMAND

(Its name holds "pvperf": tests/support.leftovers takes a QEMU whose
parent names no pvperf for an orphan.)
"""
import asyncio
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from pyhost import arch, guest_contract  # noqa: E402
from pyhost.cli.options import make_config  # noqa: E402
from pyhost.vm.launcher import run_command  # noqa: E402


def main() -> int:
    if len(sys.argv) != 3:
        sys.exit(f"usage: {sys.argv[0]} SHARE COMMAND")
    config = make_config(guest_contract.RUN, sys.argv[2], 1, 1024,
                         Path(sys.argv[1]), 900, False, image_name="aarch64",
                         arch=arch.get("aarch64"), no_pmu=True,
                         deterministic=True)
    config.arch = dataclasses.replace(config.arch, cpu="neoverse-n1,pmu=on")
    return asyncio.run(run_command(config))


if __name__ == "__main__":
    sys.exit(main())
