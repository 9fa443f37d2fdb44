"""Guests with RAM beyond 4 GiB: `--mem 6G`, with bigtouch (a
freestanding program that maps MIB MiB and stores into every page, then
reads every page back PASSES times) filling the guest's upper
gigabytes.  Each check has its own reference:

- the guest's view of its RAM (/proc/iomem's "System RAM" ranges, as
  its firmware and QEMU's machine set them up) holds the RAM layout's
  upper range (pyhost/ram.py): x86's pc from 4 GiB, arm64's virt one
  range from 1 GiB;
- bigtouch's instructions:u equals valgrind's Ir (x86_64: on the host;
  arm64: in the same guest), extrapolated from two small sizes with as
  many digits (the count is linear in MIB: bigtouch.c), a third size
  checking that it is;
- `perf record` of it resolves: its samples name touch and sum in the
  shares of their loops (callgrind on x86_64; arm64: the loops' lengths
  in objdump's disassembly), and the guest put its sample ring above
  4 GiB (the service's debug log says where), so the plugin wrote every
  sample there;
- a checkpoint taken while bigtouch reads its pages back restores
  exactly: the count across it equals valgrind's, and bigtouch finds
  every page as it left it (its exit status).

By default only x86_64's first three checks run, MIB 512: one boot, under
a minute.  PVPERF_SLOW=1 adds arm64 (with its valgrind image) and the
checkpoint (two more boots), and makes MIB 5120: 5 GiB in the 6 GiB
guest (a minute or more of page faults per run under TCG).
"""
from __future__ import annotations

import os
import re
import subprocess
from typing import NamedTuple

import pytest

from support import Guest, PROGRAMS, leftovers, on, perf_count, \
    run_pvperf, sections, valgrind_irefs
from sampling_refs import callgrind_shares, report_shares
from pyhost import arch

pytestmark = pytest.mark.vm

SLOW = os.environ.get("PVPERF_SLOW") == "1"
MEM = "6G"
MIB = "5120" if SLOW else "0512"
SMALL = ("0016", "0032", "0048")        # as many digits as MIB
# Each pass reads every page once: 5 instructions and, under TCG, a miss
# in QEMU's TLB per page (the pass's cost).  20 passes: a few thousand
# samples at PERIOD, touch about 5 % of them.
PASSES = "20"
# The checkpoint's run reads its pages back long enough (seconds under
# TCG) to be caught in the middle: 26 M page reads either way.
CK_PASSES = "20" if SLOW else "200"
PERIOD = 2003
TOUCHED = "bigtouch: touched"
GUESTS = (Guest("x86_64"),
          pytest.param(Guest("aarch64"), marks=pytest.mark.slow,
                       id="aarch64-smp1"))
VALGRIND = ("valgrind --tool=cachegrind --cache-sim=no "
            "--vex-guest-chase=no --cachegrind-out-file=/dev/null")
RING = re.compile(r"vcpu (\d+): sample ring at gpa (0x[0-9a-f]+)")


def options(guest: Guest) -> list[str]:
    """arm64 boots the image with valgrind in it (its reference)."""
    if guest.arch == "aarch64":
        return guest.a.image("test-aarch64-valgrind", "valgrind")
    return guest.a.image()


def script(guest: Guest) -> str:
    run = f"./bigtouch {MIB} {PASSES} >/dev/null"
    lines = [f"cd {guest.a.programs.relative_to(PROGRAMS)}",
             "echo '=== iomem'; grep 'System RAM' /proc/iomem",
             "echo '=== stat'",
             f"perf stat -x, -e instructions:u -o /tmp/s.txt {run}; "
             "echo rc=$?; cat /tmp/s.txt",
             "echo '=== record'",
             f"perf record -q -e instructions:u -c {PERIOD} -o /tmp/b.data "
             f"{run}; echo rc=$?",
             "perf report -i /tmp/b.data --stdio --sort sym 2>&1 | grep %",
             "perf report -i /tmp/b.data --stats 2>&1 | grep 'SAMPLE events'"]
    if guest.arch == "aarch64":
        for n in SMALL:
            lines += [f"echo '=== valgrind {n}'",
                      f"{VALGRIND} ./bigtouch {n} {PASSES} 2>&1 >/dev/null"]
    return "\n".join(lines + ["echo '=== end'"])


class Run(NamedTuple):
    guest: Guest
    out: dict[str, list[str]]
    rings: list[int]             # the sample rings' gpas


@pytest.fixture(scope="module")
def big(request) -> Run:
    guest = request.param
    guest.a.build()
    # --debug: the service logs where each sample ring is
    r = run_pvperf(["--debug", "run", *options(guest), "--mem", MEM,
                    "--share", str(PROGRAMS), "--", "sh", "-c",
                    script(guest)], timeout=1800 if SLOW else 600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    s = sections(r.stdout)
    assert "end" in s, r.stdout[-3000:] + r.stderr[-3000:]
    return Run(guest, s, [int(m.group(2), 16)
                          for m in RING.finditer(r.stderr)])


def extrapolate(counts: list[int], digits: tuple[str, ...], n: str) -> int:
    """The count at n from counts at sizes ``digits``, after checking
    that they lie on one line (bigtouch.c: linear in MIB)."""
    (a, b, c), (x, y, z) = counts, (int(d) for d in digits)
    assert (b - a) * (z - y) == (c - b) * (y - x), counts
    return a + (b - a) * (int(n) - x) // (y - x)


def reference(run: Run, passes: str = PASSES) -> int:
    if run.guest.arch == "aarch64":
        counts = [irefs(run.out[f"valgrind {n}"]) for n in SMALL]
    else:
        counts = [valgrind_irefs([str(PROGRAMS / "bigtouch"), n, passes])
                  for n in SMALL]
    return extrapolate(counts, SMALL, MIB)


def irefs(section: list[str]) -> int:
    (line,) = [line for line in section if "I   refs:" in line]
    return int(line.split(":")[1].replace(",", ""))


def ram_ranges(lines: list[str]) -> list[tuple[int, int]]:
    out = []
    for line in lines:
        m = re.match(r"\s*([0-9a-f]+)-([0-9a-f]+) : System RAM", line)
        if m:
            out.append((int(m.group(1), 16), int(m.group(2), 16) + 1))
    return out


@pytest.mark.parametrize("big", GUESTS, indirect=True, ids=str)
def test_guest_ram_reaches_beyond_4g_as_the_layout_says(big):
    layout = arch.get(big.guest.arch).ram_layout(6 << 30)
    top = layout.ranges[-1]
    assert top.gpa + top.size > 4 << 30
    # the firmware may keep pages at the start for itself; the end is
    # the machine's
    assert any(start >= top.gpa and end == top.gpa + top.size
               for start, end in ram_ranges(big.out["iomem"])), \
        (big.out["iomem"], layout)


@pytest.mark.parametrize("big", GUESTS, indirect=True, ids=str)
def test_count_of_a_program_in_the_upper_gigabytes_is_valgrinds(big):
    stat = big.out["stat"]
    assert "rc=0" in stat, stat
    assert int(perf_count(stat, "instructions:u")) == reference(big), stat


def loop_shares(guest: Guest) -> dict[str, float]:
    """touch's and sum's shares of bigtouch MIB PASSES (percent)."""
    binary = guest.a.programs / "bigtouch"
    if guest.arch == "x86_64":
        return callgrind_shares([str(binary), SMALL[0], PASSES])
    # arm64: each loop's body, from its backward branch to its target,
    # once per page in touch and PASSES times in sum
    text = subprocess.run([guest.a.cross + "objdump", "-d", str(binary)],
                          capture_output=True, text=True, check=True).stdout
    body = {}
    for fn in ("touch", "sum"):
        block = text.split(f"<{fn}>:\n", 1)[1].split("\n\n", 1)[0]
        (m,) = re.finditer(r"^\s*([0-9a-f]+):.*\tb\.\w+\s+([0-9a-f]+)",
                           block, re.M)
        body[fn] = (int(m.group(1), 16) - int(m.group(2), 16)) // 4 + 1
    total = body["touch"] + int(PASSES) * body["sum"]
    return {"touch": 100 * body["touch"] / total,
            "sum": 100 * int(PASSES) * body["sum"] / total}


@pytest.mark.parametrize("big", GUESTS, indirect=True, ids=str)
def test_samples_of_the_upper_gigabytes_resolve(big):
    rec = big.out["record"]
    assert "rc=0" in rec, rec
    got = report_shares(rec)
    want = loop_shares(big.guest)
    n = int(next(line for line in rec
                 if "SAMPLE events" in line).split(":")[1].split()[0])
    assert n > 1000, rec
    for fn in ("touch", "sum"):
        # 4 binomial sigma of n samples, and startup's instructions
        p = want[fn] / 100
        bound = 400 * (p * (1 - p) / n) ** 0.5 + 0.2
        assert abs(got.get(fn, 0.0) - want[fn]) <= bound, (fn, got, want)
    assert sum(got.values()) >= 99.0, got       # nothing unresolved
    # the ring the plugin wrote them into lies above 4 GiB
    assert big.rings and max(big.rings) >= 4 << 30, big.rings


# -- a checkpoint of such a guest ------------------------------------------

CK_SCRIPT = f"""
perf stat -x, -e instructions:u -o /tmp/stat.txt \
    ./bigtouch {MIB} {CK_PASSES}; echo rc=$?
echo "=== stat"; cat /tmp/stat.txt
echo "=== end"
"""


class Checkpoint(NamedTuple):
    guest: Guest
    taken: subprocess.CompletedProcess
    restored: subprocess.CompletedProcess


@pytest.fixture(scope="module")
def checkpoint(request, tmp_path_factory) -> Checkpoint:
    """x86_64, the default image: taken once bigtouch has touched its
    pages (it says so), restored."""
    guest = request.param
    guest.a.build()
    d = tmp_path_factory.mktemp("bigck") / "ck"
    taken = run_pvperf(["run", *guest.a.image(), "--mem", MEM, "--share",
                        str(guest.a.programs), "--checkpoint", str(d),
                        "--checkpoint-on-output", TOUCHED, "--", "sh", "-c",
                        CK_SCRIPT], timeout=1800 if SLOW else 600)
    assert taken.returncode == 0, taken.stdout[-2000:] + taken.stderr
    assert "=== stat" not in taken.stdout       # stopped mid-program
    restored = run_pvperf(["restore", str(d)], timeout=1800)
    assert restored.returncode == 0, \
        restored.stdout[-2000:] + restored.stderr
    return Checkpoint(guest, taken, restored)


@pytest.mark.slow
@on(Guest("x86_64"), fixture="checkpoint")
def test_checkpoint_of_a_big_guest_restores_exactly(checkpoint):
    out = checkpoint.restored.stdout
    s = sections(out)
    assert "end" in s, out[-2000:] + checkpoint.restored.stderr
    # bigtouch read back every page as it left it, after the restore
    assert "rc=0" in out, out[-2000:]
    counts = [valgrind_irefs([str(PROGRAMS / "bigtouch"), n, CK_PASSES])
              for n in SMALL[:2]]
    x, y = (int(n) for n in SMALL[:2])
    want = counts[0] + (counts[1] - counts[0]) * (int(MIB) - x) // (y - x)
    assert int(perf_count(s["stat"], "instructions:u")) == want, s["stat"]


@pytest.mark.slow
@on(Guest("x86_64"), fixture="checkpoint")
def test_no_leftovers_after_a_big_restore(checkpoint):
    assert leftovers() == []
