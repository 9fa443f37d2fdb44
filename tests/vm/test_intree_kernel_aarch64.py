"""Opt-in, long: the arm64 in-tree patch, built into a cross-compiled
kernel and booted, counts exactly.

guest_kernel_patch/build-intree-kernel.sh with PVPERF_INTREE_ARCH=aarch64
applies 0001-arm64-pvperf-paravirtual-PMU.patch (what `make-patch.sh
aarch64` prints now) to Debian's linux-source-6.1, configures `make
ARCH=arm64 defconfig` without the SoC platforms plus what the aarch64
image's /init needs built in plus CONFIG_PVPERF_PMU=y, and cross-builds
arch/arm64/boot/Image with aarch64-linux-gnu- (tens of minutes on 2
cores the first time; the tree stays in
~/.cache/pvperf/intree-build-aarch64, so a rerun only recompiles what
changed).  Then `pvperf run --arch aarch64 --kernel Image` boots it with
the aarch64 image's userland (QEMU's virt machine boots the Image as it
is), and stock arm64 perf must count through the built-in driver:
instructions and branches of the freestanding loop and pages programs
equal their analytic counts (tests/vm/test_aarch64_counting.py derives
them from the disassembly; pages faults on every page, so the driver's
page-fault hook is exercised built in).

  PVPERF_SLOW=1 .venv/bin/python -m pytest tests/vm/test_intree_kernel_aarch64.py

The image's Debian modules do not match this kernel: /init's insmods of
them and of pvperf.ko fail (it says so on the console and goes on), and
everything they would provide is built in.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from support import PROGRAMS, REPO, aarch64_image, run_pvperf, sections
from pyhost.arch import aarch64
from pyhost.paths import cache_dir
from test_aarch64_counting import loop_counts, pages_counts
# The same checks of the booted guest as x86's, run on this module's guest.
from test_intree_kernel import (  # noqa: F401
    GUEST_CHECKS, current_patch, test_builtin_driver_found_the_host,
    test_driver_is_built_in_not_a_module)

pytestmark = [pytest.mark.vm, pytest.mark.slow]

GKP = REPO / "guest_kernel_patch"
BUILD_DIR = cache_dir() / "intree-build-aarch64"
BUILD_ENV = dict(os.environ, PVPERF_INTREE_ARCH="aarch64",
                 PVPERF_INTREE_DIR=str(BUILD_DIR))
BUILD_TIMEOUT = 4 * 3600        # first build on 2 busy cores, with margin
LOOP_N, PAGES_N = 100_000, 500
STAT = "perf stat -x, -e instructions:u,branches:u"

GUEST_SCRIPT = GUEST_CHECKS + f"""
sec loop;    {STAT} ./loop {LOOP_N} 2>&1
sec pages;   {STAT} ./pages {PAGES_N} 2>&1
sec end
"""


@pytest.fixture(scope="module")
def kernel():
    """(Image, release, seconds the build script took)."""
    if not shutil.which("aarch64-linux-gnu-gcc"):
        pytest.skip("no aarch64-linux-gnu-gcc (gcc-aarch64-linux-gnu)")
    start = time.monotonic()
    r = subprocess.run([str(GKP / "build-intree-kernel.sh"),
                        str(current_patch(BUILD_DIR, "aarch64"))],
                       capture_output=True, text=True,
                       timeout=BUILD_TIMEOUT, env=BUILD_ENV)
    seconds = time.monotonic() - start
    assert r.returncode == 0, (r.stdout + r.stderr)[-6000:]
    image = Path(r.stdout.strip().splitlines()[-1])
    tree = image.parents[3]
    release = (tree / "include/config/kernel.release").read_text().strip()
    return image, release, seconds


@pytest.fixture(scope="module")
def guest(kernel, tmp_path_factory):
    """The built kernel booted as a user would: `pvperf run --arch aarch64
    --kernel Image`, the cross-compiled programs in the share."""
    arch = aarch64_image()
    subprocess.run(["make", "-s", "-C", str(PROGRAMS), "aarch64"],
                   check=True)
    share = tmp_path_factory.mktemp("intree-aarch64-share")
    for name in ("loop", "pages"):
        shutil.copy(PROGRAMS / "aarch64" / name, share / name)
    r = run_pvperf(["run", *arch, "--kernel", str(kernel[0]), "--share",
                    str(share), "--", "sh", "-c", GUEST_SCRIPT], timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    s = sections(r.stdout)
    assert "end" in s, r.stdout + r.stderr
    return s


def test_kernel_is_configured_with_the_driver_built_in(kernel):
    image, release, seconds = kernel
    print(f"in-tree arm64 kernel {release}: build script took {seconds:.0f} s")
    tree = image.parents[3]
    config = (tree / ".config").read_text()
    for opt in ("PVPERF_PMU", "PCI_HOST_GENERIC", "VIRTIO_PCI",
                "VIRTIO_CONSOLE", "9P_FS", "NET_9P_VIRTIO", "FW_CFG_SYSFS",
                "DEVTMPFS", "SERIAL_AMBA_PL011_CONSOLE", "TRACEPOINTS",
                "PERF_EVENTS"):
        assert f"\nCONFIG_{opt}=y\n" in config, opt
    for name in ("pvperf_pmu", "pvperf_event", "pvperf_sample",
                 "pvperf_aarch64"):
        assert (tree / f"arch/arm64/pvperf/{name}.o").exists(), name
    assert not (tree / "arch/arm64/pvperf/pvperf_x86_64.o").exists()
    assert aarch64.is_image(image.read_bytes())


def test_guest_runs_the_built_kernel(kernel, guest):
    assert guest["uname"] == [kernel[1]]


def stat_counts(lines: list[str]) -> tuple[int, int]:
    """(instructions:u, branches:u) from `perf stat -x,` output."""
    counts = {f[2]: f[0] for f in (l.split(",") for l in lines)
              if len(f) > 2}
    return (int(counts["instructions:u"]), int(counts["branches:u"]))


@pytest.mark.parametrize("program,n,expected", [
    ("loop", LOOP_N, loop_counts), ("pages", PAGES_N, pages_counts)])
def test_counts_equal_the_analytic_counts(guest, program, n, expected):
    assert stat_counts(guest[program]) == expected(n), guest[program]
