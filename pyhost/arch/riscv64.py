"""riscv64 guests: QEMU's virt machine with OpenSBI, booted from the
riscv64 Image.

Debian's riscv64 kernel package ships ``/boot/vmlinux-*``, an
uncompressed Image with the RISC-V boot header (and a PE32+ header for
EFI, which ``qemu -kernel`` ignores), booted as it is: OpenSBI's
``fw_dynamic`` (QEMU's default -bios on virt) jumps to it in S-mode.
Measured facts behind each choice: docs/architectures.md.
"""
from __future__ import annotations

import struct

from .. import abi
from .base import (Arch, BootKernel, StubRegister, TaskPath,
                   UnbootableKernel, curr_of_current_rq)

# The RISC-V Image header (Documentation/arch/riscv/boot-image-header.rst):
# code0, code1 (u32: "MZ" and a jump when the EFI stub is in), text_offset
# (u64 at 8), image_size (u64 at 16), flags (u64 at 24), version (u32 at
# 32: major << 16 | minor), then magic "RISCV\0\0\0" at 48, magic2
# "RSC\x05" at 56 (the one checked: "RISCV" is deprecated but present),
# the PE header's offset at 60.
IMAGE_MAGIC = b"RSC\x05"
IMAGE_MAGIC_OFFSET = 56
# 64-bit kernels are linked at KERNEL_LINK_ADDR = the top 2 GiB of the
# address space whatever the paging mode (arch/riscv/include/asm/page.h);
# _start is the Image's first byte.  The test boot (nokaslr) checks
# System.map against it.
KERNEL_LINK_ADDR = 0xFFFFFFFF80000000
# virt's RAM starts at 2 GiB, one contiguous range; OpenSBI keeps the
# first 512 KiB of it (reserved in the device tree), the kernel loads
# 2 MiB up.
RAM_BASE = 0x80000000


# The supervisor timer's compare CSR (Sstc), which the guest kernel's
# timer writes (its clock event device: drivers/clocksource/timer-riscv.c).
# QEMU 10.0 migrates its value (target/riscv/machine.c:458,
# VMSTATE_UINT64(env.stimecmp)) but not the QEMUTimer behind it
# (env->stimer), and riscv_cpu_post_load re-arms nothing: only a write of
# the CSR does (csr.c:1728 write_stimecmp -> time_helper.c
# riscv_timer_write_timecmp).  So a restored hart gets no timer interrupt
# until its kernel writes stimecmp again, and a kernel that believes its
# tick is pending never does: the guest idles in wfi for good
# (docs/checkpoints.md).  Writing the CSR back with its own value, before
# the vCPUs run, arms the timer (or raises STIP if the time is past);
# upstream QEMU migrates the timer itself (b0daaa172a1c
# "target/riscv: Save stimer and vstimer in CPU vmstate", the riscv pull
# of 2025-10-03, after 10.1; kept out of stable releases: it adds a
# subsection to the stream).  The CSR feature is built at hart realize,
# before the ACLINT gives the hart its time source, so Sstc's predicate
# leaves stimecmp out of riscv-csr.xml (10.0.2: not listed), but the
# feature's base + 0x14D still reaches it (gdbstub.c gdb_write_register
# -> riscv_gdb_set_csr); sstatus (0x100) shows the base.
CSR_SSTATUS = 0x100
CSR_STIMECMP = 0x14D
STIMECMP = StubRegister("riscv-csr.xml", "sstatus", CSR_SSTATUS,
                        CSR_STIMECMP)


def is_image(blob: bytes) -> bool:
    return blob[IMAGE_MAGIC_OFFSET:IMAGE_MAGIC_OFFSET + 4] == IMAGE_MAGIC


def boot_kernel(vmlinux: bytes) -> BootKernel:
    """The package's Image, booted as it is (its header checked)."""
    if not is_image(vmlinux):
        raise ValueError("not a riscv64 Image (no RSC\\x05 magic at 0x38)")
    text_offset, image_size, flags = struct.unpack_from("<QQQ", vmlinux, 8)
    version = struct.unpack_from("<I", vmlinux, 32)[0]
    if image_size == 0:
        raise UnbootableKernel("is an Image without its size (image_size 0)",
                               "choose a newer kernel")
    if flags & 1:
        raise UnbootableKernel("is a big-endian Image", "choose a "
                               "little-endian kernel")
    return BootKernel(vmlinux, {"image_size": f"{image_size:#x}",
                                "text_offset": f"{text_offset:#x}",
                                "header_version":
                                    f"{version >> 16}.{version & 0xffff}",
                                "pe": "yes" if vmlinux[:2] == b"MZ" else "no"},
                      ("_start", KERNEL_LINK_ADDR))


def extract_vmlinux(blob: bytes) -> bytes:
    """An Image holds no ELF kernel (the ELF vmlinux is in the -dbg
    package only)."""
    raise ValueError("a riscv64 Image holds no ELF vmlinux")


def boot_entry(vmlinux: bytes) -> int | None:
    """QEMU's virt loads an ELF riscv64 kernel at its ELF entry point."""
    from ..elf import open_elf
    return open_elf(vmlinux).header["e_entry"]


def task_path(member_offset, symbol) -> TaskPath:
    """From tp (``current`` at S-mode: still the task switched from when
    switch_mm writes satp, before switch_to): current->se.cfs_rq->rq->curr,
    the task switched to (CONFIG_FAIR_GROUP_SCHED), as on arm64.  The
    linear map's base is read, not assumed: PAGE_OFFSET follows the paging
    mode the hart offers (Sv39/48/57), so __pa(pgd) = pgd -
    kernel_map.va_pa_offset (arch/riscv/include/asm/page.h); Debian's
    riscv64 System.map lists the data symbol ``kernel_map`` (profiles
    boot nokaslr)."""
    va_pa_offset = symbol("kernel_map") + member_offset("kernel_mapping",
                                                        "va_pa_offset")
    return TaskPath(
        path=curr_of_current_rq(member_offset),
        linear=f"@{va_pa_offset:#x}")


ARCH = Arch(
    name="riscv64",
    qemu="qemu-system-riscv64",
    qemu_package="qemu-system-riscv",
    # aia=aplic-imsic: wired interrupts go through the APLIC as MSIs and
    # PCI MSI-X vectors (the ivshmem doorbell's: the overflow interrupt)
    # reach each hart's IMSIC; the default PLIC has no MSI controller at
    # all.
    machine="virt,aia=aplic-imsic",
    # QEMU's generic rv64: RV64GC + H, Zba/Zbb/Zbc/Zbs, Zicbom/Zicboz,
    # Sstc (what Debian's kernel and trixie's RV64GC userland use) and
    # explicitly
    #  - no vector (v=false): valgrind's riscv64 port (3.25+) decodes no
    #    RVV, and with V the kernel would copy user memory and checksum
    #    with vector loops (RISCV_ISA_V), costly under TCG; glibc 2.41
    #    picks no RVV string functions either way, so user counts are
    #    what an RV64GC board runs;
    #  - ssaia/smaia on, for the IMSIC the machine has;
    #  - QEMU's own PMU out of perf's way: sscofpmf off (no overflow
    #    interrupt, so no sampling through it) and pmu-mask=0 (no
    #    programmable hpmcounters).  mcycle/minstret stay (Zicntr: the
    #    kernel reads the time CSR through it), which the kernel's SBI
    #    PMU driver would offer as cycles/instructions read from the
    #    host's TSC without -icount: kernel_args blacklists that driver.
    cpu="rv64,v=false,ssaia=true,smaia=true,sscofpmf=false,pmu-mask=0",
    firmware="",                 # QEMU's default: OpenSBI fw_dynamic
    # the overflow interrupt: the ivshmem-doorbell's MSI-X vectors, which
    # aia=aplic-imsic delivers to each hart's IMSIC (RISC-V has no NMI a
    # supervisor can be sent)
    overflow_doorbell=True,
    qmp_nmi=False,
    console="ttyS0",             # virt's NS16550A UART
    console_rdev=(4, 64),
    # QEMU's PMU (through OpenSBI's SBI PMU, or the legacy counter
    # driver) must not be the PMU a guest's perf opens: neither driver
    # is initialised (both are built in), so perf finds no hardware
    # PMU besides pvperf's.
    kernel_args=("initcall_blacklist=pmu_sbi_devinit,riscv_pmu_legacy_devinit",),
    # every kernel address has bit 63 set, for sv39, sv48 and sv57 (the
    # ABI's fact, which the plugin checks too)
    kernel_half_start=abi.RISCV64_KERNEL_HALF_START,
    ram_base=RAM_BASE,
    boot_kernel=boot_kernel,
    extract_vmlinux=extract_vmlinux,
    boot_entry=boot_entry,
    elf_machine="EM_RISCV",
    debian_arch="riscv64",
    default_recipe="riscv64",
    dynamic_loader="/lib/ld-linux-riscv64-lp64d.so.1",
    # RV64GC code: the compressed forms too
    capstone=("CS_ARCH_RISCV", "CS_MODE_RISCV64|CS_MODE_RISCVC"),
    task_path=task_path,
    # a 32-byte header then 16-byte stubs: auipc, ld, jalr t1, nop
    plt_entry=16,
    kernel_file="vmlinux",
    rewrite_on_restore=(STIMECMP,),
)
