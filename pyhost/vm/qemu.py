"""The QEMU system emulator: finding it, its version, its options.

The TCG plugin is built against plugin API v4 (QEMU 10.0): per-vCPU
scoreboards, conditional callbacks, register reads.  A QEMU older than
that cannot load it and would only exit before QMP comes up, so the
version is checked first and refused in one line.
"""
from __future__ import annotations

import ctypes
import functools
import os
import re
import shutil
import signal
import subprocess

from ..arch import Arch, host
from ..errors import SetupError

QEMU_MIN_VERSION = (10, 0)


def find_qemu(name: str | None = None, arch: Arch | None = None) -> str:
    """The path of QEMU binary ``name``, by default ``arch``'s system
    emulator (the host's architecture by default)."""
    arch = arch or host()
    name = name or arch.qemu
    path = shutil.which(name)
    if path is None:
        raise SetupError(f"{name} not found", "QEMU is not installed",
                         "run scripts/setup.sh (apt-get install "
                         f"{arch.qemu_package})")
    return path


@functools.lru_cache(maxsize=None)
def version_line(path: str) -> str:
    """The first line of `path --version` ("unknown" if none)."""
    out = subprocess.run([path, "--version"], capture_output=True, text=True,
                         timeout=30).stdout
    return out.splitlines()[0] if out else "unknown"


def qemu_version(path: str) -> tuple[int, int]:
    """(major, minor) of `path --version`; (0, 0) if it says nothing."""
    m = re.search(r"version (\d+)\.(\d+)", version_line(path))
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def check_qemu_for_plugin(path: str) -> None:
    """Refuse, in one line, a QEMU too old for the plugin."""
    have = qemu_version(path)
    if have < QEMU_MIN_VERSION:
        want = ".".join(map(str, QEMU_MIN_VERSION))
        raise SetupError(
            f"{path} is QEMU {have[0]}.{have[1]}",
            f"the pvperf plugin needs QEMU {want} or newer (plugin API v4)",
            "run scripts/setup.sh (on Debian 12 it installs QEMU 10 from "
            "bookworm-backports), or use --no-pmu")


# The TCG accelerator's properties in QEMU 10.0 (accel/tcg/tcg-all.c
# tcg_accel_class_init), each with a check of its value: what
# `-accel tcg,NAME=VALUE` accepts.  tb-size is the code buffer in MiB
# (QEMU takes any uint; 1 GiB is far past what a guest fills);
# one-insn-per-tb ends every TB after one instruction.
BOOL_VALUES = ("on", "off", "yes", "no", "true", "false")
TCG_OPTIONS = {
    "tb-size": lambda v: v.isdigit() and 1 <= int(v) <= 2048,
    "one-insn-per-tb": lambda v: v in BOOL_VALUES,
    "split-wx": lambda v: v in BOOL_VALUES,
    "thread": lambda v: v in ("single", "multi"),
}


def tcg_slowdown(tcg: tuple[str, ...]) -> float:
    """How much longer a guest boots with these TCG options: one
    instruction per TB dispatches every instruction through the TB lookup
    and chains nothing (measured on 2 shared cores: a guest that boots
    in seconds without it had not booted after 600 s; docs/guide.md)."""
    one = {o.partition("=")[2] for o in tcg
           if o.startswith("one-insn-per-tb=")}
    return 60.0 if one & {"on", "yes", "true"} else 1.0


def parse_tcg_options(text: str) -> tuple[str, ...]:
    """``tb-size=64,one-insn-per-tb=on`` -> ("tb-size=64",
    "one-insn-per-tb=on"), checked against TCG_OPTIONS; ValueError
    naming the option otherwise."""
    out = []
    for item in filter(None, text.split(",")):
        name, eq, value = item.partition("=")
        if name not in TCG_OPTIONS:
            raise ValueError(f"unknown TCG option {name!r} (QEMU 10.0 "
                             f"knows {', '.join(TCG_OPTIONS)})")
        if not eq or not TCG_OPTIONS[name](value):
            raise ValueError(f"bad value in TCG option {item!r}")
        out.append(item)
    if len({i.partition("=")[0] for i in out}) != len(out):
        raise ValueError(f"a TCG option given twice in {text!r}")
    return tuple(out)


def tcg_machine_args(machine: str, tcg: tuple[str, ...]) -> list[str]:
    """-machine with accel=tcg, or, with TCG options, -machine and
    -accel tcg,OPTS (QEMU refuses accel= in -machine beside -accel)."""
    if not tcg:
        return ["-machine", f"{machine},accel=tcg,memory-backend=ram"]
    return ["-machine", f"{machine},memory-backend=ram",
            "-accel", ",".join(("tcg", *tcg))]


def set_pdeathsig(parent: int | None = None) -> None:
    """In the QEMU child: die when the pvperf process (pid ``parent``)
    dies, also if it died between fork and here (prctl(2))."""
    libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_PDEATHSIG = 1
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if parent is not None and os.getppid() != parent:
        os._exit(1)


def qemu_escape(value: str) -> str:
    """QEMU option values escape ',' as ',,'."""
    return value.replace(",", ",,")
