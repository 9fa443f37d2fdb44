"""x86_64 guests: QEMU's pc machine, booted from the ELF vmlinux.

The Debian package ships a bzImage whose own XZ decompressor is slow
under TCG, so the image boots the ELF vmlinux extracted from it, through
its PVH entry point (``qemu -kernel vmlinux``).
"""
from __future__ import annotations

import lzma
import shutil
import struct
import subprocess
import zlib

from ..elf import ELF_MAGIC, first_load_vaddr, open_elf
from .. import abi
from .base import Arch, BootKernel, TaskPath, UnbootableKernel

_XZ_MAGIC = bytes.fromhex("fd377a585a00")
_GZ_MAGIC = b"\x1f\x8b\x08"
# Debian's 6.12 compresses its bzImage with zstd (6.1: XZ)
_ZSTD_MAGIC = bytes.fromhex("28b52ffd")


def _unzstd(stream: bytes) -> bytes | None:
    """The first zstd frame of ``stream``, by the zstd program (Python's
    standard library has no zstd before 3.14).  The kernel appends the
    decompressed size after the frame, which zstd reports as trailing
    garbage after writing the frame's data: the output is what counts."""
    if shutil.which("zstd") is None:
        raise UnbootableKernel("is compressed with zstd, and the zstd "
                               "program is not installed",
                               "install it: apt-get install zstd")
    proc = subprocess.run(["zstd", "-dcq"], input=stream,
                          capture_output=True, check=False)
    return proc.stdout or None


def _decompress_at(blob: bytes, off: int) -> bytes | None:
    """Decompress the stream starting at ``off`` or return None."""
    try:
        if blob.startswith(_XZ_MAGIC, off):
            return lzma.LZMADecompressor(lzma.FORMAT_XZ).decompress(blob[off:])
        if blob.startswith(_GZ_MAGIC, off):
            return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(blob[off:])
        if blob.startswith(_ZSTD_MAGIC, off):
            return _unzstd(blob[off:])
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
    """Return the ELF kernel inside a bzImage (XZ, gzip or zstd payload).

    Uses the boot header's payload offset when present, else scans for
    the XZ and gzip magics; every candidate is tried until one
    decompresses to an ELF image.  UnbootableKernel if the payload is
    zstd and the zstd program is missing.
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
        if out and out.startswith(ELF_MAGIC):
            return out
    raise ValueError("no XZ, gzip or zstd stream in the bzImage decompresses to an "
                     f"ELF image ({len(candidates)} candidate(s) tried)")


# The Xen ELF note QEMU boots a vmlinux by (PVH): XEN_ELFNOTE_PHYS32_ENTRY.
XEN_NOTE_NAME = "Xen"
XEN_ELFNOTE_PHYS32_ENTRY = 18


def pvh_entry(vmlinux: bytes) -> int | None:
    """The PVH entry point (Xen note PHYS32_ENTRY) QEMU boots, or None."""
    for seg in open_elf(vmlinux).iter_segments("PT_NOTE"):
        for note in seg.iter_notes():
            if note["n_name"] == XEN_NOTE_NAME and \
                    note["n_type"] == XEN_ELFNOTE_PHYS32_ENTRY:
                desc = note["n_descdata"]
                return struct.unpack_from("<I", desc.ljust(4, b"\0"))[0]
    return None


def boot_kernel(vmlinuz: bytes) -> BootKernel:
    """The ELF vmlinux of the package's bzImage, which must have a PVH
    entry point (QEMU boots an ELF kernel through it only)."""
    elf = extract_vmlinux(vmlinuz)
    entry = pvh_entry(elf)
    if entry is None:
        raise UnbootableKernel("has no PVH entry point (CONFIG_PVH)",
                               "choose a kernel built with CONFIG_PVH=y")
    return BootKernel(elf, {"pvh_entry": f"{entry:#x}"},
                      ("_text", first_load_vaddr(elf)))


def task_path(member_offset, symbol) -> TaskPath:
    """runqueues.curr of this CPU from the kernel GS base (the per-cpu
    base; ``runqueues`` is a per-cpu offset in System.map); tables are in
    the linear map at page_offset_base (randomised by KASLR, so read)."""
    return TaskPath(
        path=(symbol("runqueues") + member_offset("rq", "curr"),),
        linear=f"@{symbol('page_offset_base'):#x}")


# The pc machine's RAM below the PCI hole; the rest from 4 GiB.  Pinned
# (QEMU's default is 3.5 GiB for RAM under 3.5 GiB, else 3 GiB: QEMU 10.0
# hw/i386/pc_piix.c pc_init1) so that the layout is one rule that pvperf
# states, whatever a later machine version's default.
RAM_BELOW_4G = 3 << 30


ARCH = Arch(
    name="x86_64",
    qemu="qemu-system-x86_64",
    qemu_package="qemu-system-x86",
    machine=f"pc,max-ram-below-4g={RAM_BELOW_4G}",
    cpu="max",
    # qboot (QEMU's minimal firmware, in qemu-system-data next to SeaBIOS):
    # it hands -kernel over without SeaBIOS's POST, 0.25 s sooner under TCG.
    firmware="qboot.rom",
    overflow_doorbell=True,
    qmp_nmi=True,
    console="ttyS0",
    console_rdev=(4, 64),
    # The guest kernel's own memcpy/memset/clear_page instead of `rep
    # movsb` / `rep stosb` (ERMS, FSRM), which TCG runs one byte per
    # iteration: 0.55 s less to boot (most of it unpacking the 40 MB
    # initramfs), and every page the guest clears or copies later is
    # cheaper too.  The kernel's view only: user code's CPUID, hence
    # libc's choices and every `:u` count (the tests' valgrind
    # references), is unchanged.
    kernel_args=("clearcpuid=erms,fsrm",),
    # 4-level paging: the canonical upper half, where the marker store
    # must run (the ABI's fact: the plugin checks it too).
    kernel_half_start=abi.X86_64_KERNEL_HALF_START,
    # the pc machine's RAM starts at 0; above RAM_BELOW_4G it continues at
    # 4 GiB (QEMU's "ram-above-4g" alias of the RAM file, pc.c
    # pc_memory_init; RAM reaching the AMD HyperTransport hole at 1012 GiB
    # would start at 1 TiB instead, far above abi.MAX_RAM_MB)
    ram_base=0,
    ram_hole=(RAM_BELOW_4G, 1 << 32),
    boot_kernel=boot_kernel,
    extract_vmlinux=extract_vmlinux,
    boot_entry=pvh_entry,
    elf_machine="EM_X86_64",
    debian_arch="amd64",
    default_recipe="x86_64",
    dynamic_loader="/lib64/ld-linux-x86-64.so.2",
    capstone=("CS_ARCH_X86", "CS_MODE_64"),
    task_path=task_path,
    # PLT0 (16 bytes) then 16-byte stubs: jmp *GOT; push n; jmp PLT0
    plt_entry=16,
)
