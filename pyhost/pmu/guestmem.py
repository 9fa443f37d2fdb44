"""Bounds-checked access to guest physical memory.

Guest RAM is a memory-backend-file shared with QEMU, one contiguous range
of guest physical addresses (gpa) from the machine's RAM base (Arch.ram_base):
the file offset of a byte is its gpa less that base (on the pc machine,
below the low-memory hole, the gpa itself, so RAM is limited to
abi.MAX_RAM_MB).  Every access a guest can steer is checked here: inside RAM,
aligned, and never straddling the end.  Out-of-range input raises
``GuestMemoryError`` (the hypercall backend turns it into -EFAULT).
"""
from __future__ import annotations

import mmap
import os

from .. import abi


class GuestMemoryError(ValueError):
    """A guest-supplied address or size is not acceptable."""


class GuestMemory:
    """Guest RAM seen through a buffer (an mmap of the RAM file in real use)."""

    def __init__(self, buf, size: int | None = None, base: int = 0):
        self._buf = memoryview(buf)
        self.base = base            # the gpa of buf[0]
        self.size = len(self._buf) if size is None else size
        if self.size > abi.MAX_RAM_MB << 20:
            raise GuestMemoryError(f"guest RAM above {abi.MAX_RAM_MB} MiB "
                                   "is not supported")
        self._mmap = None
        self._fd = None

    @classmethod
    def open_file(cls, path: str, base: int = 0) -> "GuestMemory":
        """Map the guest RAM file read-write, shared with QEMU; its first
        byte is at gpa ``base``."""
        fd = os.open(path, os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            mm = mmap.mmap(fd, size, mmap.MAP_SHARED,
                           mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            raise
        mem = cls(mm, size, base)
        mem._mmap, mem._fd = mm, fd
        return mem

    def close(self) -> None:
        self._buf.release()
        if self._mmap is not None:
            self._mmap.close()
            os.close(self._fd)
            self._mmap = self._fd = None

    def check(self, gpa: int, size: int, align: int = 1) -> None:
        """Raise unless [gpa, gpa+size) lies in RAM and gpa is aligned."""
        if size <= 0 or gpa < 0:
            raise GuestMemoryError(f"bad range gpa={gpa:#x} size={size}")
        if gpa % align:
            raise GuestMemoryError(f"gpa {gpa:#x} not {align}-byte aligned")
        if gpa < self.base or gpa + size > self.base + self.size:
            raise GuestMemoryError(f"gpa {gpa:#x}+{size} outside guest RAM "
                                   f"({self.size:#x} bytes)")

    def read(self, gpa: int, size: int, align: int = 1) -> bytes:
        """Return a private copy of guest memory (read once, then validate)."""
        self.check(gpa, size, align)
        off = gpa - self.base
        return bytes(self._buf[off:off + size])

    def write(self, gpa: int, data: bytes, align: int = 1) -> None:
        self.check(gpa, len(data), align)
        off = gpa - self.base
        self._buf[off:off + len(data)] = data
