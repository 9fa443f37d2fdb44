"""The guest kernel's files: bzImage -> vmlinux, and what the builder
reads from ELF files (the PVH entry note, the first load address, the
banner, a module's ``.modinfo``), through pyelftools.

The bzImage's own XZ decompressor is slow under TCG, so the image boots
the extracted ELF vmlinux through its PVH entry point instead.
"""
from __future__ import annotations

import io
import lzma
import re
import struct
import zlib


_XZ_MAGIC = bytes.fromhex("fd377a585a00")
_GZ_MAGIC = b"\x1f\x8b\x08"
_ELF_MAGIC = b"\x7fELF"


def _decompress_at(blob: bytes, off: int) -> bytes | None:
    """Decompress the stream starting at ``off`` or return None."""
    try:
        if blob.startswith(_XZ_MAGIC, off):
            return lzma.LZMADecompressor(lzma.FORMAT_XZ).decompress(blob[off:])
        if blob.startswith(_GZ_MAGIC, off):
            return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(blob[off:])
    except (lzma.LZMAError, zlib.error, EOFError):
        return None
    return None


def _bzimage_payload_offset(blob: bytes) -> int | None:
    """Offset of the compressed payload per the x86 boot protocol
    (>= 2.08: payload_offset at 0x248, relative to the protected-mode
    code, which starts after (setup_sects + 1) * 512 bytes)."""
    if len(blob) < 0x250 or blob[0x202:0x206] != b"HdrS":
        return None
    version = struct.unpack_from("<H", blob, 0x206)[0]
    if version < 0x208:
        return None
    setup_sects = blob[0x1F1] or 4
    payload_offset = struct.unpack_from("<I", blob, 0x248)[0]
    off = (setup_sects + 1) * 512 + payload_offset
    return off if off < len(blob) else None


def extract_vmlinux(blob: bytes) -> bytes:
    """Return the ELF kernel inside a bzImage (XZ or gzip payload).

    Uses the boot header's payload offset when present, else scans for
    the XZ and gzip magics; every candidate is tried until one
    decompresses to an ELF image.
    """
    candidates: list[int] = []
    hinted = _bzimage_payload_offset(blob)
    if hinted is not None:
        candidates.append(hinted)
    for magic in (_XZ_MAGIC, _GZ_MAGIC):
        start = 0
        while (hit := blob.find(magic, start)) >= 0:
            if hit not in candidates:
                candidates.append(hit)
            start = hit + 1
    for off in candidates:
        out = _decompress_at(blob, off)
        if out and out.startswith(_ELF_MAGIC):
            return out
    raise ValueError("no XZ or gzip stream in the bzImage decompresses to an "
                     f"ELF image ({len(candidates)} candidate(s) tried)")


# The Xen ELF note QEMU boots a vmlinux by (PVH): XEN_ELFNOTE_PHYS32_ENTRY.
XEN_NOTE_NAME = "Xen"
XEN_ELFNOTE_PHYS32_ENTRY = 18


def open_elf(data: bytes):
    """pyelftools' ELFFile over an in-memory ELF64; ValueError if it is
    not one.  pyelftools is imported here, not at the top: it costs ~20 ms
    that `pvperf run`, which reads no ELF file, should not pay."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    if not data.startswith(_ELF_MAGIC):
        raise ValueError("not an ELF file")
    try:
        elf = ELFFile(io.BytesIO(data))
    except ELFError as e:
        raise ValueError(f"malformed ELF file: {e}") from e
    if elf.elfclass != 64 or not elf.little_endian:
        raise ValueError("not a little-endian ELF64 file")
    return elf


def pvh_entry(vmlinux: bytes) -> int | None:
    """The PVH entry point (Xen note PHYS32_ENTRY) QEMU boots, or None."""
    for seg in open_elf(vmlinux).iter_segments("PT_NOTE"):
        for note in seg.iter_notes():
            if note["n_name"] == XEN_NOTE_NAME and \
                    note["n_type"] == XEN_ELFNOTE_PHYS32_ENTRY:
                desc = note["n_descdata"]
                return struct.unpack_from("<I", desc.ljust(4, b"\0"))[0]
    return None


def first_load_vaddr(vmlinux: bytes) -> int | None:
    """The virtual address of the first PT_LOAD segment (_text's)."""
    for seg in open_elf(vmlinux).iter_segments("PT_LOAD"):
        return seg["p_vaddr"]
    return None


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
