"""What differs between guest architectures, behind one description.

Shared code names no architecture: it takes an ``Arch`` (``host()``, or
the one a VMConfig carries) and reads its fields (base.py).  Each
architecture is one module named after it that fills an Arch in, and one
entry in ARCHES; adding one adds those and a recipe in images/, and
changes no shared line (tests/unit/test_arch_seam.py checks that shared
modules name no architecture).

The guest runs the host's architecture by default (``host()``, looked up
by ``platform.machine()``): its image carries the host's own perf and
tools (image/host.py).  Another architecture's image (``--arch``) takes
them from that architecture's Debian packages instead (image/foreign.py),
since the host can neither run them nor ask ``ldd`` about them.
"""
from __future__ import annotations

import platform

from ..errors import SetupError
from . import aarch64, riscv64, x86_64
from .base import Arch, BootKernel, TaskPath, TaskPathFn, UnbootableKernel

__all__ = ["ARCHES", "Arch", "BootKernel", "TaskPath", "TaskPathFn",
           "UnbootableKernel", "get", "host"]


ARCHES: dict[str, Arch] = {a.name: a for a in (x86_64.ARCH, aarch64.ARCH,
                                              riscv64.ARCH)}


def get(name: str) -> Arch:
    """The Arch named ``name``; SetupError if pvperf has none."""
    try:
        return ARCHES[name]
    except KeyError:
        raise SetupError(f"architecture {name} is not supported",
                         f"pvperf knows {', '.join(sorted(ARCHES))}",
                         "run pvperf on one of those") from None


def host() -> Arch:
    """The host's architecture, which the guest runs by default."""
    return get(platform.machine())
