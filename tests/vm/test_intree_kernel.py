"""Opt-in, long: the in-tree patch form of the guest driver works.

guest_kernel_patch/build-intree-kernel.sh applies the in-tree patch to
Debian's linux-source-6.1, configures x86_64_defconfig plus what the
image's /init needs built in plus CONFIG_PVPERF_PMU=y, and builds vmlinux
(tens of minutes on 2 cores the first time; the tree is kept in
~/.cache/pvperf/intree-build, so a rerun only recompiles what changed).
Then `pvperf run --kernel vmlinux` boots it with the default image's
initramfs, the TCG plugin and the host service, and stock perf in the guest must
count through the built-in driver exactly as through the module.

The patch is what guest_kernel_patch/make-patch.sh prints now (the
committed patch, when it is current: tests/vm/test_driver_build.py checks
that); PVPERF_INTREE_PATCH=/path/to/patch builds another one.

  PVPERF_SLOW=1 .venv/bin/python -m pytest tests/vm/test_intree_kernel.py

With PVPERF_GUEST_KERNEL=6.12 the same on Debian's linux-source-6.12 of
the release the linux-6.12 image's kernel comes from (bookworm-backports),
built in ~/.cache/pvperf/intree-build-6.12 and booted with that image's
userland (perf 6.12).

The image's Debian modules do not match this kernel: /init's insmods of
them and of pvperf.ko fail (it says so on the console and goes on), and
everything they would provide is built in.
"""
from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from support import (PROGRAMS, REPO, guest_kernel_image, perf_count,
                     run_pvperf, sections, valgrind_irefs)
from pyhost.image import userkernel
from pyhost.image.kernel import pvh_entry, read_modinfo
from pyhost.image.recipe import load_recipe
from pyhost.paths import cache_dir

pytestmark = [pytest.mark.vm, pytest.mark.slow]

GKP = REPO / "guest_kernel_patch"
BUILD_SCRIPT = GKP / "build-intree-kernel.sh"
# The guest kernel's Debian source (PVPERF_GUEST_KERNEL): linux-source-X.Y
# of the release the image's kernel comes from, built in its own tree.
KERNEL = os.environ.get("PVPERF_GUEST_KERNEL") or "6.1"
BUILD_DIR = cache_dir() / ("intree-build" if KERNEL == "6.1"
                           else f"intree-build-{KERNEL}")
BUILD_ENV = dict(os.environ, LINUX_SOURCE_PKG=f"linux-source-{KERNEL}",
                 LINUX_SOURCE_RELEASE=load_recipe(
                     guest_kernel_image()).kernel_release or "",
                 PVPERF_INTREE_DIR=str(BUILD_DIR))
BUILD_TIMEOUT = 4 * 3600        # first build on 2 busy cores, with margin
N_LOOP = 1000

# What a boot of an in-tree kernel reports before its counts (the checks
# below read it; test_intree_kernel_aarch64.py's boot too).
GUEST_CHECKS = """
sec() { echo "=== $1"; }
sec uname;   uname -r
sec modules; cat /proc/modules
sec cputype; cat /sys/bus/event_source/devices/cpu/type
sec dmesg;   dmesg | grep pvperf
"""
GUEST_SCRIPT = GUEST_CHECKS + f"""
sec loop;    perf stat -x, -e instructions:u ./loop {N_LOOP} 2>&1
sec end
"""


def current_patch(build_dir: Path, *arch: str) -> Path:
    """What `make-patch.sh [ARCH]` prints now, as build_dir/pvperf.patch
    (rewritten only when it changed: the build script then finds the
    patch it applied last and rebuilds nothing)."""
    build_dir.mkdir(parents=True, exist_ok=True)
    patch = build_dir / "pvperf.patch"
    text = subprocess.run([str(GKP / "make-patch.sh"), *arch], check=True,
                          capture_output=True, text=True).stdout
    if not patch.exists() or patch.read_text() != text:
        patch.write_text(text)
    return patch


def _patch_file() -> Path:
    override = os.environ.get("PVPERF_INTREE_PATCH")
    if override:
        return Path(override).resolve()
    return current_patch(BUILD_DIR)


@pytest.fixture(scope="module")
def kernel():
    """(vmlinux, System.map, release, build output, seconds)."""
    start = time.monotonic()
    r = subprocess.run([str(BUILD_SCRIPT), str(_patch_file())],
                       capture_output=True, text=True, timeout=BUILD_TIMEOUT,
                       env=BUILD_ENV)
    seconds = time.monotonic() - start
    log = r.stdout + r.stderr
    assert r.returncode == 0, log[-6000:]
    vmlinux = Path(r.stdout.strip().splitlines()[-1])
    tree = vmlinux.parent
    release = (tree / "include/config/kernel.release").read_text().strip()
    return vmlinux, tree / "System.map", release, log, seconds


@pytest.fixture(scope="module")
def guest(kernel):
    """The built kernel booted as a user would: `pvperf run --kernel`."""
    vmlinux = kernel[0]
    subprocess.run(["make", "-s", "-C", str(PROGRAMS), "loop"], check=True)
    r = run_pvperf(["run", "--kernel", str(vmlinux), "--share",
                    str(PROGRAMS), "--", "sh", "-c", GUEST_SCRIPT],
                   timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    s = sections(r.stdout)
    assert "end" in s, r.stdout + r.stderr
    return s


def test_kernel_is_configured_with_the_driver_built_in(kernel):
    vmlinux, _, release, log, seconds = kernel
    print(f"in-tree kernel {release}: build script took {seconds:.0f} s")
    config = (vmlinux.parent / ".config").read_text()
    for opt in ("PVPERF_PMU", "PVH", "VIRTIO_PCI", "VIRTIO_CONSOLE", "9P_FS",
                "NET_9P_VIRTIO", "FW_CFG_SYSFS", "DEVTMPFS", "TRACEPOINTS",
                "PERF_EVENTS"):
        assert f"\nCONFIG_{opt}=y\n" in config, opt
    for name in userkernel.driver_sources():
        # Every .c but another architecture's pvperf_<arch>.c.
        if name.endswith(".c") and not re.fullmatch(
                r"pvperf_(aarch64|riscv64)\.c", name):
            obj = f"arch/x86/events/pvperf/{name[:-2]}.o"
            assert (vmlinux.parent / obj).exists(), obj
    # `qemu -kernel vmlinux` needs the PVH entry note.
    assert pvh_entry(vmlinux.read_bytes()) is not None


def test_guest_runs_the_built_kernel(kernel, guest):
    assert guest["uname"] == [kernel[2]]


def test_driver_is_built_in_not_a_module(guest):
    assert not any(l.startswith("pvperf ") for l in guest["modules"]), \
        guest["modules"]
    assert guest["cputype"] == ["4"]            # PERF_TYPE_RAW


def test_builtin_driver_found_the_host(guest):
    dmesg = guest["dmesg"]
    assert any(re.search(r"pvperf: paravirtual PMU host interface v\d+ found",
                         l) for l in dmesg), dmesg
    assert any('pvperf: PMU "cpu" registered' in l for l in dmesg), dmesg


def test_instructions_u_equals_valgrind(guest):
    assert perf_count(guest["loop"], "instructions:u") == str(
        valgrind_irefs([str(PROGRAMS / "loop"), str(N_LOOP)])), guest["loop"]


def test_the_driver_module_builds_against_the_tree(kernel):
    """--kernel-build's path: pvperf.ko built against this build tree,
    for this kernel release (vermagic), into pvperf's cache."""
    vmlinux, _, release, _, _ = kernel
    ko = userkernel.build_driver(vmlinux.parent, release)
    info = read_modinfo(ko.read_bytes())
    assert info["vermagic"][0].split()[0] == release
    assert info["name"] == ["pvperf"]


@pytest.fixture(scope="module")
def kernel_without_driver(kernel):
    """The same tree with CONFIG_PVPERF_PMU off (a copy, rebuilt): a
    kernel that needs the module built against it."""
    tree = kernel[0].parent
    out = BUILD_DIR / "nodriver"
    if not (out / "vmlinux").exists() or \
            (out / "vmlinux").stat().st_mtime < kernel[0].stat().st_mtime:
        subprocess.run(["rm", "-rf", str(out)], check=True)
        subprocess.run(["cp", "-a", str(tree), str(out)], check=True)
        subprocess.run([str(out / "scripts/config"), "--file",
                        str(out / ".config"), "-d", "PVPERF_PMU"], check=True)
        for target in (["olddefconfig"], ["-j2", "vmlinux", "modules_prepare"]):
            subprocess.run(["nice", "-n", "19", "make", "-s", "-C", str(out),
                            *target], check=True, timeout=BUILD_TIMEOUT)
    assert "# CONFIG_PVPERF_PMU is not set" in (out / ".config").read_text()
    return out / "vmlinux"


def test_kernel_build_tree_gets_the_driver_as_a_module(kernel_without_driver):
    """`pvperf run --kernel TREE/vmlinux`: the tree is found, pvperf.ko is
    built against it and loaded by /init, and counting is exact."""
    r = run_pvperf(["run", "--kernel", str(kernel_without_driver),
                    "--share", str(PROGRAMS), "--", "sh", "-c",
                    GUEST_SCRIPT], timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    s = sections(r.stdout)
    assert any(l.startswith("pvperf ") for l in s["modules"]), s["modules"]
    assert s["cputype"] == ["4"], s
    assert perf_count(s["loop"], "instructions:u") == str(
        valgrind_irefs([str(PROGRAMS / "loop"), str(N_LOOP)])), s["loop"]
