"""The architecture seam: shared pyhost code names no architecture; each
architecture is one module of pyhost/arch/, named after it and registered
once; and what the launcher and the image builder do per architecture
comes from its Arch."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from pyhost import abi, arch
from pyhost.image import cpio, smoke
from pyhost.image.store import GuestImage
from pyhost.vm.launcher import VM, VMConfig

from support import REPO

ARCH_DIR = REPO / "pyhost" / "arch"
# Names that belong to one architecture: QEMU binaries and machines,
# Debian and toolchain names, consoles, loaders, disassembler modes.
ARCH_WORDS = re.compile(r"x86_64|amd64|qemu-system-x86|ttyS0|aarch64|arm64|"
                        r"riscv|rv64|opensbi|"
                        r"ld-linux|qboot|clearcpuid|CS_ARCH_|CS_MODE_")


def shared_modules() -> list[Path]:
    return [p for p in sorted((REPO / "pyhost").rglob("*.py"))
            if ARCH_DIR not in p.parents]


def test_shared_modules_name_no_architecture():
    hits = [f"{p.relative_to(REPO)}:{n}: {line.strip()}"
            for p in shared_modules()
            for n, line in enumerate(p.read_text().splitlines(), 1)
            if ARCH_WORDS.search(line)]
    assert hits == []


def test_each_architecture_is_one_module_and_one_entry():
    # base: the description they fill in; __init__: the registry
    modules = {p.stem for p in ARCH_DIR.glob("*.py")} - {"__init__", "base"}
    assert set(arch.ARCHES) == modules
    # What an architecture may lack: firmware (virt boots -kernel alone),
    # extra kernel arguments, a hole in its RAM, anything missing for its
    # PMU, another machine for many vCPUs, and registers to write back
    # on a restore.
    optional = {"firmware", "kernel_args", "ram_hole", "pmu_missing",
                "machine_above", "rewrite_on_restore"}
    for name, a in arch.ARCHES.items():
        assert a.name == name
        assert all(getattr(a, f.name) not in (None, "", ())
                   for f in dataclasses.fields(a)
                   if f.name not in optional), name


def test_host_architecture_matches_the_abi():
    """pvperf_abi.h's kernel half (abi.py mirrors it) is the host's."""
    assert arch.host().kernel_half_start == abi.X86_64_KERNEL_HALF_START
    assert arch.host().is_kernel(abi.X86_64_KERNEL_HALF_START)
    assert not arch.host().is_kernel(abi.X86_64_KERNEL_HALF_START - 1)


def other_arch() -> arch.Arch:
    """An architecture that is not the host's, as a second module would
    describe it (nothing of it needs to exist on this machine)."""
    return dataclasses.replace(
        arch.host(), name="other", qemu="qemu-system-other",
        machine="virt", cpu="other-cpu", firmware="other.rom",
        console="ttyOTHER0", console_rdev=(204, 64),
        kernel_args=("other.arg=1",), dynamic_loader="/lib/ld-other.so.1")


def test_the_launcher_takes_machine_cpu_firmware_console_from_the_arch(
        tmp_path):
    other = other_arch()
    image = GuestImage("t", tmp_path / "vmlinux", tmp_path / "initramfs",
                       tmp_path / "System.map", tmp_path / "root", "6.1.0-t")
    machine = VM(VMConfig(image=image, pmu=False, arch=other, qemu="true"))
    argv = machine.qemu_argv()
    machine.channels.close()
    assert argv[argv.index("-machine") + 1].split(",")[0] == "virt"
    assert argv[argv.index("-cpu") + 1] == "other-cpu"
    assert argv[argv.index("-bios") + 1] == "other.rom"
    append = argv[argv.index("-append") + 1].split()
    assert "console=ttyOTHER0" in append and "other.arg=1" in append
    host = arch.host()
    assert not {f"console={host.console}", *host.kernel_args} & set(append)


def test_the_image_takes_console_node_and_loader_from_the_arch(tmp_path):
    other = other_arch()
    (tmp_path / "root").mkdir()
    cpio.write_initramfs(tmp_path / "root", tmp_path / "out.cpio", other)
    nodes = {e.name: e.rdev for e in
             cpio.read_newc((tmp_path / "out.cpio").read_bytes())
             if e.name.startswith("dev/")}
    assert nodes["dev/ttyOTHER0"] == (204, 64)
    assert f"dev/{arch.host().console}" not in nodes
    assert smoke.smoke_command(["/usr/bin/x"], other).startswith(
        "/lib/ld-other.so.1 --list /usr/bin/x")


def test_each_architecture_has_its_recipe():
    """images/<default_recipe>/ exists and installs that architecture's
    Debian kernel (linux-image-<debian_arch>)."""
    import json
    from pyhost.paths import RECIPES_DIR
    for a in arch.ARCHES.values():
        recipe = json.loads((RECIPES_DIR / a.default_recipe /
                             "recipe.json").read_text())
        assert recipe["kernel"]["package"] == f"linux-image-{a.debian_arch}"
