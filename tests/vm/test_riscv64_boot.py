"""riscv64 guests: the riscv64 image (built from Debian trixie's riscv64
packages, the build cached) booted under qemu-system-riscv64 -M virt with
OpenSBI through the `pvperf` CLI, without the PMU and with pvperf's
riscv64 driver (an exact count).  One boot carries most checks, to keep the
suite's added time small; the boot-time comparison with x86_64 is opt-in
(PVPERF_SLOW=1)."""
import os
import shutil
import signal
import statistics
import subprocess
import time

import pytest

from pyhost.cli import EXIT_INTERRUPTED

from support import (PROGRAMS, REPO, built_image_manifest,
                     interrupt_and_expect_clean, leftovers, run_pvperf,
                     start_long_run)

pytestmark = pytest.mark.vm

ARCH = ["--arch", "riscv64"]


@pytest.fixture(scope="module")
def image():
    """The riscv64 image's manifest (built if missing or out of date),
    with the riscv64 driver: its headers come from the private riscv64
    apt directory, whose lists the first image build fetches; the next
    build takes the driver in."""
    built_image_manifest(ARCH)
    r = subprocess.run(["make", "-s", "-C", str(REPO / "guest_kernel_patch"),
                        "KARCH=riscv64"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    return built_image_manifest(ARCH)


@pytest.fixture(scope="module")
def loop():
    """tests/guest_programs/riscv64/loop, cross-compiled."""
    subprocess.run(["make", "-s", "-C", str(PROGRAMS), "riscv64"],
                   check=True)
    return PROGRAMS / "riscv64" / "loop"


def test_image_is_trixies_riscv64(image):
    assert image["arch"] == "riscv64"
    assert image["kernel_version"].endswith("+deb13-riscv64")
    assert image["modules"][-1] == "9p"
    assert image["perf_version"].startswith("perf version 6.12")
    assert image["pe"] == "yes" and image["text_offset"] == "0x200000"


# The guest's side of one boot: what the machine is, its perf, and which
# PMUs perf can open.  QEMU's own riscv PMU (cycle/instret read from the
# host's clock without -icount) stays out: no "cpu" event source, and
# perf stat's hardware events are <not supported>, while the SBI PMU
# driver's initcall is what the kernel skipped.
GUEST_SCRIPT = (
    "uname -m; pwd; cat from_host.txt; "
    "grep -m1 '^mmu' /proc/cpuinfo; grep -m1 '^isa' /proc/cpuinfo; "
    "perf --version; "
    "ls /sys/bus/event_source/devices | tr '\\n' ' '; echo; "
    "perf stat -x, -e instructions,cycles true 2>&1 >/dev/null "
    "| cut -d, -f1,3; "
    "dmesg | grep -c 'initcall pmu_sbi_devinit blacklisted'; "
    "./loop 100000 5; echo loop=$?; "
    "echo guest data > from_guest.txt; echo err >&2; exit 7")


def test_run_uname_status_share_perf_and_no_qemu_pmu(image, loop, tmp_path):
    shutil.copy(loop, tmp_path / "loop")
    (tmp_path / "from_host.txt").write_text("host data\n")
    r = run_pvperf(["run", *ARCH, "--no-pmu", "--share", str(tmp_path), "--",
                    "sh", "-c", GUEST_SCRIPT], timeout=180)
    print(r.stdout)
    assert (r.returncode, r.stderr) == (7, "err\n"), r.stderr[-2000:]
    lines = r.stdout.splitlines()
    assert lines[:3] == ["riscv64", "/mnt/host", "host data"]
    assert lines[3].split() == ["mmu", ":", "sv57"]
    isa = lines[4].split(":")[1].strip().split("_")
    # RV64GC (+H) without vector; AIA's supervisor CSRs for the IMSIC
    assert isa[0] == "rv64imafdch"
    assert "ssaia" in isa and "sscofpmf" not in isa
    assert lines[5] == "perf version 6.12.117"
    assert "cpu" not in lines[6].split() and "software" in lines[6].split()
    assert lines[7:9] == ["<not supported>,instructions",
                          "<not supported>,cycles"]
    assert lines[9:] == ["1", "loop=5"]
    assert (tmp_path / "from_guest.txt").read_text() == "guest data\n"
    assert leftovers() == []


def test_ctrl_c_stops_and_cleans_up(image, tmp_path):
    proc = start_long_run(tmp_path, *ARCH, "--no-pmu", boot_timeout=120)
    interrupt_and_expect_clean(proc, signal.SIGINT, EXIT_INTERRUPTED)


def test_perf_stat_counts_the_loop_exactly_and_the_driver_loads_clean(
        image, loop, tmp_path):
    """In-guest perf stat through pvperf's driver against the loop's
    analytic count (loop.c: 2N + 10d + 24 instructions for a d-digit N;
    N + d + 6 branches: the loop's bnez, the parse's branches, the
    _start call and the jump to the exit), and the driver's load in
    dmesg: the doorbell bound, the fault hook in, no warning."""
    shutil.copy(loop, tmp_path / "loop")
    r = run_pvperf(["run", *ARCH, "--share", str(tmp_path), "--", "sh", "-c",
                    "perf stat -x, -e instructions:u,branches:u ./loop 1000 "
                    "2>&1 >/dev/null | cut -d, -f1,3; "
                    "dmesg | grep -E 'pvperf|WARNING|Call Trace'"],
                   timeout=180)
    print(r.stdout)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    assert lines[:2] == [f"{2 * 1000 + 10 * 4 + 24},instructions:u",
                         f"{1000 + 4 + 6},branches:u"]
    dmesg = lines[2:]
    assert any("overflow interrupt: doorbell MSI-X" in l for l in dmesg)
    assert any("sampling with exact IPs" in l for l in dmesg)
    # (an unsigned out-of-tree module taints the kernel, and the kernel
    # says "module verification failed": expected, as on x86_64)
    assert not [l for l in dmesg if "module verification" not in l and any(
        bad in l for bad in ("WARNING", "Call Trace", "would not be exact",
                             "failed", "not registering", "not bound"))]
    assert leftovers() == []


@pytest.mark.skipif(os.environ.get("PVPERF_SLOW") != "1",
                    reason="six boots; PVPERF_SLOW=1")
def test_boot_at_most_twice_x86_64s(image):
    """`pvperf run --no-pmu -- true`, riscv64 and x86_64 interleaved, 3
    each (this host's timings move by 20-40 % from run to run)."""
    times: dict[str, list[float]] = {"riscv64": [], "x86_64": []}
    for _ in range(3):
        for arch in times:
            t0 = time.monotonic()
            r = run_pvperf(["run", "--arch", arch, "--no-pmu", "--", "true"],
                           timeout=180)
            times[arch].append(time.monotonic() - t0)
            assert r.returncode == 0, r.stderr[-2000:]
    print({a: [round(t, 2) for t in ts] for a, ts in times.items()})
    assert statistics.median(times["riscv64"]) <= \
        2 * statistics.median(times["x86_64"])


# valgrind in the riscv64 guest (`pvperf image build --arch riscv64 --name
# test-riscv64-valgrind --add valgrind`: sid's valgrind on trixie, the
# recipe's package_suites), the reference every riscv64 feature module
# compares against: --tool=none runs a program to its own exit status,
# cachegrind's Ir equals loop's analytic count (riscv64/loop.c) with
# --vex-guest-chase=no, and its cache and branch simulation runs.
LOOP_CASES = ((1, None), (9, None), (10, None), (100000, None), (1000, 5),
              (1000, 17))


def loop_count(n: int, status: int | None) -> int:
    """riscv64/loop's instructions, counted by hand from its
    disassembly: 2N + 10d (+ 10e + 31 with a status, else + 24)."""
    tail = 24 if status is None else 10 * len(str(status)) + 31
    return 2 * n + 10 * len(str(n)) + tail


def valgrind_script() -> str:
    ir = ("valgrind --tool=cachegrind --cache-sim=no --vex-guest-chase=no "
          "--cachegrind-out-file=/dev/null")
    lines = ["cd riscv64", "echo '=== version'", "valgrind --version",
             "echo '=== none'", "valgrind --tool=none -q ./loop 1000 3",
             "echo status=$?"]
    for n, s in LOOP_CASES:
        args = f"{n}" if s is None else f"{n} {s}"
        lines += [f"echo '=== ir {args}'", f"{ir} ./loop {args} 2>&1 "
                  "| grep 'I *refs'"]
    lines += ["echo '=== sim'",
              "valgrind --tool=cachegrind --cache-sim=yes --branch-sim=yes "
              "--vex-guest-chase=no --cachegrind-out-file=cg.out "
              "./memwalk 1 4 >/dev/null 2>&1; echo status=$?",
              "grep -E '^(events|summary):' cg.out; rm -f cg.out",
              "echo '=== end'"]
    return "\n".join(lines)


def test_valgrind_runs_in_the_guest_and_counts_loop_analytically(loop):
    from support import GUEST_ARCHES, sections
    g = GUEST_ARCHES["riscv64"]
    g.build()
    image = g.valgrind_image()
    r = run_pvperf(["run", *image, "--no-pmu", "--share", str(PROGRAMS),
                    "--", "sh", "-c", valgrind_script()], timeout=600)
    s = sections(r.stdout)
    print(r.stdout)
    assert r.returncode == 0 and "end" in s, r.stdout[-3000:] + r.stderr
    # riscv64 support came with 3.25: sid's, not trixie's
    major, minor = map(int, s["version"][0].split("-")[1].split(".")[:2])
    assert (major, minor) >= (3, 25), s["version"]
    assert s["none"] == ["status=3"]
    for n, st in LOOP_CASES:
        args = f"{n}" if st is None else f"{n} {st}"
        got = int(s[f"ir {args}"][0].split(":")[1].replace(",", ""))
        assert got == loop_count(n, st), (args, got)
    assert s["sim"][0] == "status=0"
    names = s["sim"][1].split()[1:]
    values = dict(zip(names, map(int, s["sim"][2].split()[1:])))
    assert {"Ir", "Dr", "D1mr", "Bc", "Bcm"} <= values.keys(), s["sim"]
    assert values["Dr"] > 2000 and values["Bc"] > 2000, values
