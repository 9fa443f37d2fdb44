"""Where guest RAM sits: guest physical addresses (gpa) and RAM file offsets.

QEMU backs all of a machine's RAM with one memory-backend-file and maps
the file into the guest physical address space as consecutive ranges:
the file's bytes in order, the ranges in rising gpa, each range's first
byte at the file offset where the previous one ended.  A machine has one
range from its RAM base or two around a hole (a PC's RAM below its PCI
hole, the rest from 4 GiB): Arch.ram_base and Arch.ram_hole, each
architecture's module says why.  This is the one place that turns a gpa
into a file offset and back on the host; the plugin's twin is
qemu_plugin/pvperf/ramlayout.c (tests/unit/arch/test_ram.py runs both
on the same cases).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RamRange:
    """``size`` bytes of RAM at guest physical ``gpa``, file ``offset``."""
    gpa: int
    offset: int
    size: int


class RamLayout:
    """The ranges of ``size`` bytes of RAM from gpa ``base``, skipping the
    gpa range ``hole`` = (start, end) if RAM reaches it."""

    def __init__(self, base: int, size: int,
                 hole: tuple[int, int] | None = None):
        if size < 0 or base < 0:
            raise ValueError(f"bad RAM: base {base:#x}, size {size:#x}")
        if hole is not None and not base < hole[0] < hole[1]:
            raise ValueError(f"bad RAM hole {hole[0]:#x}..{hole[1]:#x} "
                             f"for RAM from {base:#x}")
        self.size = size
        low = size if hole is None else min(size, hole[0] - base)
        ranges = [RamRange(base, 0, low)] if low else []
        if low < size:
            ranges.append(RamRange(hole[1], low, size - low))
        self.ranges: tuple[RamRange, ...] = tuple(ranges)

    def __repr__(self) -> str:
        return "RamLayout(" + ", ".join(
            f"gpa {r.gpa:#x}+{r.size:#x}@{r.offset:#x}"
            for r in self.ranges) + ")"

    def offset(self, gpa: int, size: int = 1) -> int | None:
        """The file offset of [gpa, gpa + size) if it lies inside one
        range, else None (outside RAM, or straddling a range's end)."""
        for r in self.ranges:
            if r.gpa <= gpa and gpa + size <= r.gpa + r.size:
                return r.offset + gpa - r.gpa
        return None

    def gpa(self, offset: int) -> int | None:
        """The gpa of the file's byte at ``offset``, None past the end."""
        for r in self.ranges:
            if r.offset <= offset < r.offset + r.size:
                return r.gpa + offset - r.offset
        return None
