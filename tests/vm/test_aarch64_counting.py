"""arm64 counting end to end: the stock arm64 perf in an aarch64 guest,
the arm64 pvperf.ko (guest_kernel_patch/arm64/), the plugin and the host
service count a cross-compiled program's user instructions and branches
exactly.  One boot runs every measurement; a second, under QEMU's own
PMUv3 with icount (not pvperf's PMU), gives a second opinion on loop.

The references are analytic, read off the programs' disassembly
(`aarch64-linux-gnu-objdump -d tests/guest_programs/aarch64/{loop,pages}`,
-O2 with the Makefile's flags), not pvperf's own numbers.  With N given
as a d-digit decimal argument and the path through the code:

loop N:  _start (mov, bl) 2; main_sp's argc test (ldr, cmp, b.gt) 3; the
first digit (ldr, ldrb, sub, and, cmp, b.hi) 6; mov, nop 2; one pass of
the 8-instruction digit loop per further character (d-1 digits and the
NUL) 8d; cbz 1; the counted loop (subs; b.ne) 2N; the STATUS test (cmp,
b.eq) 2 and its default (mov, b) 2; the exit (4 movs, svc) 5:
2N + 8d + 23 instructions.  Branches: bl, b.gt, b.hi, d b.ls, cbz, N
b.ne, b.eq, b (svc is not counted as a branch): N + d + 6.

pages N:  _start 2; ldr, mov, cmp, b.le 4; ldr, mov, ldrb, sub, and,
cmp, b.hi 7; nop 1; the digit loop 8d; mmap (lsl, 6 movs, svc) 8; tbnz,
add, mov, cbz 4; per page (strb, add, cmp, b.ne) 4N; exit 5:
4N + 8d + 31 instructions; branches bl, b.le, b.hi, d b.ls, tbnz, cbz, N
b.ne: N + d + 5.  Every page's first store faults (the kernel maps the
page and the store runs again); the count must not see that: the arm64
driver reports each fault to the host (its page-fault hook)."""
import shutil
import subprocess

import pytest

from support import (PROGRAMS, aarch64_image, leftovers, run_pvperf,
                     run_qemu_pmuv3)

pytestmark = pytest.mark.vm

ARCH = ["--arch", "aarch64"]
# Same number of digits in each pair: the difference is the loop's alone.
LOOP_N = (1_000_000, 3_000_000)
PAGES_N = (1000, 2000)


def loop_counts(n: int) -> tuple[int, int]:
    d = len(str(n))
    return 2 * n + 8 * d + 23, n + d + 6


def pages_counts(n: int) -> tuple[int, int]:
    d = len(str(n))
    return 4 * n + 8 * d + 31, n + d + 5


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    """A share holding the cross-compiled loop and pages."""
    subprocess.run(["make", "-s", "-C", str(PROGRAMS), "aarch64"],
                   check=True)
    share = tmp_path_factory.mktemp("aarch64-share")
    for name in ("loop", "pages"):
        shutil.copy(PROGRAMS / "aarch64" / name, share / name)
    return share


@pytest.fixture(scope="module")
def arm64_driver():
    """guest_kernel_patch/arm64/pvperf.ko in the aarch64 image."""
    aarch64_image()


@pytest.fixture(scope="module")
def measured(programs, arm64_driver):
    """{(program, N): (instructions:u, branches:u)}, the driver's load
    message, and perf record's exit status and message, from one boot."""
    stat = "perf stat -x, -e instructions:u,branches:u"
    lines = [f"echo @loop {n}; {stat} ./loop {n} 2>&1" for n in LOOP_N]
    lines += [f"echo @pages {n}; {stat} ./pages {n} 2>&1" for n in PAGES_N]
    lines += ["echo @dmesg; dmesg | grep 'pvperf: PMU'",
              "echo @record; perf record -o /tmp/p.data -e instructions:u "
              "./loop 1000 2>&1; echo status=$?"]
    r = run_pvperf(["run", *ARCH, "--share", str(programs), "--",
                    "sh", "-c", "; ".join(lines)], timeout=600)
    assert r.returncode == 0, (r.stdout, r.stderr[-2000:])
    sections, key = {}, None
    for line in r.stdout.splitlines():
        if line.startswith("@"):
            key = tuple(line[1:].split())
            sections[key] = []
        else:
            sections[key].append(line)
    return sections


def counts(section: list[str]) -> tuple[int, int]:
    values = {f[2]: int(f[0]) for f in (line.split(",") for line in section)
              if len(f) > 2 and f[0].isdigit()}
    return values["instructions:u"], values["branches:u"]


@pytest.mark.parametrize("n", LOOP_N)
def test_loop_counts_exactly(measured, n):
    assert counts(measured[("loop", str(n))]) == loop_counts(n)


def test_loop_difference_is_the_loop_body(measured):
    (i1, b1), (i2, b2) = (counts(measured[("loop", str(n))]) for n in LOOP_N)
    dn = LOOP_N[1] - LOOP_N[0]
    assert (i2 - i1, b2 - b1) == (2 * dn, dn)


@pytest.mark.parametrize("n", PAGES_N)
def test_page_faults_are_not_counted(measured, n):
    assert counts(measured[("pages", str(n))]) == pages_counts(n)


@pytest.fixture(scope="module")
def pmuv3(programs, arm64_driver):
    """{N: instructions:u} of loop N under QEMU's own PMUv3 with icount
    (the second opinion; QEMU counts no branches:u there)."""
    stat = "perf stat -x, -e instructions:u"
    r = run_qemu_pmuv3(programs, "; ".join(
        f"echo @{n}; {stat} ./loop {n} 2>&1" for n in LOOP_N))
    assert r.returncode == 0, (r.stdout, r.stderr[-2000:])
    got, key = {}, None
    for line in r.stdout.splitlines():
        if line.startswith("@"):
            key = int(line[1:])
        elif ",instructions:u," in line:
            got[key] = int(line.split(",")[0])
    return got


@pytest.mark.parametrize("n", LOOP_N)
def test_qemu_pmuv3_counts_the_same(measured, pmuv3, n):
    """QEMU's PMUv3 (INST_RETIRED, -icount shift=0) counts loop N as the
    analytic count, and so as pvperf does."""
    assert pmuv3[n] == loop_counts(n)[0] == counts(
        measured[("loop", str(n))])[0]


def test_driver_counts_and_samples(measured):
    """The doorbell device is the overflow interrupt: the driver samples
    (tests/vm/test_aarch64_sampling.py checks the samples)."""
    assert "sampling with exact IPs" in measured[("dmesg",)][0]
    record = measured[("record",)]
    assert record[-1] == "status=0", record
    assert leftovers() == []
