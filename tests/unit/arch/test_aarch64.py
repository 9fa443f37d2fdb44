"""The aarch64 Arch entry: what the launcher and the image builder take
from it (docs/architectures.md says why each value)."""
import struct

import pytest

from pyhost import arch
from pyhost.arch import aarch64
from pyhost.image.store import recipe_name

A64 = arch.get("aarch64")


def fake_image(magic=aarch64.IMAGE_MAGIC, image_size=0x2000000) -> bytes:
    """An arm64 Image header (booting.rst): code0/1, text_offset,
    image_size, flags, res2-4, magic at 0x38, res5."""
    head = struct.pack("<IIQQQQQQ", 0, 0, 0, image_size, 0xa, 0, 0, 0)
    return head + magic + b"\0" * 4 + b"Linux version 6.1.0-t (x)\n"


def test_registered_with_its_qemu_machine_and_console():
    assert A64.qemu == "qemu-system-aarch64"
    assert A64.machine == "virt" and A64.cpu == "neoverse-n1,pmu=off"
    assert A64.console == "ttyAMA0" and A64.console_rdev == (204, 64)
    assert A64.debian_arch == "arm64" and A64.elf_machine == "EM_AARCH64"
    assert A64.dynamic_loader == "/lib/ld-linux-aarch64.so.1"
    assert A64.default_recipe == "aarch64"
    assert recipe_name("default", A64) == "aarch64"
    assert recipe_name("mine", A64) == "mine"


def test_kernel_half_and_ram_base():
    assert A64.is_kernel(0xFFFF000000000000)
    assert A64.is_kernel(0xFFFF800008010000)          # _stext, nokaslr
    assert not A64.is_kernel(0x0000FFFFFFFFFFFF)      # top of user space
    assert A64.ram_offset(0x4313C080) == 0x313C080    # docs/architectures.md
    assert arch.host().ram_offset(0x1000) == 0x1000   # x86 pc: from 0


def test_boot_kernel_is_the_image_itself():
    blob = fake_image()
    boot = A64.boot_kernel(blob)
    assert boot.image is blob
    assert boot.anchor == ("_stext", 0xFFFF800008010000)
    assert boot.manifest["image_size"] == "0x2000000"
    with pytest.raises(ValueError):
        A64.boot_kernel(fake_image(magic=b"ARM\0"))
    with pytest.raises(arch.UnbootableKernel):
        A64.boot_kernel(fake_image(image_size=0))
    with pytest.raises(ValueError):
        A64.extract_vmlinux(blob)


def test_capstone_names_exist():
    capstone = pytest.importorskip("capstone")
    for name in A64.capstone:
        assert hasattr(capstone, name)
    # ret
    assert [i.mnemonic for i in A64.disassembler().disasm(
        bytes.fromhex("c0035fd6"), 0)] == ["ret"]


def test_launcher_boots_virt_without_firmware(argv_of):
    argv = argv_of(A64)
    assert "-bios" not in argv
    assert argv[argv.index("-machine") + 1].startswith("virt,accel=tcg,")
    assert argv[argv.index("-cpu") + 1] == "neoverse-n1,pmu=off"
    append = argv[argv.index("-append") + 1].split()
    assert "console=ttyAMA0" in append
    assert not set(arch.host().kernel_args) & set(append)
