"""The image cache: where built images live, and installing one atomically.

    ${XDG_CACHE_HOME:-~/.cache}/pvperf/images/<name>/
        vmlinux, initramfs.cpio, System.map, root/, manifest.json
    ${XDG_CACHE_HOME:-~/.cache}/pvperf/recipes/<name>.json
        a derived recipe (a base recipe plus Debian packages)

A build runs in a temporary directory next to it and is renamed into
place at the end (``install_image``), so a reader sees the old image,
nothing, or the new one, never a mix; ``BuildLock`` serialises builds of
one image name across processes.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..arch import Arch, host
from ..paths import RECIPES_DIR, cache_dir


@dataclass(frozen=True)
class GuestImage:
    """A built guest image in the cache (all paths exist)."""
    name: str
    vmlinux: Path
    initramfs: Path
    system_map: Path
    root: Path
    kernel_version: str          # the kernel release, as `uname -r` says

    @property
    def manifest(self) -> Path:
        return self.vmlinux.parent / "manifest.json"


def images_dir() -> Path:
    return cache_dir() / "images"


def image_dir(name: str = "default") -> Path:
    """An image's cache directory: "default" is the host architecture's
    own recipe's (recipe_name), as everywhere else."""
    return images_dir() / recipe_name(name)


def recipe_name(name: str, arch: Arch | None = None) -> str:
    """The recipe (and cache directory) an image name stands for: each
    architecture's own recipe is named after it (Arch.default_recipe,
    images/<its name>), and the image named "default" stands
    for ``arch``'s (the host's by default), so each architecture has its
    "default"; any other name is itself."""
    return (arch or host()).default_recipe if name == "default" else name


def recipe_dir(name: str = "default") -> Path:
    """images/<name>/ (the image named "default": the host's recipe)."""
    return RECIPES_DIR / recipe_name(name)


def user_recipe_path(name: str) -> Path:
    """A saved derived recipe (``pvperf image build --name N --add ...``)."""
    return cache_dir() / "recipes" / f"{name}.json"


def image_from_dir(name: str, d: Path) -> GuestImage | None:
    try:
        manifest = json.loads((d / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    img = GuestImage(name=name, vmlinux=d / "vmlinux",
                     initramfs=d / "initramfs.cpio",
                     system_map=d / "System.map", root=d / "root",
                     kernel_version=manifest.get("kernel_version", ""))
    if not all(p.exists() for p in (img.vmlinux, img.initramfs,
                                    img.system_map, img.root)):
        return None
    return img


def install_image(out: Path, final: Path, name: str) -> GuestImage:
    """Move a finished image into place (two renames; a concurrent reader
    sees the old image, nothing, or the new one, never a mix)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    old = None
    if final.exists() or final.is_symlink():
        old = Path(tempfile.mkdtemp(prefix=f".old-{name}-", dir=final.parent))
        os.replace(final, old / "image")
    os.replace(out, final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    img = image_from_dir(name, final)
    assert img is not None
    return img


@dataclass
class BuildLock:
    """An exclusive flock on ``path`` (one build of an image at a time;
    ``what`` names the other holder in the line printed while waiting):
    processes that share the cache (two pytest-xdist workers, a user's
    run beside a test session) take turns."""

    path: Path
    what: str = "another build"

    def __enter__(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"pvperf: image: waiting for {self.what} ({self.path})",
                  file=sys.stderr, flush=True)
            fcntl.flock(self._fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)

