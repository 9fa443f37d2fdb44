"""Sampling in an arm64 guest: exact IPs, registers, callchains.

One boot, at smp 2, of the aarch64 image with valgrind added (the image
of test_aarch64_valgrind.py), where the stock arm64 perf records the
cross-compiled programs (tests/guest_programs/aarch64/) and valgrind's
callgrind runs the same binaries in the same guest.  References:

* ``loop N`` (analytic: 2N + 8d + 23 user instructions, the loop
  ``subs; b.ne``): `-c P` gives total // P samples, all on the loop's two
  instructions; the k-th sample is the (kP)th instruction, so for an odd
  P consecutive samples alternate between the two, for an even P all are
  the same one.  At smp 2, two loops pinned one to each vCPU at once,
  likewise.
* ``regs N`` (analytic, aarch64/regs.c): the registers of each sample
  (-I and --user-regs) as they were just before its instruction: x12 by
  the instruction, x13-x28 their constants, x0 the iterations left (it
  falls by P/8 between samples), sp, lr and x29 constant, pc the ip.
  Pinned to one vCPU each: `perf record CMD` opens one event per CPU,
  each with its own period left (on hardware too), so after a move the
  next sample comes at the new CPU's event's period (seen 2026-11-27:
  51,344 instructions late once in six unpinned runs, 74,251 early once;
  test_sample_migration.py checks both kinds of event across moves).
* ``calltree`` (-O2, libc): perf report's self shares and the callchain
  inclusive shares of -g (frame records in every function:
  ``calltree-fp``) and --call-graph dwarf (unwind tables only) within 2
  points of callgrind's, run in the guest on the same binary (the
  callgrind output file comes back through the share and is read here).
* two ``qs`` sharing libc, one per vCPU: at most 1 % of the samples
  ``[unknown]``.
* Without the doorbell device (unbound, the driver reloaded) the driver
  refuses sampling events and says why.

Deterministic runs (``--deterministic``, smp 1, the doorbell under
icount with the plugin's wait for QEMU's main loop): two runs record the
same samples, kernel ones included.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from support import NO_THROTTLE, PROGRAMS, aarch64_image, leftovers, \
    run_guest_script, run_pvperf
from test_callgraph import chain_shares

pytestmark = pytest.mark.vm

A64 = PROGRAMS / "aarch64"
N_LOOP = 1_000_000
ODD, EVEN = 99_991, 100_000
PAIR = (2_000_000, 3_000_000)
N_REGS = 2_000_000           # 16 M instructions
P_REGS = 100_003             # prime: every instruction of the loop
N_TREE = 30_000              # ~26 M user instructions
P_TREE = 6_007               # ~4,300 samples
N_QS = 100_000               # 39 M instructions each
P_QS = 10_007
FUNCTIONS = ("main", "work_a", "work_b", "work_c")
TOLERANCE = 2.0              # percentage points (issue 24)
UREGS = "x0,x12,x13,x18,x19,x28,x29,lr,sp,pc"
CG = ("valgrind --tool=callgrind --vex-guest-chase=no "
      "--callgrind-out-file=.cg-{0}.out ./{0} {1} >/dev/null 2>&1")


def loop_count(n: int) -> int:
    """tests/vm/test_aarch64_counting.py: 2N + 8d + 23."""
    return 2 * n + 8 * len(str(n)) + 23


def guest_script() -> str:
    rec = "perf record -q -e instructions:u"
    return f"""
cd aarch64
sec() {{ echo "=== $1"; }}
D=/tmp/r; mkdir -p $D
# P_TREE at TCG's arm64 speed is above perf's 100,000 samples/s: the
# kernel throttled the self run 3 times a run, each dropping the rest of
# a tick's samples, and moved work_c's share by 2 points (CI, 2026-11-28;
# unthrottled: within 0.03 of callgrind).  Raise the cap, then switch
# off its dynamic lowering (the rate is read-only once the percent is 0).
{NO_THROTTLE}
sec odd
taskset -c 0 {rec} -c {ODD} -o $D/o.data ./loop {N_LOOP} 2>&1
perf script -i $D/o.data -F ip 2>&1
sec even
taskset -c 1 {rec} -c {EVEN} -o $D/e.data ./loop {N_LOOP} 2>&1
perf script -i $D/e.data -F ip 2>&1
sec smp
taskset -c 0 {rec} --sample-cpu -c {ODD} -o $D/a.data ./loop {PAIR[0]} 2>&1 &
taskset -c 1 {rec} --sample-cpu -c {ODD} -o $D/b.data ./loop {PAIR[1]} 2>&1
wait
perf script -i $D/a.data -F ip,cpu 2>&1
echo ---
perf script -i $D/b.data -F ip,cpu 2>&1
sec iregs
taskset -c 0 perf record -q -I -e instructions:u -c {P_REGS} -o $D/i.data ./regs {N_REGS} 2>&1
perf script -i $D/i.data -F ip,iregs 2>&1
sec uregs
taskset -c 1 perf record -q --user-regs={UREGS} -e instructions:u -c {P_REGS} -o $D/u.data ./regs {N_REGS} 2>&1
perf script -i $D/u.data -F ip,uregs 2>&1
sec self
{rec} -c {P_TREE} -o $D/s.data ./calltree {N_TREE} 2>&1 >/dev/null
perf report -i $D/s.data --stdio --no-children --sort sym 2>&1 | grep -E "work_|main"
sec fp
perf record -q -g -e instructions:u -c {P_TREE} -o $D/fp.data ./calltree-fp {N_TREE} 2>&1 >/dev/null
perf script -i $D/fp.data -F ip,sym 2>/dev/null
sec dwarf
perf record -q -m 4M --call-graph dwarf,2048 -e instructions:u -c {P_TREE} -o $D/dw.data ./calltree {N_TREE} 2>&1 >/dev/null
perf script -i $D/dw.data -F ip,sym 2>/dev/null
sec shared
{rec} -c {P_QS} -o $D/q.data -- sh -c 'taskset -c 0 ./qs {N_QS} & taskset -c 1 ./qs {N_QS}; wait' >/dev/null 2>&1
perf script -i $D/q.data -F pid,ip,sym,dso 2>/dev/null
sec callgrind
{CG.format("calltree", N_TREE)}; echo "calltree $?"
{CG.format("calltree-fp", N_TREE)}; echo "calltree-fp $?"
sec refuse
rmmod pvperf
for d in /sys/bus/pci/devices/*; do
    [ "$(cat $d/vendor):$(cat $d/device)" = 0x1af4:0x1110 ] && echo 1 > $d/remove
done
insmod /lib/modules/pvperf/pvperf.ko
dmesg | grep 'pvperf' | tail -3
{rec} -o $D/x.data ./loop 1000 2>&1; echo "status=$?"
sec end
"""


@pytest.fixture(scope="module")
def measured():
    image = aarch64_image("test-aarch64-valgrind", "valgrind")
    subprocess.run(["make", "-s", "-C", str(PROGRAMS), "aarch64"],
                   check=True)
    try:
        yield run_guest_script(guest_script(), 2, 1200, tuple(image))
    finally:
        for f in A64.glob(".cg-*.out"):
            f.unlink()


def symbols(binary: Path) -> dict[str, int]:
    out = subprocess.run(["aarch64-linux-gnu-nm", str(binary)],
                         capture_output=True, text=True, check=True).stdout
    return {f[2]: int(f[0], 16) for f in (l.split() for l in out.splitlines())
            if len(f) == 3}


def loop_insns() -> tuple[int, int]:
    """The addresses of loop's `subs` and `b.ne 1b` (objdump): the loop
    after `cbz` (the other one is main_sp's for the default N)."""
    out = subprocess.run(["aarch64-linux-gnu-objdump", "-d", str(A64 / "loop")],
                         capture_output=True, text=True, check=True).stdout
    m = re.search(r"\scbz\s.*\n"
                  r"\s*([0-9a-f]+):\s+\S+\s+subs\s+(x\d+), \2, #0x1\n"
                  r"\s*([0-9a-f]+):\s+\S+\s+b\.ne\s+\1 ", out)
    assert m, "loop's subs/b.ne not found"
    return int(m.group(1), 16), int(m.group(3), 16)


def ips(lines: list[str]) -> list[int]:
    return [int(l.split()[0], 16) for l in lines
            if re.match(r"^\s*[0-9a-f]+\s*$", l)]


def check_loop(got: list[int], n: int, period: int) -> None:
    subs, bne = loop_insns()
    assert len(got) == loop_count(n) // period, got[:5]
    assert set(got) <= {subs, bne}, sorted(set(got))
    same = period % 2 == 0
    assert all((a == b) == same for a, b in zip(got, got[1:])), got[:10]


@pytest.mark.parametrize("section,period", [("odd", ODD), ("even", EVEN)])
def test_sample_ips_exact(measured, section, period):
    check_loop(ips(measured[section]), N_LOOP, period)


def test_smp2_each_vcpu_exact(measured):
    lines = measured["smp"]
    cut = lines.index("---")
    runs = (lines[:cut], lines[cut + 1:])
    for n, cpu, run in zip(PAIR, (0, 1), runs):
        got = [int(m.group(2), 16) for m in
               (re.match(r"^\s*\[(\d+)\]\s+([0-9a-f]+)\s*$", l) for l in run)
               if m and int(m.group(1)) == cpu]
        check_loop(got, n, ODD)


def parse_regs(lines: list[str]) -> list[tuple[int, dict[str, int]]]:
    """perf script -F ip,{i,u}regs: the ip, then REG:VALUE pairs (on the
    ip's line and any that follow it)."""
    out = []
    for line in lines:
        m = re.match(r"^\s*([0-9a-f]+)(\s+ABI:.*|\s*)$", line)
        if m:
            out.append((int(m.group(1), 16), {}))
        if out:
            for name, value in re.findall(r"\b(\w+):(0x[0-9a-f]+)", line):
                out[-1][1][name] = int(value, 16)
    return out


@pytest.mark.parametrize("section", ["iregs", "uregs"])
def test_registers_of_the_sampled_instruction(measured, section):
    sym = symbols(A64 / "regs")
    loop, end = sym["regs_loop"], sym["regs_end"]
    samples = [(ip, r) for ip, r in parse_regs(measured[section])
               if loop <= ip < end]
    assert len(samples) >= 0.9 * 8 * N_REGS // P_REGS, measured[section][:20]
    for ip, r in samples:
        k = (ip - loop) // 4 + 1            # mov x12, #k; 7 subs, 8 b.ne
        want = k - 1 if 2 <= k <= 6 else 6
        assert r["x12"] == want or (k == 1 and r["x12"] == 0), (hex(ip), r)
        for i in range(13, 29):
            if f"x{i}" in r:
                assert r[f"x{i}"] == 0x100 + i, (hex(ip), r)
        assert r["pc"] == ip
        assert r["lr"] == sym["_start"] + 8     # bl main_sp's return
    for name in ("sp", "x29"):
        assert len({r[name] for _, r in samples}) == 1, name
    left = [r["x0"] for _, r in samples]
    steps = {a - b for a, b in zip(left, left[1:])}
    assert steps <= {P_REGS // 8, P_REGS // 8 + 1}, steps
    if section == "iregs":
        assert all(len(r) >= 33 for _, r in samples)    # x0-x30 sp pc


def callgrind_shares(path: Path) -> tuple[dict[str, float], dict[str, float]]:
    """Self and inclusive shares (percent of the program's total Ir) of
    each function, from a callgrind output file (its format: fn= blocks of
    "position cost" lines; a calls= line makes the next one a call's
    inclusive cost; names compressed as "(id) name", then "(id)")."""
    names: dict[str, str] = {}
    own: dict[str, int] = {}
    called: dict[str, int] = {}
    fn, call, total = None, False, 0
    for line in path.read_text().splitlines():
        m = re.match(r"^(c?fn)=(\(\d+\))?\s*(.*)$", line)
        if m:
            ref, name = m.group(2), m.group(3)
            if ref and name:
                names[ref] = name
            name = names.get(ref, name) if ref else name
            if m.group(1) == "fn":
                fn = name
            continue
        if line.startswith("calls="):
            call = True
        elif line.startswith(("summary:", "totals:")):
            total = int(line.split()[1])
        elif fn and re.match(r"^[+-]?\d+ \d+|^\* \d+", line):
            cost = int(line.split()[1])
            table = called if call else own
            table[fn] = table.get(fn, 0) + cost
            call = False
    assert total, path
    pct = lambda d: {f: 100.0 * d.get(f, 0) / total for f in FUNCTIONS}
    return pct(own), pct({f: own.get(f, 0) + called.get(f, 0)
                          for f in FUNCTIONS})


def compare(got: dict[str, float], want: dict[str, float], what: str) -> None:
    table = "\n".join(f"{f:8} perf {got[f]:6.2f}  callgrind {want[f]:6.2f}"
                      for f in FUNCTIONS)
    print(f"\n{what}\n{table}")
    off = [f for f in FUNCTIONS if abs(got[f] - want[f]) > TOLERANCE]
    assert not off, table


def test_report_self_shares_match_callgrind(measured):
    assert "calltree 0" in measured["callgrind"], measured["callgrind"]
    want, _ = callgrind_shares(A64 / ".cg-calltree.out")
    got = {f: 0.0 for f in FUNCTIONS}
    for line in measured["self"]:
        m = re.match(r"^\s*([\d.]+)%.*\] (\w+)\s*$", line)
        if m and m.group(2) in got:
            got[m.group(2)] = float(m.group(1))
    compare(got, want, "perf report self shares")


@pytest.mark.parametrize("section,binary", [("fp", "calltree-fp"),
                                            ("dwarf", "calltree")])
def test_callchain_shares_match_callgrind(measured, section, binary):
    assert f"{binary} 0" in measured["callgrind"], measured["callgrind"]
    _, want = callgrind_shares(A64 / f".cg-{binary}.out")
    got, samples = chain_shares(measured[section])
    assert samples >= 3000, measured[section][:40]
    compare(got, want, f"{section}: {samples} samples, inclusive")


def test_two_processes_sharing_libc_resolve(measured):
    rows = [l for l in measured["shared"] if l.strip()]
    pids = {l.split()[0] for l in rows}
    unknown = sum("[unknown]" in l for l in rows)
    libc = sum("libc.so" in l for l in rows)
    print(f"\n{len(rows)} samples, {len(pids)} pids, {libc} in libc, "
          f"{unknown} unknown")
    assert len(rows) >= 0.9 * 2 * 39_000_000 // P_QS
    assert libc > 0.2 * len(rows)
    assert unknown <= 0.01 * len(rows), [l for l in rows if "[unknown]" in l][:10]


def test_no_doorbell_refuses_sampling(measured):
    lines = measured["refuse"]
    assert any("sampling events are refused" in l for l in lines), lines
    assert lines[-1] != "status=0", lines
    assert leftovers() == []


def deterministic_samples(share: Path, image: list[str]) -> str:
    script = (f"perf record -q -e instructions -c {P_REGS} -o /tmp/d.data "
              f"./loop {N_LOOP} && perf script -i /tmp/d.data -F ip,sym")
    r = run_pvperf(["run", *image, "--deterministic", "--share", str(share),
                    "--", "sh", "-c", script], timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def test_deterministic_sampling_repeats(tmp_path):
    """Every sample, kernel ones included, at the same instruction in two
    deterministic runs (the doorbell is raised at a point that does not
    depend on host time)."""
    image = aarch64_image()
    (tmp_path / "loop").write_bytes((A64 / "loop").read_bytes())
    (tmp_path / "loop").chmod(0o755)
    first = deterministic_samples(tmp_path, image)
    second = deterministic_samples(tmp_path, image)
    n = len(first.splitlines())
    assert n >= loop_count(N_LOOP) // P_REGS, first
    assert first == second
    assert leftovers() == []
