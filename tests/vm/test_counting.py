"""Stock perf in the guest counts exact events through the paravirtual
PMU, on every guest architecture.  Every number is checked against an
independent reference: valgrind's Ir for the same static binary (on the
host for x86_64; inside the guest for arm64, the aarch64 image with
valgrind added: the host cannot run arm64 valgrind), or an analytic
count read off the disassembly (arm64's loop and pages, below).

One guest boot per configuration runs all perf commands (booting is the
expensive part); each test then checks its section of the output.  The
x86_64 boots (smp 2, and 1 with PVPERF_SLOW=1) run the full script;
arm64 runs its programs in one boot, QEMU's own PMUv3 in a second;
valgrind beside perf in the same guest is test_counting_valgrind.py.  Where both run a check (the loop, the pages, the loop's
difference), the sections have the same names and the references come
from REFERENCES.

arm64's analytic counts, read off `aarch64-linux-gnu-objdump -d
tests/guest_programs/aarch64/{loop,pages}` (-O2 with the Makefile's
flags), with N given as a d-digit decimal argument:

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
driver reports each fault to the host (its page-fault hook).

riscv64 runs arm64's script and checks on its own programs (riscv64/,
`riscv64-linux-gnu-objdump -d`), its valgrind from sid in the guest:

loop N:  2N + 10d + 24 instructions (riscv64/loop.c); branches: the
_start call (jalr), blt, bltu, d bgeu, beqz, N bnez, beq, j: N + d + 6.

pages N:  _start (mv, auipc, jalr) 3; ld, li, li, bge 4; ld, li, li, lbu,
addw, zext.b, bltu 7; li 1; the digit loop 10d; mmap (sll, 6 li, ecall)
8; bltz, add, li, lui, beqz 5; per page (sb, add, bne) 3N; exit 5:
3N + 10d + 33 instructions; branches jalr, bge, bltu, d bgeu, bltz,
beqz, N bne: N + d + 5.
"""
from __future__ import annotations

import pytest

from pyhost import abi

from support import (Guest, driver_counters_per_cpu, leftovers, on,
                     run_guest_script, run_pvperf, run_qemu_pmuv3,
                     valgrind_irefs)

pytestmark = pytest.mark.vm

# x86_64 at smp 1 runs with PVPERF_SLOW=1 only: smp 2 runs the same script
# and checks, and SMP besides; exact counts at smp 1 stay in the default
# run (arm64's and riscv64's boots here, test_models' and test_events'
# x86_64 ones against cachegrind).
X86 = (Guest("x86_64", 1, slow=True), Guest("x86_64", 2))
ARM64 = Guest("aarch64", 1)
RV64 = Guest("riscv64", 1)
PROGRAMS = X86[0].a.programs

N_LOOP = 100000
N_MUX = 50000000        # ~50 ms: many 4 ms multiplexing rotations
# Two more events than the driver has counters: perf multiplexes them.
N_MUX_EVENTS = driver_counters_per_cpu() + 2
MUX_EVENTS = ",".join(["instructions:u"] * N_MUX_EVENTS)
N_PAGES = 3000
# Long enough (~100 ms of guest time) that CFS must preempt it for its
# competitor: a task woken from sleep is placed up to half a scheduling
# latency (6 ms at smp 2) behind the queue, so a short loop can run out
# its credit and end without a switch.
N_SWITCH = 50_000_000
K_EXTRA = 12345
# Over 2^29 user branches in one run: more than the packed word's branch
# field holds (qemu_plugin/pvperf/core.h), so its folds must have moved
# it into the counts in time.
N_LONG = 600_000_000

SCRIPT = f"""
sec() {{ echo "=== $1"; }}
sec dmesg;   dmesg | grep 'pvperf:'
sec loop;    perf stat -x, -e instructions:u,branches:u ./loop {N_LOOP} 2>&1
sec loopk;   perf stat -x, -e instructions:u,branches:u ./loop {N_LOOP + K_EXTRA} 2>&1
sec long;    perf stat -x, -e instructions:u,branches:u ./loop {N_LONG} 2>&1
sec pages;   perf stat -x, -e instructions:u ./pages {N_PAGES} 2>&1
sec pagesb;  perf stat -x, -e instructions:u,branches:u ./pages {N_PAGES} 2>&1
sec pagesb2; perf stat -x, -e instructions:u,branches:u ./pages {2 * N_PAGES} 2>&1
sec repeat;  for i in 1 2 3; do perf stat -x, -e instructions:u ./pages {N_PAGES} 2>&1; done
             sleep 3; perf stat -x, -e instructions:u ./pages {N_PAGES} 2>&1
sec inherit; perf stat -x, -e instructions:u ./forker {N_LOOP} 2>&1
             perf stat -x, --no-inherit -e instructions:u ./forker {N_LOOP} 2>&1
             perf stat -x, -e instructions:u ./forker {N_LOOP + K_EXTRA} 2>&1
sec switch;  taskset -c 0 ./loop 3000000000 & until pidof loop > /dev/null; do :; done; usleep 100000; taskset -c 0 perf stat -x, -e instructions:u,context-switches ./loop {N_SWITCH} 2>&1; kill %1
sec group;   perf stat -x, -e '{{instructions:u,instructions:k,instructions}}' ./pages 500 2>&1
sec raw;     perf stat -x, -e r00c0:u,cpu/instructions/u,cpu/event=0xc4/u ./loop 1000 2>&1
sec raw2;    perf stat -x, -e r00c0:u,cpu/instructions/u,cpu/event=0xc4/u ./loop 2000 2>&1
sec cycles;  perf stat -x, -e instructions:u,cycles:u,ref-cycles:u,bus-cycles:u ./loop {N_LOOP} 2>&1
sec percpu;  perf stat -x, -a -e instructions,branches sleep 0.2 2>&1
sec cpu0;    perf stat -x, -C 0 -e instructions sleep 0.1 2>&1
sec mux;     perf stat -x, -e {MUX_EVENTS} ./loop {N_MUX} 2>&1
sec muxraw;  perf stat -x, --no-scale -e {MUX_EVENTS} ./loop {N_MUX} 2>&1
sec list;    perf list hw 2>&1
sec end
"""

# arm64 and riscv64: the sections both architectures have (loop, loopk,
# pagesb, pagesb2, dmesg, group), its loop and pages at two N of as many
# digits (the difference is the loop's alone), and perf record's exit
# status; run in the architecture's directory of programs.
ARM64_LOOP_N = (1_000_000, 3_000_000)
ARM64_PAGES_N = 1000
ARM64_STAT = "perf stat -x, -e instructions:u,branches:u"
FOREIGN_SCRIPT = f"""
sec() {{ echo "=== $1"; }}
sec loop;    {ARM64_STAT} ./loop {ARM64_LOOP_N[0]} 2>&1
sec loopk;   {ARM64_STAT} ./loop {ARM64_LOOP_N[1]} 2>&1
sec pagesb;  {ARM64_STAT} ./pages {ARM64_PAGES_N} 2>&1
sec pagesb2; {ARM64_STAT} ./pages {2 * ARM64_PAGES_N} 2>&1
sec dmesg;   dmesg | grep -E 'pvperf|WARNING|Call Trace'
sec group;   perf stat -x, -e '{{instructions:u,instructions:k,instructions}}' ./pages 500 2>&1
sec record;  perf record -o /tmp/p.data -e instructions:u ./loop 1000 2>&1; echo status=$?
sec end
"""


def analytic(per_iteration: int, per_digit: int, fixed: int,
             branches_fixed: int):
    """`program N` -> (instructions, branches) of a freestanding program
    counted by hand (the module docstring): per iteration, per digit of
    N, the rest; one branch per iteration and per digit."""
    def counts(n: int) -> tuple[int, int]:
        d = len(str(n))
        return (per_iteration * n + per_digit * d + fixed,
                n + d + branches_fixed)
    return counts


#: the foreign architectures' analytic (loop, pages) counts
ANALYTIC = {"aarch64": (analytic(2, 8, 23, 6), analytic(4, 8, 31, 5)),
            "riscv64": (analytic(2, 10, 24, 6), analytic(3, 10, 33, 5))}
arm64_loop_counts, arm64_pages_counts = ANALYTIC["aarch64"]


def x86_64_count(program: str, n: int) -> tuple[int, None]:
    """valgrind's Ir on the host (no branch reference: the differences
    below check x86's branches)."""
    return valgrind_irefs([str(PROGRAMS / program), str(n)]), None


# Each architecture's (loop N, loop N', pages N), the instructions per
# extra digit of loop's argument, and its reference (instructions,
# branches or None) of `program N`.
REFERENCES = {
    "x86_64": ((N_LOOP, N_LOOP + K_EXTRA, N_PAGES), 9, x86_64_count),
    **{arch: ((*ARM64_LOOP_N, ARM64_PAGES_N), per_digit,
              lambda program, n, arch=arch: ANALYTIC[arch][
                  program == "pages"](n))
       for arch, per_digit in (("aarch64", 8), ("riscv64", 10))},
}


def assert_reference(got: tuple[int, int], want: tuple[int, int | None]):
    assert got[0] == want[0] and want[1] in (None, got[1]), (got, want)


def counts(lines: list[str]) -> list[tuple[str, int | None, float]]:
    """perf stat -x, lines -> (event, value or None, % running)."""
    rows = []
    for line in lines:
        f = line.split(",")
        if len(f) >= 5 and f[2]:
            value = int(f[0]) if f[0].isdigit() else None
            rows.append((f[2], value, float(f[4] or 0)))
    return rows


@pytest.fixture(scope="module")
def guest(request):
    """The sections of one boot of a support.Guest (its arch's script)."""
    g = request.param
    if g.arch != "x86_64":
        s = run_guest_script(f"cd {g.arch}\n{FOREIGN_SCRIPT}", g.smp, 600,
                             tuple(g.a.image()))
    else:
        s = run_guest_script(SCRIPT, g.smp, timeout=600)
    s["guest"] = g
    return s


@on(*X86, ARM64, RV64)
def test_driver_found_the_host(guest):
    assert any(f"host interface v{abi.ABI_VERSION} found" in l
               for l in guest["dmesg"]), \
        guest["dmesg"]


def ib(lines: list[str]) -> tuple[int, int]:
    """(instructions:u, branches:u) of a perf stat section."""
    (ei, i, _), (eb, b, _) = counts(lines)
    assert (ei, eb) == ("instructions:u", "branches:u"), lines
    return i, b


@on(*X86, ARM64, RV64)
def test_loop_counts_equal_the_reference(guest):
    """loop N and N' (user instructions; arm64 branches too) equal the
    reference: valgrind's Ir (x86_64), the analytic counts (arm64)."""
    (n0, n1, _), _, ref = REFERENCES[guest["guest"].arch]
    assert_reference(ib(guest["loop"]), ref("loop", n0))
    assert_reference(ib(guest["loopk"]), ref("loop", n1))


@on(*X86)
def test_instructions_u_exact_across_page_faults(guest):
    (_, value, _), = counts(guest["pages"])
    assert value == valgrind_irefs([str(PROGRAMS / "pages"), str(N_PAGES)])


@on(*X86)
def test_back_to_back_runs_stay_exact(guest):
    """Runs 2 and 3 start while counting still lingers from run 1 (no
    retranslation); the last starts after the linger ended (a fresh
    switch).  Every one is exact, faults included."""
    ref = valgrind_irefs([str(PROGRAMS / "pages"), str(N_PAGES)])
    values = [v for _, v, _ in counts(guest["repeat"])]
    assert values == [ref] * 4, (values, ref)


@on(*X86, ARM64, RV64)
def test_branches_across_page_faults_are_exact(guest):
    """Each extra page of pages N is one faulting store that re-executes
    and one loop branch (x86's jb, arm64's b.ne) after it: N more pages,
    N more branches, and the reference's instructions (branches: arm64's
    analytic ones), whichever instruction the count of a faulted TB is
    taken back from (count.c's tails)."""
    (_, _, n), _, ref = REFERENCES[guest["guest"].arch]
    (i0, b0), (i1, b1) = ib(guest["pagesb"]), ib(guest["pagesb2"])
    assert b1 - b0 == n
    assert_reference((i0, b0), ref("pages", n))
    assert_reference((i1, b1), ref("pages", 2 * n))


@on(*X86, ARM64, RV64)
def test_branches_grow_by_exactly_the_extra_iterations(guest):
    """loop N' against loop N: one branch per extra iteration (x86's dec;
    jnz, arm64's subs; b.ne), two instructions, and the argument's
    parsing per extra digit."""
    (n0, n1, _), per_digit, _ = REFERENCES[guest["guest"].arch]
    (i0, b0), (i1, b1) = ib(guest["loop"]), ib(guest["loopk"])
    assert b1 - b0 == n1 - n0
    assert i1 - i0 == 2 * (n1 - n0) + per_digit * (len(str(n1))
                                                   - len(str(n0)))


@on(*X86)
def test_more_than_2_to_the_29_branches_stay_exact(guest):
    """Counting instructions and branches, a user chunk adds both to one
    packed word; 6 * 10^8 branches overflow its branch field unless the
    kernel's blocks fold it in time (analytic: two
    instructions and one branch per iteration, 9 instructions and one
    branch per argument digit).  Without the folds: 2^29 fewer."""
    (_, i0, _), (_, b0, _) = counts(guest["loop"])
    (_, i1, _), (_, b1, _) = counts(guest["long"])
    digits = len(str(N_LONG)) - len(str(N_LOOP))
    assert b1 - b0 == N_LONG - N_LOOP + digits
    assert i1 - i0 == 2 * (N_LONG - N_LOOP) + 9 * digits


@on(*X86)
def test_inherit_counts_the_forked_child_too(guest):
    """The parent alone equals valgrind's parent count; the child's share
    (inherited event minus the parent's) grows by exactly 2 per extra loop
    iteration (valgrind's child total includes the pre-fork part, so it is
    no reference for the child alone)."""
    (_, both, _), (_, parent, _), (_, both2, _) = counts(guest["inherit"])
    assert parent == valgrind_irefs([str(PROGRAMS / "forker"), str(N_LOOP)])
    parent2 = parent + 9 * (len(str(N_LOOP + K_EXTRA)) - len(str(N_LOOP)))
    assert (both2 - parent2) - (both - parent) == 2 * K_EXTRA
    assert both - parent > 2 * N_LOOP


@on(*X86)
def test_per_task_count_follows_the_task_across_switches(guest):
    """A competing loop pinned to the same CPU forces context switches
    (waited for until it runs: once, at smp 2, the measured loop ended
    before its competitor had started and saw no switch; once a 3 M
    iteration loop, ~6 ms, ended inside its wake-up credit)."""
    (_, value, _), (_, switches, _) = counts(guest["switch"])
    assert value == valgrind_irefs([str(PROGRAMS / "loop"), str(N_SWITCH)])
    assert switches and switches > 0


@on(*X86, RV64)
def test_group_user_plus_kernel_equals_all(guest):
    (_, u, _), (_, k, _), (_, total, _) = counts(guest["group"])
    assert u and k and u + k == total


@on(*X86)
def test_raw_encodings_and_sysfs_aliases(guest):
    rows = counts(guest["raw"])
    rows2 = counts(guest["raw2"])
    ref = valgrind_irefs([str(PROGRAMS / "loop"), "1000"])
    ref2 = valgrind_irefs([str(PROGRAMS / "loop"), "2000"])
    assert rows[0][1] == ref and rows[1][1] == ref
    assert rows2[0][1] == ref2 and rows2[1][1] == ref2
    assert rows2[2][1] - rows[2][1] == 1000    # r00c4: one per iteration


@on(*X86)
def test_cost_model_clocks(guest):
    (_, insn, _), (_, cyc, _), (_, ref, _), (_, bus, _) = \
        counts(guest["cycles"])
    assert cyc == insn and ref == insn       # 1 cycle/insn, 1 GHz ref
    assert bus == insn // 10                 # 100 MHz bus


@on(*X86)
def test_per_cpu_counting(guest):
    rows = counts(guest["percpu"]) + counts(guest["cpu0"])
    assert [r[0] for r in rows] == ["instructions", "branches",
                                    "instructions"]
    assert all(r[1] and r[1] > 1000 for r in rows), rows


@on(*X86)
def test_multiplexing_when_events_exceed_counters(guest):
    """N_MUX_EVENTS copies of instructions:u over the driver's counters:
    time-shared, and exact where exactness is the driver's: at every user
    instruction exactly `counters` of them count (perf core rotates them
    in the kernel, the driver freezes and thaws them together), so their
    raw counts (--no-scale) sum to counters x valgrind's Ir.  perf's
    scaled estimates (raw x time enabled / time running) are checked only
    to be there: they assume a uniform rate of instructions over time,
    and the guest's clock is the host's under TCG, so a rotation slice in
    which the host preempted the vCPU thread is running time without
    instructions; on a loaded host they were 6 to 12 % off (3 runs at
    smp 2, load ~12) and any bound on them is a bound on the host's
    load."""
    counters = driver_counters_per_cpu()
    exact = valgrind_irefs([str(PROGRAMS / "loop"), str(N_MUX)])
    scaled, raw = counts(guest["mux"]), counts(guest["muxraw"])
    assert len(scaled) == len(raw) == N_MUX_EVENTS, (scaled, raw)
    assert all(r[1] is not None for r in scaled), scaled
    assert any(r[2] < 100.0 for r in raw), raw      # time-shared
    assert all(0 < r[1] < exact for r in raw), (raw, exact)
    assert sum(r[1] for r in raw) == counters * exact, (raw, exact)


@on(*X86)
def test_perf_list_shows_the_pmu_events(guest):
    text = "\n".join(guest["list"])
    for name in ("cpu-cycles", "instructions", "branch-instructions"):
        assert name in text


def test_no_pmu_is_plain_tcg():
    r = run_pvperf(["run", "--no-pmu", "--share", str(PROGRAMS), "--",
                    "perf", "stat", "-x,", "-e", "instructions:u", "./loop",
                    "1000"])
    assert r.returncode == 0, r.stderr
    assert "<not supported>,,instructions:u" in r.stderr


@on(ARM64, RV64)
def test_driver_counts_and_samples(guest):
    """The doorbell device is the overflow interrupt: the driver samples
    (test_sampling.py checks the samples).  x86_64's driver says the
    same, checked by test_sampling.py's boots."""
    assert any("sampling with exact IPs" in l for l in guest["dmesg"]), \
        guest["dmesg"]
    record = guest["record"]
    assert record[-1] == "status=0", record
    assert leftovers() == []


@on(RV64)
def test_driver_loads_clean(guest):
    """The riscv64 driver's load: the doorbell's MSI-X bound as the
    overflow interrupt, no warning.  (An unsigned out-of-tree module
    taints the kernel, which says "module verification failed":
    expected, as on x86_64.)"""
    dmesg = guest["dmesg"]
    assert any("overflow interrupt: doorbell MSI-X" in l for l in dmesg)
    assert not [l for l in dmesg if "module verification" not in l and any(
        bad in l for bad in ("WARNING", "Call Trace", "would not be exact",
                             "failed", "not registering", "not bound"))]


# -- arm64: a second opinion, QEMU's own PMUv3 ------------------------------

@pytest.fixture(scope="module")
def pmuv3():
    """{N: instructions:u} of arm64's loop N under QEMU's own PMUv3 with
    icount (not pvperf's PMU; QEMU counts no branches:u there).  The
    aarch64 image's; x86_64 has no such second PMU to ask."""
    programs = ARM64.a.build()
    ARM64.a.image()
    stat = "perf stat -x, -e instructions:u"
    r = run_qemu_pmuv3(programs, "; ".join(
        f"echo @{n}; {stat} ./loop {n} 2>&1" for n in ARM64_LOOP_N))
    assert r.returncode == 0, (r.stdout, r.stderr[-2000:])
    got, key = {}, None
    for line in r.stdout.splitlines():
        if line.startswith("@"):
            key = int(line[1:])
        elif ",instructions:u," in line:
            got[key] = int(line.split(",")[0])
    return got


@on(ARM64)
@pytest.mark.parametrize("n", ARM64_LOOP_N)
def test_qemu_pmuv3_counts_the_same(guest, pmuv3, n):
    """QEMU's PMUv3 (INST_RETIRED, -icount shift=0) counts loop N as the
    analytic count, and so as pvperf does."""
    section = guest["loop" if n == ARM64_LOOP_N[0] else "loopk"]
    assert pmuv3[n] == arm64_loop_counts(n)[0] == ib(section)[0]
