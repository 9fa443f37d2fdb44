"""End to end: boot the real default image under qemu-system-x86_64 and run
commands in it through the `pvperf` CLI, as a user would.

Other guest architectures (the arm64 tests at the end): their image
(built from Debian's packages for that architecture, the build cached)
booted under qemu-system-<arch> without the PMU; one boot carries most
checks, to keep the suite's added time small.  The x86_64 checks above
are not run on them: each is a boot of its own.
"""
import shutil
import signal

import pexpect
import pytest

from pyhost.cli import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_TIMEOUT, \
    EXIT_USAGE

from support import Guest, built_image_manifest, leftovers, on, pvperf_cmd, \
    run_pvperf, start_long_run

pytestmark = pytest.mark.vm

ARM64 = Guest("aarch64", 1)


def test_stdout_stderr_and_exit_status(tmp_path):
    r = run_pvperf(["run", "--", "sh", "-c", "echo out; echo err >&2; exit 7"],
                   cwd=tmp_path)
    assert (r.returncode, r.stdout, r.stderr) == (7, "out\n", "err\n")


def test_arguments_are_passed_verbatim(tmp_path):
    args = ["a b", "c'd", '"e"', "$HOME", "*", ",comma,"]
    r = run_pvperf(["run", "--", "printf", "[%s]\\n", *args], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"[{a}]" for a in args]


def test_share_both_directions_and_cwd(tmp_path):
    (tmp_path / "from_host.txt").write_text("host data\n")
    r = run_pvperf(["run", "--share", str(tmp_path), "--", "sh", "-c",
                    "pwd; cat from_host.txt; echo guest data > from_guest.txt"])
    assert r.returncode == 0, r.stderr
    assert r.stdout == "/mnt/host\nhost data\n"
    assert (tmp_path / "from_guest.txt").read_text() == "guest data\n"


def test_missing_command_exit_127(tmp_path):
    r = run_pvperf(["run", "--", "no-such-command"], cwd=tmp_path)
    assert r.returncode == 127


def test_smp_2(tmp_path):
    r = run_pvperf(["run", "--smp", "2", "--", "grep", "-c", "^processor",
                    "/proc/cpuinfo"], cwd=tmp_path)
    assert (r.returncode, r.stdout) == (0, "2\n"), r.stderr


def test_bad_share_dir_is_a_clear_error(tmp_path):
    r = run_pvperf(["run", "--share", str(tmp_path / "nope"), "--", "true"])
    assert r.returncode == EXIT_USAGE
    assert r.stderr.startswith("pvperf: usage: ") and "--share" in r.stderr \
        and "does not exist" in r.stderr


def test_guest_panic_is_reported_and_cleaned_up(tmp_path):
    r = run_pvperf(["run", "--", "sh", "-c", "echo c > /proc/sysrq-trigger"],
                   cwd=tmp_path)
    assert r.returncode == EXIT_FAILURE
    assert "panic" in r.stderr.lower()
    assert "last console lines" in r.stderr
    assert leftovers() == []


def test_timeout_is_reported_and_cleaned_up(tmp_path):
    r = run_pvperf(["run", "--timeout", "2", "--", "sleep", "60"], cwd=tmp_path)
    assert r.returncode == EXIT_TIMEOUT
    assert "no answer within 2 s" in r.stderr
    assert leftovers() == []


def _wait_clean(timeout=5.0):
    return leftovers(settle=timeout)


def test_forced_kill_leaves_nothing(tmp_path):
    proc = start_long_run(tmp_path)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert _wait_clean() == []


def test_ctrl_c_stops_and_cleans_up(tmp_path):
    proc = start_long_run(tmp_path)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert b"interrupted" in err
    assert _wait_clean() == []


def test_interactive_shell(tmp_path):
    child = pexpect.spawn(pvperf_cmd()[0], pvperf_cmd()[1:] + ["shell"],
                          cwd=str(tmp_path), timeout=60, encoding="utf-8")
    try:
        child.expect_exact("pvperf# ")
        child.sendline("echo $((6 * 7))")
        child.expect_exact("42")
        child.expect_exact("pvperf# ")
        child.sendline("exit 3")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 3
    assert _wait_clean() == []


def test_twenty_consecutive_runs(tmp_path):
    failures = []
    for i in range(20):
        r = run_pvperf(["run", "--", "sh", "-c", f"echo {i}"], cwd=tmp_path)
        if (r.returncode, r.stdout) != (0, f"{i}\n"):
            failures.append((i, r.returncode, r.stderr[-300:]))
    assert failures == []
    assert _wait_clean() == []


# -- other guest architectures ---------------------------------------------

@pytest.fixture(scope="module")
def image(request):
    """(a support.Guest, its image's manifest), the image built if
    missing or out of date."""
    return request.param, built_image_manifest(request.param.a.run_options)


@on(ARM64, fixture="image")
def test_image_is_arm64(image):
    _, image = image
    assert image["arch"] == "aarch64"
    assert image["kernel_version"].endswith("-arm64")
    assert image["modules"][-1] == "9p"
    assert image["perf_version"].startswith("perf version 6.1")


@on(ARM64, fixture="image")
def test_run_uname_status_share_and_a_cross_compiled_program(
        image, tmp_path):
    guest, _ = image
    shutil.copy(guest.a.build() / "loop", tmp_path / "loop")
    (tmp_path / "from_host.txt").write_text("host data\n")
    r = run_pvperf(["run", *guest.a.run_options, "--no-pmu", "--share",
                    str(tmp_path), "--",
                    "sh", "-c", "uname -m; pwd; cat from_host.txt; "
                    "./loop 100000 5; echo loop=$?; "
                    "echo guest data > from_guest.txt; echo err >&2; "
                    "exit 7"])
    assert (r.returncode, r.stdout, r.stderr) == (
        7, f"{guest.arch}\n/mnt/host\nhost data\nloop=5\n", "err\n")
    assert (tmp_path / "from_guest.txt").read_text() == "guest data\n"
    assert leftovers() == []


@on(ARM64, fixture="image")
def test_sigterm_stops_and_cleans_up(image, tmp_path):
    guest, _ = image
    proc = start_long_run(tmp_path, *guest.a.run_options, "--no-pmu",
                          boot_timeout=120)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == EXIT_INTERRUPTED
    assert b"interrupted" in err
    assert leftovers(settle=5) == []


def test_arch_and_image_must_agree():
    r = run_pvperf(["run", "--arch", "x86_64", "--image", "aarch64",
                    "--no-pmu", "--", "true"])
    assert r.returncode == 64
    assert "is an aarch64 image, not x86_64" in r.stderr
