"""Cache geometries as cachegrind spells them: "SIZE,ASSOC,LINE" (bytes,
ways, bytes), checked by cachegrind's rules before QEMU starts, so a bad
``--I1``/``--D1``/``--LL`` is a one-line usage error.  The plugin checks
the same rules again (qemu_plugin/pvperf/cachesim.c cache_geom_check;
tests/unit/pmu/test_geometry.py runs the C unit test's cases through this file).

TLBs (``--iTLB``/``--dTLB``) are caches of pages, spelt "ENTRIES,ASSOC,
PAGE" (entries, ways, page bytes): the same rules on the cache of
ENTRIES * PAGE bytes with PAGE-byte lines, pages from 4 KiB to 1 GiB.

The rules: the set count (size / (assoc * line)) and the line size are
powers of two, lines at least 16 bytes, the cache larger than a line, no
more ways than lines; and, for pvperf, lines no larger than a page.  The
size itself need not be a power of two (12 MiB, 12 ways is fine).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

MIN_LINE = 16
MAX_LINE = 4096         # the guest page: runtime code addresses move by pages

# Defaults (docs/events.md), as the plugin has them.
DEFAULT_I1 = "32768,8,64"
DEFAULT_D1 = "32768,8,64"
DEFAULT_LL = "8388608,16,64"
DEFAULT_ITLB = "128,8,4096"
DEFAULT_DTLB = "64,4,4096"
# The timing model's penalties in cycles (--penalties NAME=CYCLES).
DEFAULT_PENALTIES = {"L1": 10, "LL": 200, "TLB": 30, "BR": 15}
MIN_PAGE = 4096
MAX_PAGE = 1 << 30


def parse_penalties(text: str | None) -> dict[str, int]:
    """"L1=10,LL=200" -> {"L1": 10, "LL": 200} (cycles, 0..100000; names
    those of DEFAULT_PENALTIES), or ValueError; None or "" -> {}."""
    out: dict[str, int] = {}
    for item in (text or "").split(","):
        if not item:
            continue
        name, _, cycles = item.partition("=")
        if name not in DEFAULT_PENALTIES or not cycles.isdigit() or \
                int(cycles) > 100000:
            raise ValueError(f"{item}: expected NAME=CYCLES, NAME one of "
                             f"{', '.join(DEFAULT_PENALTIES)}, "
                             "CYCLES 0..100000")
        out[name] = int(cycles)
    return out


def _three_numbers(text: str, usage: str) -> tuple[int, int, int]:
    """"32768,8,64" -> (32768, 8, 64), or ValueError(usage)."""
    if not re.fullmatch(r"\d+,\d+,\d+", text.strip()):
        raise ValueError(usage)
    a, b, c = (int(f) for f in text.split(","))
    return a, b, c


def _pow2(x: int) -> bool:
    return x > 0 and not x & (x - 1)


@dataclass(frozen=True)
class CacheGeometry:
    size: int
    assoc: int
    line: int

    def __str__(self) -> str:
        return f"{self.size},{self.assoc},{self.line}"

    @property
    def sets(self) -> int:
        return self.size // (self.assoc * self.line)


def parse_geometry(text: str) -> CacheGeometry:
    """"32768,8,64" -> CacheGeometry, or ValueError saying what is wrong."""
    size, assoc, line = _three_numbers(
        text, "expected SIZE,ASSOC,LINE (bytes, ways, bytes)")
    if not (size and assoc and line):
        raise ValueError("size, associativity and line size must be "
                         "positive")
    if not _pow2(line):
        raise ValueError("line size is not a power of two")
    if line < MIN_LINE:
        raise ValueError(f"line size is below {MIN_LINE} bytes")
    if size <= line:
        raise ValueError("size is not greater than the line size")
    if assoc > size // line:
        raise ValueError("associativity exceeds size / line size")
    if size % (assoc * line) or not _pow2(size // (assoc * line)):
        raise ValueError("set count (size / (assoc * line)) is not a power "
                         "of two")
    if line > MAX_LINE:
        raise ValueError(f"line size above the page size ({MAX_LINE})")
    return CacheGeometry(size, assoc, line)


@dataclass(frozen=True)
class TlbGeometry:
    entries: int
    assoc: int
    page: int

    def __str__(self) -> str:
        return f"{self.entries},{self.assoc},{self.page}"


def parse_tlb(text: str) -> TlbGeometry:
    """"64,4,4096" -> TlbGeometry, or ValueError saying what is wrong."""
    entries, assoc, page = _three_numbers(
        text, "expected ENTRIES,ASSOC,PAGE (entries, ways, bytes)")
    if not _pow2(page) or not MIN_PAGE <= page <= MAX_PAGE:
        raise ValueError("page size is not a power of two from 4096 to "
                         "1 GiB")
    if not entries or entries * page >= 1 << 32:
        raise ValueError("entries * page size must be 1 .. 4 GiB - 1")
    if not assoc:
        raise ValueError("associativity must be positive")
    if entries < 2:
        raise ValueError("a TLB needs at least two entries")
    if assoc > entries:
        raise ValueError("associativity exceeds the entry count")
    if entries % assoc or not _pow2(entries // assoc):
        raise ValueError("set count (entries / assoc) is not a power of two")
    return TlbGeometry(entries, assoc, page)
