"""What the launcher boots: a kernel and an initramfs, on how many vCPUs,
and how long a boot may take.

A cached image (image.GuestImage) is one; ``BootFiles`` is one for the
files that are not a cached image: a new image's test boot (before it is
installed) and a checkpoint's saved copies.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..arch.base import Arch
from ..errors import VMError

BOOT_TIMEOUT = 60.0


class BootImage(Protocol):
    """What the launcher needs of a guest image."""
    vmlinux: Path
    initramfs: Path


@dataclass(frozen=True)
class BootFiles:
    vmlinux: Path
    initramfs: Path

    @property
    def manifest(self) -> Path:
        """The image manifest beside the initramfs, which --json results
        read for their image meta (absent: no image meta)."""
        return self.initramfs.parent / "manifest.json"


def check_smp(smp: int, arch: Arch) -> None:
    """Refuse more vCPUs than the architecture's machine serves."""
    if not 1 <= smp <= arch.max_smp:
        raise VMError("bad --smp", f"{smp} vCPUs: {arch.name} guests take "
                      f"1 to {arch.max_smp}", f"use --smp {arch.max_smp} "
                      "or fewer")


def boot_timeout(smp: int) -> float:
    """How long a boot may take before it counts as hung.  Each vCPU the
    kernel brings up costs host CPU (its thread translates and runs its
    own bring-up and idle entry), so where vCPUs outnumber the host's
    cores the boot's wall time grows with smp / cores: BOOT_TIMEOUT for
    each core's worth of vCPUs (a 16-vCPU boot on a 2-core host shared
    with other work took 60 s and more; docs/options.md)."""
    return BOOT_TIMEOUT * max(1.0, smp / (os.cpu_count() or 1))
