"""The guest kernel's files: what the builder reads from ELF files (the
first load address, the banner, a module's ``.modinfo``), through
pyelftools; the boot image's ELF kernel and its entry point through the
host's Arch (pyhost/arch/).
"""
from __future__ import annotations

import re

from ..arch import host
from ..elf import first_load_vaddr, open_elf  # noqa: F401 (re-exported)


def extract_vmlinux(blob: bytes) -> bytes:
    """The ELF kernel inside a compressed boot image of the host's
    architecture (ValueError if there is none)."""
    return host().extract_vmlinux(blob)


def pvh_entry(vmlinux: bytes) -> int | None:
    """Where QEMU enters this ELF kernel, or None if it cannot boot it
    (on x86, its PVH entry note)."""
    return host().boot_entry(vmlinux)


def kernel_banner(vmlinux: bytes) -> str:
    """The ``Linux version ...`` string (linux_banner) inside a vmlinux."""
    m = re.search(rb"Linux version [^\n\0]+", vmlinux)
    return m.group(0).decode("ascii", "replace").strip() if m else ""


def read_modinfo(ko: bytes) -> dict[str, list[str]]:
    """The ``.modinfo`` key=value strings of a kernel module."""
    sec = open_elf(ko).get_section_by_name(".modinfo")
    info: dict[str, list[str]] = {}
    for item in (sec.data() if sec is not None else b"").split(b"\0"):
        if b"=" in item:
            key, value = item.decode("utf-8", "replace").split("=", 1)
            info.setdefault(key, []).append(value)
    return info
