"""Reading ELF files held in memory (pyelftools), for the image builder
and the architectures' kernel readers."""
from __future__ import annotations

import io

ELF_MAGIC = b"\x7fELF"


def open_elf(data: bytes):
    """pyelftools' ELFFile over an in-memory ELF64; ValueError if it is
    not one.  pyelftools is imported here, not at the top: it costs ~20 ms
    that `pvperf run`, which reads no ELF file, should not pay."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    if not data.startswith(ELF_MAGIC):
        raise ValueError("not an ELF file")
    try:
        elf = ELFFile(io.BytesIO(data))
    except ELFError as e:
        raise ValueError(f"malformed ELF file: {e}") from e
    if elf.elfclass != 64 or not elf.little_endian:
        raise ValueError("not a little-endian ELF64 file")
    return elf


def first_load_vaddr(data: bytes) -> int | None:
    """The virtual address of an ELF file's first PT_LOAD segment (a
    kernel's _text)."""
    for seg in open_elf(data).iter_segments("PT_LOAD"):
        return seg["p_vaddr"]
    return None
