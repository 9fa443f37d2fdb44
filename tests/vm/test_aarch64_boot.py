"""arm64 guests: the aarch64 image (built from Debian arm64 packages, the
build cached) booted under qemu-system-aarch64 through the `pvperf` CLI,
without the PMU (the arm64 driver and plugin come later).  One boot
carries most checks, to keep the suite's added time small."""
import json
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from pyhost.cli import EXIT_INTERRUPTED

from support import PROGRAMS, leftovers, run_pvperf, start_long_run

pytestmark = pytest.mark.vm

ARCH = ["--arch", "aarch64"]
LOOP = PROGRAMS / "aarch64" / "loop"


@pytest.fixture(scope="module")
def image():
    """The aarch64 image's manifest (built if missing or out of date)."""
    r = run_pvperf(["image", "build", *ARCH], timeout=1200)
    assert r.returncode == 0, r.stderr[-2000:]
    r = run_pvperf(["image", "status", *ARCH])
    assert r.returncode == 0 and "up to date" in r.stdout, r.stdout
    directory = Path(r.stdout.split("(", 1)[1].rstrip(")\n"))
    return json.loads((directory / "manifest.json").read_text())


@pytest.fixture(scope="module")
def loop():
    """tests/guest_programs/aarch64/loop, cross-compiled."""
    subprocess.run(["make", "-s", "-C", str(PROGRAMS), "aarch64"],
                   check=True)
    return LOOP


def test_image_is_arm64(image):
    assert image["arch"] == "aarch64"
    assert image["kernel_version"].endswith("-arm64")
    assert image["modules"][-1] == "9p"
    assert image["perf_version"].startswith("perf version 6.1")


def test_run_uname_status_share_and_a_cross_compiled_program(
        image, loop, tmp_path):
    shutil.copy(loop, tmp_path / "loop")
    (tmp_path / "from_host.txt").write_text("host data\n")
    r = run_pvperf(["run", *ARCH, "--no-pmu", "--share", str(tmp_path), "--",
                    "sh", "-c", "uname -m; pwd; cat from_host.txt; "
                    "./loop 100000 5; echo loop=$?; "
                    "echo guest data > from_guest.txt; echo err >&2; "
                    "exit 7"])
    assert (r.returncode, r.stdout, r.stderr) == (
        7, "aarch64\n/mnt/host\nhost data\nloop=5\n", "err\n")
    assert (tmp_path / "from_guest.txt").read_text() == "guest data\n"
    assert leftovers() == []


def test_sigterm_stops_and_cleans_up(image, tmp_path):
    proc = start_long_run(tmp_path, *ARCH, "--no-pmu", boot_timeout=120)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == EXIT_INTERRUPTED
    assert b"interrupted" in err
    deadline = time.monotonic() + 5
    while leftovers() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert leftovers() == []


def test_arch_and_image_must_agree():
    r = run_pvperf(["run", "--arch", "x86_64", "--image", "aarch64",
                    "--no-pmu", "--", "true"])
    assert r.returncode == 64
    assert "is an aarch64 image, not x86_64" in r.stderr
