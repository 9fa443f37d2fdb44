"""Stock perf in arm64 and riscv64 guests against valgrind run inside the
same guest: one boot, at smp 2, of the image with valgrind added (`pvperf
image build --arch aarch64 --name test-aarch64-valgrind --add valgrind`,
riscv64's valgrind from sid): perf counts each program and `valgrind
--tool=cachegrind --cache-sim=no --vex-guest-chase=no` counts the same
binary; its I refs (Ir) are the reference.  (x86_64's valgrind runs on the
host: test_counting.py.)

Why --vex-guest-chase=no: valgrind 3.19's arm64 front end, chasing
branches into one superblock (its default), counts instructions that a
conditional branch in that superblock skipped.  `loop N` shows it:
lackey traces (`--tool=lackey --trace-mem=yes --trace-superblocks=yes`)
give the superblock at cbz (main_sp+0x78) as cbz, subs, b.ne, and the
subs and b.ne are listed once more than they run: after a taken cbz
(loop 0, 33 for 31), or after the loop's last b.ne (loop 2: 37 for 35,
N + 1 passes listed); loop 1 (whose cbz and b.ne both fall through) is
exact.  So Ir is the analytic count + 2 for every N but 1; without
chasing it is the analytic count for all N (checked below), as for
x86's branch counts (support.cachegrind).

Freestanding programs (loop, pages, memwalk): exact.  The dynamically
linked qs: cachegrind counts ~10,000 (0.026 %) more than the guest's
perf: valgrind preloads its vgpreload_core-arm64-linux.so into the
client, whose initialisation and symbol resolution the native run does
not do.  Natively with the same LD_PRELOAD the perf count is within
0.005 % of Ir (measured 948 of 39.2 M above it, for qs 100000): what
remains is ld.so working on valgrind's own auxv and environment.
riscv64's qs differs by glibc's memcpy choice (libc_reference).

smp 2: two loops pinned to the two vCPUs at once count exactly their
own instructions; two qs at once, which share libc's and ld.so's
physical pages (and so their translated code), each within the same
bound of Ir.
"""
from __future__ import annotations

import re

import pytest

from support import Guest, leftovers, on, run_guest_script
from test_counting import ANALYTIC, arm64_loop_counts

pytestmark = pytest.mark.vm

ARM64_VALGRIND = Guest("aarch64", 2)
RV64_VALGRIND = Guest("riscv64", 2)
# valgrind's preload library, by valgrind's name of the architecture
PRELOAD = "/usr/libexec/valgrind/vgpreload_core-{}-linux.so"
VALGRIND_ARCH = {"aarch64": "arm64", "riscv64": "riscv64"}
FREESTANDING = {"loop0": "loop 0", "loop1": "loop 1", "loop2": "loop 2",
                "loop1e6": "loop 1000000", "pages": "pages 1000",
                "memwalk": "memwalk 2 1"}
QS = "qs 100000"
PAIR = (20_000_000, 30_000_000)         # same digits: loop N's own count


def valgrind_script(arch: str) -> str:
    stat = "perf stat -x, -e instructions:u"
    cg = ("valgrind --tool=cachegrind --cache-sim=no "
          "--cachegrind-out-file=/dev/null")
    preload = PRELOAD.format(VALGRIND_ARCH[arch])
    lines = [f"cd {arch}"]
    for name, cmd in {**FREESTANDING, "qs": QS}.items():
        out = "--cachegrind-out-file=.cg-qs.out " if name == "qs" else ""
        lines += [f"echo '=== {name}'",
                  f"{stat} ./{cmd} 2>&1 >/dev/null",
                  f"{cg} {out}--vex-guest-chase=no ./{cmd} 2>&1 >/dev/null"]
    lines += [f"echo '=== chase'; {cg} ./loop 2 2>&1 >/dev/null",
              f"echo '=== preload'; LD_PRELOAD={preload} {stat} ./{QS} "
              "2>&1 >/dev/null"]
    for name, (a, b) in (("pair", [f"loop {n}" for n in PAIR]),
                         ("qspair", (QS, QS))):
        lines += [f"echo '=== {name}'",
                  f"taskset -c 0 {stat},branches:u -o /tmp/a ./{a} "
                  ">/dev/null &",
                  f"taskset -c 1 {stat},branches:u -o /tmp/b ./{b} "
                  ">/dev/null",
                  "wait; cat /tmp/a /tmp/b"]
    return "\n".join(lines + ["echo '=== end'"])


@pytest.fixture(scope="module")
def valgrind_guest(request):
    g = request.param
    try:
        s = run_guest_script(valgrind_script(g.arch), g.smp, 900,
                             tuple(g.a.valgrind_image()))
        s["qs.fn"] = cachegrind_functions(g.a.programs / ".cg-qs.out")
    finally:
        (g.a.programs / ".cg-qs.out").unlink(missing_ok=True)
    s["arch"] = g.arch
    return s


def cachegrind_functions(path) -> dict[str, int]:
    """{function: Ir} of a cachegrind.out (its fn= blocks' cost lines)."""
    out: dict[str, int] = {}
    fn = None
    for line in path.read_text().splitlines():
        if line.startswith("fn="):
            fn = line[3:]
        elif fn and line[:1].isdigit():
            out[fn] = out.get(fn, 0) + int(line.split()[1])
    return out


def libc_reference(valgrind_guest) -> tuple[int, int]:
    """(cachegrind's Ir of qs, how far below it the guest's count may
    lie).  arm64: valgrind's preload (0.01 to 0.1 %, above).  riscv64:
    glibc's memcpy is an ifunc chosen by the riscv_hwprobe syscall
    (misaligned accesses fast or not); under valgrind 3.27 the client
    gets __memcpy_generic and its _wordcopy helpers, natively
    __memcpy_noalignment (perf report of the native run: msort_with_tmp
    58.3 %, cmp 22.7 %, __memcpy_noalignment 12.9 % of 40,456,027;
    cachegrind: msort_with_tmp 23,585,003, cmp 9,217,992, main 1,900,048
    alike, __memcpy_generic 7,674,459 + _wordcopy_fwd_* 3,947,384 of
    46,886,384).  So the guest's count lies below Ir by less than
    valgrind's memcpy functions cost, and by more than the preload's
    share."""
    ir = irefs(valgrind_guest["qs"])
    if valgrind_guest["arch"] != "riscv64":
        return ir, int(0.001 * ir)
    memcpy = sum(v for f, v in valgrind_guest["qs.fn"].items()
                 if "memcpy" in f or "wordcopy" in f)
    assert memcpy > 0.1 * ir, valgrind_guest["qs.fn"]
    return ir, memcpy


def perf_counts(section: list[str]) -> list[int]:
    return [int(line.split(",")[0]) for line in section
            if ",instructions:u," in line]


def irefs(section: list[str]) -> int:
    """cachegrind's I refs (3.19 pads the label, "I   refs:"; 3.27 not)."""
    (line,) = [line for line in section if re.search(r"I\s+refs:", line)]
    return int(line.split(":")[1].replace(",", ""))


@on(ARM64_VALGRIND, RV64_VALGRIND, fixture="valgrind_guest")
@pytest.mark.parametrize("name", FREESTANDING)
def test_freestanding_counts_equal_irefs(valgrind_guest, name):
    assert perf_counts(valgrind_guest[name]) == [irefs(valgrind_guest[name])]


@on(ARM64_VALGRIND, RV64_VALGRIND, fixture="valgrind_guest")
def test_irefs_are_the_analytic_counts(valgrind_guest):
    """The reference itself, checked: without chasing, valgrind's Ir of
    loop N is the analytic count (arm64 2N + 8d + 23, riscv64 2N + 10d +
    24: the module docstring), N = 1 included."""
    loop_counts = ANALYTIC[valgrind_guest["arch"]][0]
    for name, n in (("loop0", 0), ("loop1", 1), ("loop2", 2),
                    ("loop1e6", 1_000_000)):
        assert irefs(valgrind_guest[name]) == loop_counts(n)[0], name


@on(ARM64_VALGRIND, fixture="valgrind_guest")
def test_chasing_counts_two_skipped_instructions(valgrind_guest):
    """valgrind's default (chasing) counts loop 2's subs and b.ne once
    more than they run (see above)."""
    assert irefs(valgrind_guest["chase"]) == arm64_loop_counts(2)[0] + 2


@on(ARM64_VALGRIND, RV64_VALGRIND, fixture="valgrind_guest")
def test_libc_program_differs_by_valgrinds_preload(valgrind_guest):
    """qs against cachegrind within libc_reference's explanation; with
    valgrind's preload library the arm64 count is Ir's."""
    ir, below = libc_reference(valgrind_guest)
    (native,) = perf_counts(valgrind_guest["qs"])
    assert 0.0001 * ir < ir - native < below, (native, ir, below)
    if valgrind_guest["arch"] == "aarch64":
        (preloaded,) = perf_counts(valgrind_guest["preload"])
        assert abs(preloaded - ir) <= 0.00005 * ir, (preloaded, ir)


@on(ARM64_VALGRIND, RV64_VALGRIND, fixture="valgrind_guest")
def test_smp2_two_loops_count_exactly(valgrind_guest):
    """loop N's instructions and branches: the analytic counts."""
    loop_counts = ANALYTIC[valgrind_guest["arch"]][0]
    lines = valgrind_guest["pair"]
    branches = [int(line.split(",")[0]) for line in lines
                if ",branches:u," in line]
    assert perf_counts(lines) == [loop_counts(n)[0] for n in PAIR]
    assert branches == [loop_counts(n)[1] for n in PAIR]


@on(ARM64_VALGRIND, RV64_VALGRIND, fixture="valgrind_guest")
def test_smp2_processes_sharing_libc(valgrind_guest):
    """Two qs at once on two vCPUs, sharing libc: each as one qs alone
    against cachegrind (the bound above)."""
    ir, below = libc_reference(valgrind_guest)
    counts = perf_counts(valgrind_guest["qspair"])
    assert len(counts) == 2, valgrind_guest["qspair"]
    for c in counts:
        assert 0.0001 * ir < ir - c < below, (counts, ir, below)


@on(ARM64_VALGRIND, RV64_VALGRIND, fixture="valgrind_guest")
def test_nothing_left_behind(valgrind_guest):
    assert leftovers() == []
