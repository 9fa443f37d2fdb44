"""Bounds-checked access to guest physical memory.

Guest RAM is a memory-backend-file shared with QEMU, laid out in guest
physical memory (gpa) as the machine's RamLayout says (pyhost/ram.py: one
range from its RAM base, or two around the pc machine's hole below
4 GiB).  Every access a guest can steer is checked here: inside one range
of RAM, aligned, and never straddling a range's end.  Out-of-range input
raises ``GuestMemoryError`` (the hypercall backend turns it into -EFAULT).
"""
from __future__ import annotations

import mmap
import os

from .. import abi
from ..ram import RamLayout


class GuestMemoryError(ValueError):
    """A guest-supplied address or size is not acceptable."""


class GuestMemory:
    """Guest RAM seen through a buffer (an mmap of the RAM file in real use)."""

    def __init__(self, buf, layout: RamLayout | None = None):
        """``layout``: where buf's bytes sit in guest physical memory
        (default: all of buf from gpa 0)."""
        self._buf = memoryview(buf)
        self.layout = layout or RamLayout(0, len(self._buf))
        self.size = self.layout.size
        if self.size > abi.MAX_RAM_MB << 20:
            raise GuestMemoryError(f"guest RAM above {abi.MAX_RAM_MB} MiB "
                                   "is not supported")
        self._mmap = None
        self._fd = None

    @classmethod
    def open_file(cls, path: str, layout: RamLayout) -> "GuestMemory":
        """Map the guest RAM file read-write, shared with QEMU; ``layout``
        says where its bytes are in guest physical memory."""
        fd = os.open(path, os.O_RDWR)
        try:
            if os.fstat(fd).st_size < layout.size:
                raise GuestMemoryError(f"{path} is smaller than {layout}")
            mm = mmap.mmap(fd, layout.size, mmap.MAP_SHARED,
                           mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            raise
        mem = cls(mm, layout)
        mem._mmap, mem._fd = mm, fd
        return mem

    def close(self) -> None:
        self._buf.release()
        if self._mmap is not None:
            self._mmap.close()
            os.close(self._fd)
            self._mmap = self._fd = None

    def check(self, gpa: int, size: int, align: int = 1) -> int:
        """The file offset of [gpa, gpa+size); raise unless it lies in one
        range of RAM and gpa is aligned."""
        if size <= 0 or gpa < 0:
            raise GuestMemoryError(f"bad range gpa={gpa:#x} size={size}")
        if gpa % align:
            raise GuestMemoryError(f"gpa {gpa:#x} not {align}-byte aligned")
        off = self.layout.offset(gpa, size)
        if off is None:
            raise GuestMemoryError(f"gpa {gpa:#x}+{size} outside guest RAM "
                                   f"({self.layout})")
        return off

    def read(self, gpa: int, size: int, align: int = 1) -> bytes:
        """Return a private copy of guest memory (read once, then validate)."""
        off = self.check(gpa, size, align)
        return bytes(self._buf[off:off + size])

    def write(self, gpa: int, data: bytes, align: int = 1) -> None:
        off = self.check(gpa, len(data), align)
        self._buf[off:off + len(data)] = data
