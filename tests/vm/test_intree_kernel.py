"""Opt-in, long: the in-tree patch form of the guest driver works, on
every guest architecture.

x86_64: guest_kernel_patch/build-intree-kernel.sh applies the in-tree patch to
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

arm64: the same script with PVPERF_INTREE_ARCH=aarch64 applies
0001-arm64-pvperf-paravirtual-PMU.patch (what `make-patch.sh aarch64`
prints now) to Debian's linux-source-6.1, configures `make ARCH=arm64
defconfig` without the SoC platforms plus what the aarch64 image's /init
needs built in plus CONFIG_PVPERF_PMU=y, and cross-builds
arch/arm64/boot/Image with aarch64-linux-gnu- (tens of minutes on 2
cores the first time; the tree stays in
~/.cache/pvperf/intree-build-aarch64).  Then `pvperf run --arch aarch64
--kernel Image` boots it with the aarch64 image's userland (QEMU's virt
machine boots the Image as it is), and stock arm64 perf must count
through the built-in driver: instructions and branches of the
freestanding loop and pages programs equal their analytic counts
(test_counting.py derives them from the disassembly; pages faults on
every page, so the driver's page-fault hook is exercised built in).
The module build against the tree (--kernel-build's path) is x86_64's:
pvperf builds the module for an x86_64 tree only.

  PVPERF_SLOW=1 .venv/bin/python -m pytest tests/vm/test_intree_kernel.py -k aarch64

The image's Debian modules do not match this kernel: /init's insmods of
them and of pvperf.ko fail (it says so on the console and goes on), and
everything they would provide is built in.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import NamedTuple

import pytest

from parallel import make
from support import (PROGRAMS, REPO, Guest, guest_kernel_image, on,
                     perf_count, run_pvperf, sections, valgrind_irefs)
from pyhost.arch import aarch64
from pyhost.image import userkernel
from pyhost.image.kernel import pvh_entry, read_modinfo
from pyhost.image.recipe import load_recipe
from pyhost.paths import cache_dir
from test_counting import arm64_loop_counts, arm64_pages_counts

pytestmark = [pytest.mark.vm, pytest.mark.slow]

X86, ARM64 = Guest("x86_64", 1), Guest("aarch64", 1)

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
BUILD_DIR_ARM64 = cache_dir() / "intree-build-aarch64"
BUILD_ENV_ARM64 = dict(os.environ, PVPERF_INTREE_ARCH="aarch64",
                       PVPERF_INTREE_DIR=str(BUILD_DIR_ARM64))
BUILD_TIMEOUT = 4 * 3600        # first build on 2 busy cores, with margin
N_LOOP = 1000
LOOP_N_ARM64, PAGES_N_ARM64 = 100_000, 500
STAT_ARM64 = "perf stat -x, -e instructions:u,branches:u"

# What a boot of an in-tree kernel reports before its counts (the checks
# below read it, on every architecture).
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
GUEST_SCRIPT_ARM64 = GUEST_CHECKS + f"""
sec loop;    {STAT_ARM64} ./loop {LOOP_N_ARM64} 2>&1
sec pages;   {STAT_ARM64} ./pages {PAGES_N_ARM64} 2>&1
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


class Kernel(NamedTuple):
    image: Path         # vmlinux (x86_64), arch/arm64/boot/Image
    tree: Path          # its build tree
    release: str
    log: str            # the build script's output
    seconds: float      # what the build script took
    guest: Guest


@pytest.fixture(scope="module")
def kernel(request) -> Kernel:
    """The in-tree kernel of a support.Guest's architecture, built (or
    brought up to date) by the build script."""
    guest = request.param
    if guest.arch == "aarch64":
        if not shutil.which("aarch64-linux-gnu-gcc"):
            pytest.skip("no aarch64-linux-gnu-gcc (gcc-aarch64-linux-gnu)")
        patch = current_patch(BUILD_DIR_ARM64, "aarch64")
        env = BUILD_ENV_ARM64
    else:
        patch, env = _patch_file(), BUILD_ENV
    start = time.monotonic()
    r = subprocess.run([str(BUILD_SCRIPT), str(patch)],
                       capture_output=True, text=True, timeout=BUILD_TIMEOUT,
                       env=env)
    seconds = time.monotonic() - start
    log = r.stdout + r.stderr
    assert r.returncode == 0, log[-6000:]
    image = Path(r.stdout.strip().splitlines()[-1])
    tree = image.parents[3] if guest.arch == "aarch64" else image.parent
    release = (tree / "include/config/kernel.release").read_text().strip()
    return Kernel(image, tree, release, log, seconds, guest)


@pytest.fixture(scope="module")
def guest(kernel):
    """The built kernel booted as a user would: `pvperf run --kernel`
    (with `--arch` and the image of another architecture)."""
    g = kernel.guest
    if g.arch == "aarch64":
        arch = g.a.image()
        programs = g.a.build()
        script = GUEST_SCRIPT_ARM64
    else:
        arch = []
        make(PROGRAMS, "-s", "loop",
                       check=True)
        programs, script = PROGRAMS, GUEST_SCRIPT
    r = run_pvperf(["run", *arch, "--kernel", str(kernel.image), "--share",
                    str(programs), "--", "sh", "-c", script],
                   timeout=900 if arch else 300)
    assert r.returncode == 0, r.stdout + r.stderr
    s = sections(r.stdout)
    assert "end" in s, r.stdout + r.stderr
    return s


def x86_64_built_in(kernel: Kernel) -> None:
    """Every driver .c but another architecture's pvperf_<arch>.c was
    compiled; `qemu -kernel vmlinux` needs the PVH entry note."""
    for name in userkernel.driver_sources():
        if name.endswith(".c") and not re.fullmatch(
                r"pvperf_(aarch64|riscv64)\.c", name):
            obj = f"arch/x86/events/pvperf/{name[:-2]}.o"
            assert (kernel.tree / obj).exists(), obj
    assert pvh_entry(kernel.image.read_bytes()) is not None


def aarch64_built_in(kernel: Kernel) -> None:
    for name in ("pvperf_pmu", "pvperf_event", "pvperf_sample",
                 "pvperf_aarch64"):
        assert (kernel.tree / f"arch/arm64/pvperf/{name}.o").exists(), name
    assert not (kernel.tree / "arch/arm64/pvperf/pvperf_x86_64.o").exists()
    assert aarch64.is_image(kernel.image.read_bytes())


# Each architecture's options that must be built in (beyond what every
# one needs), and the check of its objects and image.
BUILT_IN = {
    "x86_64": (("PVH",), x86_64_built_in),
    "aarch64": (("PCI_HOST_GENERIC", "SERIAL_AMBA_PL011_CONSOLE"),
                aarch64_built_in),
}


@on(X86, ARM64, fixture="kernel")
def test_kernel_is_configured_with_the_driver_built_in(kernel):
    print(f"in-tree {kernel.guest.arch} kernel {kernel.release}: build "
          f"script took {kernel.seconds:.0f} s")
    config = (kernel.tree / ".config").read_text()
    options, objects = BUILT_IN[kernel.guest.arch]
    for opt in ("PVPERF_PMU", *options, "VIRTIO_PCI", "VIRTIO_CONSOLE",
                "9P_FS", "NET_9P_VIRTIO", "FW_CFG_SYSFS", "DEVTMPFS",
                "TRACEPOINTS", "PERF_EVENTS"):
        assert f"\nCONFIG_{opt}=y\n" in config, opt
    objects(kernel)


@on(X86, ARM64, fixture="kernel")
def test_guest_runs_the_built_kernel(kernel, guest):
    assert guest["uname"] == [kernel.release]


@on(X86, ARM64, fixture="kernel")
def test_driver_is_built_in_not_a_module(guest):
    assert not any(l.startswith("pvperf ") for l in guest["modules"]), \
        guest["modules"]
    assert guest["cputype"] == ["4"]            # PERF_TYPE_RAW


@on(X86, ARM64, fixture="kernel")
def test_builtin_driver_found_the_host(guest):
    dmesg = guest["dmesg"]
    assert any(re.search(r"pvperf: paravirtual PMU host interface v\d+ found",
                         l) for l in dmesg), dmesg
    assert any('pvperf: PMU "cpu" registered' in l for l in dmesg), dmesg


def stat_counts(lines: list[str]) -> tuple[int, int]:
    """(instructions:u, branches:u) from `perf stat -x,` output."""
    counts = {f[2]: f[0] for f in (l.split(",") for l in lines)
              if len(f) > 2}
    return (int(counts["instructions:u"]), int(counts["branches:u"]))


# Each architecture's (got, reference) pairs: x86_64's loop's
# instructions:u against valgrind's Ir, arm64's loop's and pages'
# instructions and branches against the analytic counts.
COUNTS = {
    "x86_64": lambda s: [(perf_count(s["loop"], "instructions:u"), str(
        valgrind_irefs([str(PROGRAMS / "loop"), str(N_LOOP)])))],
    "aarch64": lambda s: [
        (stat_counts(s["loop"]), arm64_loop_counts(LOOP_N_ARM64)),
        (stat_counts(s["pages"]), arm64_pages_counts(PAGES_N_ARM64))],
}


@on(X86, ARM64, fixture="kernel")
def test_counts_equal_the_reference(kernel, guest):
    for got, want in COUNTS[kernel.guest.arch](guest):
        assert got == want, guest


@on(X86, fixture="kernel")
def test_the_driver_module_builds_against_the_tree(kernel):
    """--kernel-build's path: pvperf.ko built against this build tree,
    for this kernel release (vermagic), into pvperf's cache."""
    release = kernel.release
    ko = userkernel.build_driver(kernel.tree, release)
    info = read_modinfo(ko.read_bytes())
    assert info["vermagic"][0].split()[0] == release
    assert info["name"] == ["pvperf"]


@pytest.fixture(scope="module")
def kernel_without_driver(kernel):
    """The same tree with CONFIG_PVPERF_PMU off (a copy, rebuilt): a
    kernel that needs the module built against it."""
    tree = kernel.tree
    out = BUILD_DIR / "nodriver"
    if not (out / "vmlinux").exists() or \
            (out / "vmlinux").stat().st_mtime < kernel.image.stat().st_mtime:
        subprocess.run(["rm", "-rf", str(out)], check=True)
        subprocess.run(["cp", "-a", str(tree), str(out)], check=True)
        subprocess.run([str(out / "scripts/config"), "--file",
                        str(out / ".config"), "-d", "PVPERF_PMU"], check=True)
        for target in (["olddefconfig"], ["-j2", "vmlinux", "modules_prepare"]):
            subprocess.run(["nice", "-n", "19", "make", "-s", "-C", str(out),
                            *target], check=True, timeout=BUILD_TIMEOUT)
    assert "# CONFIG_PVPERF_PMU is not set" in (out / ".config").read_text()
    return out / "vmlinux"


@on(X86, fixture="kernel")
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
