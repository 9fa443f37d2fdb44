"""The guest kernel's symbol table: /proc/kallsyms and System.map lines,
parsed here once for every reader.

    ADDR TYPE NAME [MODULE]     (hex address, one-letter type, name,
                                 and for module symbols "[module]")

The image builder writes System.map from /proc/kallsyms of a test boot
(``system_map_from_kallsyms``); the profiler's kernel symbolizer
(profile/symbols.py) and task layout (profile/kernel_layout.py) read it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterator

_ADDR_RE = re.compile(r"[0-9a-fA-F]{1,16}")


@dataclass(frozen=True)
class KallsymsLine:
    address: int
    type: str
    name: str
    module: str = ""        # without brackets; "" for the core kernel


def parse_kallsyms(text: str) -> Iterator[KallsymsLine]:
    """Every well-formed line of a /proc/kallsyms or System.map text."""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 3 or not _ADDR_RE.fullmatch(parts[0]):
            continue
        module = parts[3].strip("[]") if len(parts) > 3 else ""
        yield KallsymsLine(int(parts[0], 16), parts[1], parts[2], module)


def system_map_from_kallsyms(text: str) -> str:
    """System.map lines (address-sorted, core kernel only) from the text of
    /proc/kallsyms read with kptr_restrict=0; module symbols dropped."""
    rows = sorted(((s.address, s.type, s.name) for s in parse_kallsyms(text)
                   if not s.module), key=lambda r: r[0])
    return "".join(f"{a:016x} {t} {n}\n" for a, t, n in rows)


def system_map_symbol(system_map: str, name: str) -> int | None:
    """The address of ``name`` in a System.map text, or None."""
    for s in parse_kallsyms(system_map):
        if s.name == name:
            return s.address
    return None
