"""The riscv64 Arch entry: what the launcher and the image builder take
from it (docs/architectures.md says why each value)."""
import struct

import pytest

from pyhost import abi, arch
from pyhost.arch import riscv64
from pyhost.image.store import recipe_name

RV = arch.get("riscv64")

# The first 64 bytes of Debian trixie's /boot/vmlinux-6.12.117+deb13-riscv64
# (linux-image-6.12.117+deb13-riscv64 6.12.117-1), as xxd shows them: "MZ"
# and a jump (the EFI stub's PE header), text_offset 2 MiB, image_size
# 0x1e6c000, flags 0 (little-endian), header version 0.2, "RISCV\0\0\0",
# "RSC\x05", the PE header at 0x40.
DEBIAN_HEADER = bytes.fromhex(
    "4d5a6f10600d0100000020000000000000c0e601000000000000000000000000"
    "0200000000000000000000000000000052495343560000005253430540000000")


def fake_image(magic2=b"RSC\x05", image_size=0x1000000, flags=0) -> bytes:
    """A RISC-V Image header (boot-image-header.rst) without the EFI stub."""
    head = struct.pack("<IIQQQIIQ", 0x0000006F, 0, 0x200000, image_size,
                       flags, 2, 0, 0)
    return head + b"RISCV\0\0\0" + magic2 + struct.pack("<I", 0) + \
        b"Linux version 6.12.0-t (x)\n"


def test_registered_with_its_qemu_machine_and_console():
    assert RV.qemu == "qemu-system-riscv64"
    assert RV.qemu_package == "qemu-system-riscv"
    assert RV.machine == "virt,aia=aplic-imsic"
    assert RV.console == "ttyS0" and RV.console_rdev == (4, 64)
    assert RV.debian_arch == "riscv64" and RV.elf_machine == "EM_RISCV"
    assert RV.dynamic_loader == "/lib/ld-linux-riscv64-lp64d.so.1"
    assert RV.default_recipe == "riscv64" and RV.kernel_file == "vmlinux"
    assert recipe_name("default", RV) == "riscv64"
    assert not RV.runs_on_host()


def test_cpu_keeps_qemus_pmu_and_vector_out():
    opts = dict(o.split("=") for o in RV.cpu.split(",")[1:])
    assert RV.cpu.split(",")[0] == "rv64"
    assert opts["v"] == "false" and opts["sscofpmf"] == "false"
    assert opts["pmu-mask"] == "0"
    assert opts["ssaia"] == opts["smaia"] == "true"
    blacklist = [a for a in RV.kernel_args
                 if a.startswith("initcall_blacklist=")]
    assert blacklist and {"pmu_sbi_devinit", "riscv_pmu_legacy_devinit"} \
        <= set(blacklist[0].split("=", 1)[1].split(","))


def test_kernel_half_is_bit_63_and_ram_starts_at_2_gib():
    assert RV.kernel_half_start == abi.RISCV64_KERNEL_HALF_START == 1 << 63
    assert RV.is_kernel(0xFFFFFFFF80000000)           # _start, nokaslr
    assert RV.is_kernel(0xFF60000000000000)           # sv57 linear map
    assert RV.is_kernel(0xFFFFFFD600000000)           # sv39 linear map
    assert not RV.is_kernel(0x00FFFFFFFFFFFFFF)       # sv57 user top
    assert RV.ram_offset(0x80200000) == 0x200000      # the kernel's load


def test_boot_kernel_reads_debians_header():
    blob = DEBIAN_HEADER + b"\0" * 64
    boot = RV.boot_kernel(blob)
    assert boot.image is blob
    assert boot.anchor == ("_start", 0xFFFFFFFF80000000)
    assert boot.manifest == {"image_size": "0x1e6c000",
                             "text_offset": "0x200000",
                             "header_version": "0.2", "pe": "yes"}
    assert RV.boot_kernel(fake_image()).manifest["pe"] == "no"


def test_boot_kernel_refuses_what_is_not_a_bootable_image():
    with pytest.raises(ValueError):
        RV.boot_kernel(fake_image(magic2=b"RSC\x04"))
    with pytest.raises(ValueError):                   # an arm64 Image
        RV.boot_kernel(b"\0" * 0x38 + b"ARM\x64" + b"\0" * 8)
    with pytest.raises(arch.UnbootableKernel):
        RV.boot_kernel(fake_image(image_size=0))
    with pytest.raises(arch.UnbootableKernel):
        RV.boot_kernel(fake_image(flags=1))
    with pytest.raises(ValueError):
        RV.extract_vmlinux(DEBIAN_HEADER)


def test_disassembler_takes_the_compressed_forms():
    pytest.importorskip("capstone")
    # c.ret (8082), then addi a0,a0,1 (00150513), c.nop (0001)
    got = [(i.mnemonic, i.size) for i in RV.disassembler().disasm(
        bytes.fromhex("828013051500" "0100"), 0)]
    assert got == [("c.jr", 2), ("addi", 4), ("c.nop", 2)]


def test_launcher_boots_virt_with_qemus_default_opensbi(argv_of):
    argv = argv_of(RV)
    assert "-bios" not in argv                        # fw_dynamic.bin
    assert argv[argv.index("-machine") + 1].startswith(
        "virt,aia=aplic-imsic,accel=tcg,")
    assert argv[argv.index("-cpu") + 1] == RV.cpu
    append = argv[argv.index("-append") + 1].split()
    assert "console=ttyS0" in append and set(RV.kernel_args) <= set(append)
    assert not set(arch.host().kernel_args) & set(append)


def test_runs_may_use_the_pmu_with_the_doorbell():
    """The riscv64 driver and plugin table are in: nothing refuses a run
    with the PMU (the launcher's refusal reads pmu_missing), and its
    overflow interrupt is the doorbell's MSI-X vectors."""
    assert RV.pmu_missing == "" and RV.overflow_doorbell


def test_task_path_follows_the_scheduler_from_tp():
    """current->se.cfs_rq->rq->curr, and the linear base read from
    kernel_map.va_pa_offset (offsets and addresses made up)."""
    offsets = {("task_struct", "se"): 0x100, ("sched_entity", "cfs_rq"): 0x20,
               ("cfs_rq", "rq"): 0x30, ("rq", "curr"): 0x40,
               ("kernel_mapping", "va_pa_offset"): 0x38}
    way = riscv64.task_path(lambda s, m: offsets[(s, m)],
                            {"kernel_map": 0xffffffff81000000}.__getitem__)
    assert way.path == (0x120, 0x30, 0x40)
    assert way.linear == "@0xffffffff81000038"
