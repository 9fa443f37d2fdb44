"""aarch64 guests: QEMU's virt machine, booted from the arm64 Image.

Debian's arm64 "vmlinuz" is an uncompressed Image (no self-decompressor,
unlike x86's bzImage), which ``qemu -kernel`` boots as it is on virt
without firmware.  Measured facts behind each choice: docs/architectures.md.
"""
from __future__ import annotations

import struct

from .. import abi
from .base import (Arch, BootKernel, TaskPath, UnbootableKernel,
                   curr_of_current_rq)

# The arm64 boot protocol's Image header (Documentation/arm64/booting.rst):
# magic "ARM\x64" at 0x38, little-endian; text_offset at 8, image_size at 16.
IMAGE_MAGIC = b"ARM\x64"
IMAGE_MAGIC_OFFSET = 0x38
# Where 6.1 links the kernel with 48-bit virtual addresses: _text at
# KIMAGE_VADDR = MODULES_END = the start of the linear map's end + 128 MiB
# of module space; /proc/kallsyms lists no _text on arm64, but _stext,
# one SEGMENT_ALIGN (64 KiB) after it (vmlinux.lds: .head.text, then
# .text aligned).  The test boot (nokaslr) checks System.map against it.
KIMAGE_VADDR = 0xFFFF800008000000
STEXT = KIMAGE_VADDR + 0x10000


def is_image(blob: bytes) -> bool:
    return blob[IMAGE_MAGIC_OFFSET:IMAGE_MAGIC_OFFSET + 4] == IMAGE_MAGIC


def boot_kernel(vmlinuz: bytes) -> BootKernel:
    """The package's Image, booted as it is (its header checked)."""
    if not is_image(vmlinuz):
        raise ValueError("not an arm64 Image (no ARM\\x64 magic at 0x38)")
    text_offset, image_size = struct.unpack_from("<QQ", vmlinuz, 8)
    if image_size == 0:
        raise UnbootableKernel("is an Image older than Linux 3.17 "
                               "(image_size 0)", "choose a newer kernel")
    return BootKernel(vmlinuz, {"image_size": f"{image_size:#x}",
                                "text_offset": f"{text_offset:#x}"},
                      ("_stext", STEXT))


def extract_vmlinux(blob: bytes) -> bytes:
    """An Image holds no ELF kernel (the ELF vmlinux is in the -dbg
    package only)."""
    raise ValueError("an arm64 Image holds no ELF vmlinux")


def boot_entry(vmlinux: bytes) -> int | None:
    """QEMU's virt boots an ELF arm64 kernel at its ELF entry point."""
    from ..elf import open_elf
    return open_elf(vmlinux).header["e_entry"]


# Linux 6.1, 4K pages, VA_BITS 48 (Debian's arm64 config): the linear map
# starts at PAGE_OFFSET = -(1 << 48), at physical address PHYS_OFFSET =
# memstart_addr, which without KASLR's linear-map randomisation (pvperf
# profile boots nokaslr) is the start of RAM rounded down to
# ARM64_MEMSTART_ALIGN (1 GiB with 4K pages: PUD_SHIFT).  A table's
# physical address is its pgd pointer - PAGE_OFFSET + PHYS_OFFSET.
PAGE_OFFSET = 0xFFFF000000000000
MEMSTART_ALIGN = 1 << 30
RAM_BASE = 0x40000000


def task_path(member_offset, symbol) -> TaskPath:
    """From SP_EL0 (``current``, still the task switched from when the
    TTBR0 write runs): current->se.cfs_rq->rq->curr, the task switched to
    (CONFIG_FAIR_GROUP_SCHED).  Debian's arm64 kallsyms has no data
    symbols (no CONFIG_KALLSYMS_ALL): no ``runqueues``, no
    ``memstart_addr``, so the path starts from a register and the linear
    map's base is a constant."""
    linear = (PAGE_OFFSET - (RAM_BASE & -MEMSTART_ALIGN)) % (1 << 64)
    return TaskPath(
        path=curr_of_current_rq(member_offset),
        linear=f"{linear:#x}")


ARCH = Arch(
    name="aarch64",
    qemu="qemu-system-aarch64",
    qemu_package="qemu-system-arm",
    machine="virt",
    # A named core instead of `max`: `max` brings pointer authentication
    # (QARMA5, slow under TCG: Debian's kernel signs every non-leaf
    # function; ~1.8x the boot time), SVE and MTE, which valgrind 3.19
    # and capstone 4 do not handle.  pmu=off: QEMU's own PMUv3 out of the
    # device tree, so the guest's PMU is pvperf's.
    cpu="neoverse-n1,pmu=off",
    firmware="",                 # virt boots -kernel without firmware
    # The overflow interrupt: an ivshmem-doorbell MSI-X vector through
    # virt's default GICv2 and its GICv2m frame (no ITS needed: the
    # prototype measured 135 us round trips against 238 us through
    # GICv3's ITS; GICv2 serves up to 8 vCPUs).  virt provides no NMI
    # (QMP inject-nmi: "machine does not provide NMIs"), so deterministic
    # runs use the doorbell too (docs/architectures.md).
    overflow_doorbell=True,
    qmp_nmi=False,
    console="ttyAMA0",           # the PL011 UART
    console_rdev=(204, 64),
    kernel_args=(),
    # 48-bit VA: TTBR1's range, 0xffff000000000000 up (bit 55 set);
    # the ABI's fact, which the plugin checks too.
    kernel_half_start=abi.AARCH64_KERNEL_HALF_START,
    # virt's RAM starts at 1 GiB, one contiguous range (checked both ways
    # through the RAM file, docs/architectures.md).
    ram_base=RAM_BASE,
    boot_kernel=boot_kernel,
    extract_vmlinux=extract_vmlinux,
    boot_entry=boot_entry,
    elf_machine="EM_AARCH64",
    debian_arch="arm64",
    default_recipe="aarch64",
    dynamic_loader="/lib/ld-linux-aarch64.so.1",
    capstone=("CS_ARCH_ARM64", "CS_MODE_ARM"),
    task_path=task_path,
    # a 32-byte header then 16-byte stubs: adrp, ldr, add, br x17
    plt_entry=16,
    # virt's GICv2 (above) serves 8 vCPUs; above 8, GICv3 and the
    # doorbell's MSI-X through its ITS (slower round trips, as measured
    # above, so only where GICv2 cannot serve: smp 16 counted and sampled
    # exactly with it, docs/options.md)
    machine_above=(8, "virt,gic-version=3"),
)
