"""What the launcher boots: a kernel and an initramfs.

A cached image (image.GuestImage) is one; ``BootFiles`` is one for the
files that are not a cached image: a new image's test boot (before it is
installed) and a checkpoint's saved copies.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


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
