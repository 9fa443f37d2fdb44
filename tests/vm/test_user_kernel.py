"""`pvperf run --kernel PATH [--kernel-build DIR]`: the user's own kernel
with the image's userland.

A kernel that lacks what the image's /init needs built in is refused
before anything starts, in one line naming the missing CONFIG_ options;
the checks read the build tree's .config, IKCONFIG, or the symbols only
a built-in option leaves.  The synthetic kernels here are ELF files with
a `Linux version` banner and a symbol table (tests/elfwriter.py): they
are never booted.  Booting: the image's own kernel through --kernel
(below), and the in-tree build of the driver (tests/vm/test_intree_kernel.py,
opt-in: a kernel build takes tens of minutes).
"""
from __future__ import annotations

import gzip
import re

import pytest

from parallel import make
from support import (PROGRAMS, aarch64_image, guest_kernel_image, run_pvperf,
                     valgrind_irefs)
from elfwriter import ElfWriter
from pyhost.cli import EXIT_USAGE
from pyhost.image import userkernel

ALL_BUILT_IN = [symbol for _, symbol, _ in userkernel.REQUIRED] + \
    [userkernel.PVH[1], userkernel.BUILTIN_DRIVER[1]]


def fake_kernel(tmp_path, symbols, release="6.1.99-fake", name="vmlinux"):
    elf = ElfWriter(base=0xffffffff81000000)
    elf.function("linux_banner",
                 f"Linux version {release} (test@host) #1 SMP\0".encode())
    for s in symbols:
        elf.function(s, b"\xc3")
    path = tmp_path / name
    path.write_bytes(elf.build())
    return path


def refusal(args):
    r = run_pvperf(["run", *args, "--", "true"], timeout=60)
    lines = r.stderr.strip().splitlines()
    return r.returncode, lines


def test_a_kernel_without_9p_is_refused_in_one_line(tmp_path):
    kernel = fake_kernel(tmp_path, [s for s in ALL_BUILT_IN
                                    if s not in ("v9fs_mount",
                                                 "p9_virtio_probe")])
    code, lines = refusal(["--kernel", str(kernel)])
    assert code == EXIT_USAGE, lines
    assert len(lines) == 1, lines
    assert "CONFIG_NET_9P_VIRTIO, CONFIG_9P_FS" in lines[0], lines
    assert "6.1.99-fake" in lines[0] and "CONFIG_9P_FS=y" in lines[0], lines


def test_the_build_trees_config_is_what_counts(tmp_path):
    """With a build tree, its .config decides (the symbols say yes)."""
    kernel = fake_kernel(tmp_path, ALL_BUILT_IN)
    config = "\n".join(f"CONFIG_{o}=y" for o, _, _ in userkernel.REQUIRED
                       if o != "VIRTIO_CONSOLE")
    (tmp_path / ".config").write_text(config + "\nCONFIG_VIRTIO_CONSOLE=m\n")
    (tmp_path / "Makefile").write_text("")
    code, lines = refusal(["--kernel", str(kernel)])   # found: same dir
    assert code == EXIT_USAGE and len(lines) == 1, lines
    assert "CONFIG_VIRTIO_CONSOLE" in lines[0], lines
    assert f"{tmp_path}/.config" in lines[0], lines
    assert "CONFIG_PVH" in lines[0], lines        # not in that .config


def test_no_driver_and_no_build_tree_is_refused(tmp_path):
    kernel = fake_kernel(tmp_path, [s for s in ALL_BUILT_IN
                                    if s != userkernel.BUILTIN_DRIVER[1]])
    code, lines = refusal(["--kernel", str(kernel)])
    assert code == EXIT_USAGE and len(lines) == 1, lines
    assert "no pvperf driver" in lines[0] and "--kernel-build" in lines[0]


@pytest.mark.parametrize("content,words", [
    (b"#!/bin/sh\n", "neither an ELF vmlinux, a bzImage nor a boot image"),
    (ElfWriter().build(), "no `Linux version` banner")])
def test_what_is_not_a_kernel_is_refused(tmp_path, content, words):
    path = tmp_path / "k"
    path.write_bytes(content)
    code, lines = refusal(["--kernel", str(path)])
    assert code == EXIT_USAGE and len(lines) == 1, lines
    assert words in lines[0], lines


def fake_arm64_image(tmp_path, config: str) -> bytes:
    """An arm64 boot Image (the header's magic and a size; no ELF inside)
    with a banner and an IKCONFIG."""
    header = bytearray(64)
    header[8:24] = (0).to_bytes(8, "little") + (1 << 20).to_bytes(8, "little")
    header[0x38:0x3c] = b"ARM\x64"
    blob = bytes(header) + b"Linux version 6.1.99-fake (test@host) #1 SMP\0" \
        + b"IKCFG_ST" + gzip.compress(config.encode()) + b"IKCFG_ED"
    path = tmp_path / "Image"
    path.write_bytes(blob)
    return path


def test_an_arm64_image_is_read_as_a_kernel_for_aarch64_only(tmp_path):
    """`--arch aarch64 --kernel Image`: the Image (booted as it is, no ELF
    in it) is checked like a vmlinux, here refused for what its IKCONFIG
    lacks; for x86_64 guests the same file is no kernel."""
    config = "\n".join(f"CONFIG_{o}=y" for o, _, _ in userkernel.REQUIRED
                       if o != "9P_FS")
    image = fake_arm64_image(tmp_path, config + "\nCONFIG_PVPERF_PMU=y\n")
    # built first: its progress is not refusal
    code, lines = refusal([*aarch64_image(), "--kernel", str(image)])
    assert code == EXIT_USAGE and len(lines) == 1, lines
    assert "6.1.99-fake lacks CONFIG_9P_FS" in lines[0], lines
    assert "IKCONFIG" in lines[0] and "PVH" not in lines[0], lines
    code, lines = refusal(["--kernel", str(image)])
    assert code == EXIT_USAGE and len(lines) == 1, lines
    assert "a boot image for x86_64" in lines[0], lines


def test_kernel_build_needs_kernel(tmp_path):
    code, lines = refusal(["--kernel-build", str(tmp_path)])
    assert code == EXIT_USAGE and "needs --kernel" in lines[-1], lines


def test_ikconfig_is_read_from_the_kernel():
    config = "CONFIG_9P_FS=y\nCONFIG_PVH=y\n# CONFIG_X is not set\n"
    blob = b"\0" * 64 + b"IKCFG_ST" + gzip.compress(config.encode()) + \
        b"IKCFG_ED"
    text = userkernel.ikconfig(blob)
    assert userkernel.parse_config(text) == {"CONFIG_9P_FS": "y",
                                             "CONFIG_PVH": "y"}
    feats = userkernel.KernelFeatures("IKCONFIG",
                                      config=userkernel.parse_config(text))
    assert feats.has("9P_FS", "v9fs_mount") is True
    assert feats.has("VIRTIO_CONSOLE", "virtcons_probe") is False


@pytest.mark.vm        # needs the default image (its System.map is not used)
def test_a_kernel_without_system_map_gets_one_from_its_symbols(tmp_path):
    """Never the image's System.map for another kernel: host profiles
    would name the wrong functions."""
    from pyhost.image import image_status
    kernel = fake_kernel(tmp_path, ALL_BUILT_IN)
    uk = userkernel.user_kernel(kernel, None, image_status("default"),
                                pmu=True)
    assert uk.image.kernel_version == "6.1.99-fake"
    lines = uk.image.system_map.read_text().splitlines()
    assert any(line.endswith(" T v9fs_mount") for line in lines), lines[:5]
    assert uk.image.system_map != image_status("default").system_map


@pytest.mark.vm
def test_the_images_own_kernel_boots_through_kernel(tmp_path):
    """--kernel with the image's kernel (its release: the image's modules
    fit) counts exactly like the default boot: valgrind's Ir.  The image
    is the one the run boots (PVPERF_GUEST_KERNEL's)."""
    from pyhost.image import image_status
    img = image_status(guest_kernel_image())
    make(PROGRAMS, "-s", "loop", check=True)
    r = run_pvperf(["run", "--kernel", str(img.vmlinux), "--share",
                    str(PROGRAMS), "--", "sh", "-c",
                    "uname -r; perf stat -x, -e instructions:u ./loop 100000"],
                   timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert img.kernel_version in r.stdout
    m = re.search(r"^(\d+),,instructions:u", r.stdout + r.stderr, re.M)
    assert m, r.stdout + r.stderr
    assert int(m.group(1)) == valgrind_irefs([str(PROGRAMS / "loop"),
                                              "100000"])
