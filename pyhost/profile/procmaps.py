"""``/proc/PID/maps`` lines, parsed here once.

    START-END PERMS OFFSET DEV INODE [PATH]     (hex, e.g. r-xp, hex, ...)

Readers: the guest processes' executable mappings (symbols.Mapping,
from the profile wrapper's snapshots) and QEMU's code cache (its
anonymous executable mappings, read from the host's /proc).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MapsLine:
    start: int
    end: int
    perms: str
    offset: int
    path: str               # "" for an anonymous mapping

    @property
    def executable(self) -> bool:
        return "x" in self.perms


def parse_maps(text: str) -> list[MapsLine]:
    """Every well-formed line of a maps text, in order."""
    out = []
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 5 or "-" not in parts[0]:
            continue
        try:
            lo, hi = (int(x, 16) for x in parts[0].split("-", 1))
            offset = int(parts[2], 16)
        except ValueError:
            continue
        path = parts[5].strip() if len(parts) > 5 else ""
        out.append(MapsLine(lo, hi, parts[1], offset, path))
    return out


def code_cache_ranges(maps_text: str) -> list[tuple[int, int]]:
    """Anonymous executable mappings of QEMU: the TCG code cache."""
    return [(m.start, m.end) for m in parse_maps(maps_text)
            if m.executable and not m.path]
