"""Where pvperf finds its own files and keeps its cache (defined once).

  REPO_ROOT     the checkout pyhost runs from (pyhost is installed
                editable: the plugins, driver and recipes are built here)
  cache_dir()   ${XDG_CACHE_HOME:-~/.cache}/pvperf: guest images, debs
"""
from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PLUGIN_PATH = REPO_ROOT / "qemu_plugin" / "pvperf.so"
RMAP_PLUGIN_PATH = REPO_ROOT / "qemu_plugin" / "pvperf-rmap.so"
DRIVER_KO_PATH = REPO_ROOT / "guest_kernel_patch" / "pvperf.ko"
RECIPES_DIR = REPO_ROOT / "images"


def cache_dir() -> Path:
    """``${XDG_CACHE_HOME:-~/.cache}/pvperf``."""
    base = os.environ.get("XDG_CACHE_HOME") or ""
    root = Path(base) if base else Path.home() / ".cache"
    return root / "pvperf"


def driver_ko_paths(debian_arch: str) -> tuple[Path, ...]:
    """Where ``make -C guest_kernel_patch`` leaves pvperf.ko for guests of
    ``debian_arch``: the host's build stays next to the sources, another
    architecture's (``make KARCH=...``) is in a directory named after it,
    and one for another image's kernel (``make IMAGE=linux-6.12``) in a
    directory named after that image.  Which one an image takes is decided
    by the kernel release in its vermagic (image/inputs.py)."""
    gkp = DRIVER_KO_PATH.parent
    return (DRIVER_KO_PATH, gkp / debian_arch / "pvperf.ko",
            *sorted(gkp.glob("linux-*/pvperf.ko")))
