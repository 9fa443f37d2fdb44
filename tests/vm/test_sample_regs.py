"""Registers at the overflowing instruction.

Samples of events that ask for registers (-I, --user-regs, -g,
--call-graph dwarf) carry the general-purpose registers as they were just
before the sampled instruction ran, captured by the TCG plugin, not those
of wherever the NMI landed.  References are analytic or independent of
pvperf:

* ``regs``: a loop where six consecutive instructions set r12 to 1..6;
  the instruction addresses come from ``nm``/``objdump`` of the binary,
  and r12 at each one follows from the code (k - 1 before ``mov $k``).
* ``fpcalls`` with frame-pointer callchains (-g), whose registers come
  from capture points placed only after the instructions that write sp or
  bp: which caller the frame walk names follows from where the sampled
  instruction lies in its function (fpcalls.c, the prologue and epilogue
  from objdump).
* ``calls`` sampled on a model event (L1-dcache-loads: its loads are the
  two ``ret``s), DWARF unwinding: the registers come from the plugin's
  memory callback of the sampled ret (rsp not yet popped), so each sample
  unwinds to main_sp like the instruction samples below.
* ``hotcold-dw`` and ``calls`` (no frame pointers) with DWARF unwinding:
  their call graphs are main_sp -> hot / cold -> tick and main_sp -> step
  -> leaf (the sources; callgrind finds no other caller), so every sample
  in those functions must unwind to main_sp.  In ``calls`` most samples
  fall in a block that ends in a call, where an NMI lands one frame
  deeper: registers from there break the unwind (checked: every such
  sample lost main_sp).
"""
from __future__ import annotations

import re
import subprocess

import pytest

from support import PROGRAMS, run_guest_script

pytestmark = pytest.mark.vm

N_REGS = 5000000            # 40 M instructions
PERIOD = 100003             # prime: lands on every instruction of the loop
N_HOTCOLD = 2000
N_CALLS = 3000000           # 39 M instructions
N_FPCALLS = 2000000         # 48 M instructions
MODEL_PERIOD = 10007        # calls: 2 loads (the rets) a step, ~600 samples
# -m 4M: a DWARF sample carries 8 KiB of stack; perf's default 512 KiB ring
# fills in 64 samples, and at smp 2 perf record fell behind (lost chunks).

SCRIPT = f"""
sec() {{ echo "=== $1"; }}
D=/tmp/r; mkdir -p $D
sec intr
perf record -q -I -e instructions:u -c {PERIOD} -o $D/i.data ./regs {N_REGS} 2>&1
perf script -i $D/i.data -F ip,iregs 2>&1
sec user
perf record -q --user-regs=r12,sp -e instructions:u -c {PERIOD} -o $D/u.data ./regs {N_REGS} 2>&1
perf script -i $D/u.data -F ip,uregs 2>&1
sec dwarf
perf record -q -m 4M --call-graph dwarf -e instructions:u -c {PERIOD} -o $D/d.data ./hotcold-dw {N_HOTCOLD} 2>&1
perf script -i $D/d.data -F ip,sym 2>/dev/null
sec calls
perf record -q -m 4M --call-graph dwarf -e instructions:u -c {PERIOD} -o $D/c.data ./calls {N_CALLS} 2>&1
perf script -i $D/c.data -F ip,sym 2>/dev/null
sec mcalls
perf record -q -m 4M --call-graph dwarf -e L1-dcache-loads:u -c {MODEL_PERIOD} -o $D/m.data ./calls {N_CALLS} 2>&1
perf script -i $D/m.data -F ip,sym 2>/dev/null
sec fp
perf record -q -g -e instructions:u -c {PERIOD} -o $D/f.data ./fpcalls {N_FPCALLS} 2>&1
perf script -i $D/f.data -F ip,sym,symoff 2>/dev/null
sec end
"""


def loop_r12() -> dict[int, set[int]]:
    """r12 just before each instruction of regs_loop, from its code."""
    nm = subprocess.run(["nm", str(PROGRAMS / "regs")], capture_output=True,
                        text=True, check=True).stdout
    sym = {f[2]: int(f[0], 16) for f in (l.split() for l in nm.splitlines())
           if len(f) == 3}
    dis = subprocess.run(
        ["objdump", "-d", "--start-address", hex(sym["regs_loop"]),
         "--stop-address", hex(sym["regs_end"]), str(PROGRAMS / "regs")],
        capture_output=True, text=True, check=True).stdout
    want, r12 = {}, {0, 6}        # first iteration: 0; later ones: 6
    for m in re.finditer(r"^\s*([0-9a-f]+):\s.*?\t(\S+)\s*(\S*)", dis, re.M):
        ip, op, args = int(m.group(1), 16), m.group(2), m.group(3)
        want[ip] = set(r12)
        k = re.fullmatch(r"\$0x([0-9a-f]+),%r12", args)
        if op == "mov" and k:
            r12 = {int(k.group(1), 16)}
    assert len(want) == 8, dis
    return want


# smp 1 with PVPERF_SLOW=1 only: smp 2 runs the same script and checks
# (x86_64 sampling at smp 1 stays in test_callgraph, test_sample_rate and
# test_multiprocess)
@pytest.fixture(scope="module", ids=["smp1", "smp2"],
                params=[pytest.param(1, marks=pytest.mark.slow), 2])
def guest(request):
    return run_guest_script(SCRIPT, request.param, timeout=600)


def samples_with(lines: list[str], reg: str) -> list[tuple[int, int]]:
    """(ip, value of reg) of each perf script line."""
    out = []
    for line in lines:
        ip = re.match(r"\s*([0-9a-f]+)\s", line)
        val = re.search(rf"\b{reg}:0x([0-9a-f]+)", line, re.I)
        if ip and val:
            out.append((int(ip.group(1), 16), int(val.group(1), 16)))
    return out


@pytest.mark.parametrize("section", ["intr", "user"])
def test_r12_is_that_of_the_sampled_instruction(guest, section):
    """Every sample in the loop shows r12 as the code sets it just before
    the sampled instruction; the samples cover all eight instructions (a
    landing-point register set would show 6 nearly everywhere)."""
    want = loop_r12()
    got = samples_with(guest[section], "r12")
    inside = [(ip, v) for ip, v in got if ip in want]
    assert len(inside) >= 350 and len(inside) >= 0.95 * len(got), \
        (len(inside), len(got), guest[section][:20])
    wrong = [(hex(ip), v) for ip, v in inside if v not in want[ip]]
    assert wrong == [], wrong[:20]
    assert {ip for ip, _ in inside} == set(want)


def test_user_stack_pointer_is_the_loops(guest):
    """The loop pushes nothing: sp is one value in every sample."""
    sps = {v for _, v in samples_with(guest["user"], "sp")}
    assert len(sps) == 1, sps


@pytest.mark.parametrize("section,functions", [
    ("dwarf", "hot|cold|tick"), ("calls", "step|leaf"),
    ("mcalls", "step|leaf")])
def test_dwarf_callchains_reach_main(guest, section, functions):
    """--call-graph dwarf unwinds from the sampled instruction's registers
    and the user stack: every sample in the program's functions has
    main_sp as a caller (the only one), prologues and epilogues too."""
    text = "\n".join(guest[section])
    blocks = [b for b in re.split(r"\n\s*\n", text) if b.strip()]
    leaf = re.compile(rf"^\s*[0-9a-f]+ ({functions})\b")
    ours = [b for b in blocks if leaf.match(b.strip().splitlines()[0])]
    assert len(ours) >= 100, text[:2000]
    broken = [b for b in ours if not re.search(r"\bmain_sp\b", b)]
    assert broken == [], (len(broken), len(ours), broken[:3])


def fp_callers() -> dict[tuple[str, int], str]:
    """The caller the frame walk must name for each instruction (function,
    offset) of fpcalls' leaf and step: the real caller while rbp is the
    function's own frame (after the push and the mov, up to the pop), the
    caller's caller at the push, the mov and the ret (fpcalls.c)."""
    dis = subprocess.run(["objdump", "-d", str(PROGRAMS / "fpcalls")],
                         capture_output=True, text=True, check=True).stdout
    callers = {"leaf": ("step", "main_sp"), "step": ("main_sp", "_start")}
    want = {}
    for fn, (inner, outer) in callers.items():
        body = dis.split(f"<{fn}>:\n", 1)[1].split("\tret", 1)[0]
        ips = [int(m.group(1), 16) for m in
               re.finditer(r"^\s*([0-9a-f]+):", body, re.M)]  # ret's too
        assert len(ips) >= 6, body
        for i, ip in enumerate(ips):
            own_frame = 2 <= i < len(ips) - 1
            want[(fn, ip - ips[0])] = inner if own_frame else outer
    return want


def test_frame_pointer_callchains_follow_the_sampled_rbp(guest):
    """perf record -g: every sample in leaf() and step() names the caller
    that rbp at the sampled instruction leads to, and the samples cover
    every instruction of both functions (registers from where an NMI
    landed, or from the block's start, name the wrong one around the
    prologues)."""
    want = fp_callers()
    text = "\n".join(guest["fp"])
    blocks = [b.strip().splitlines() for b in re.split(r"\n\s*\n", text)
              if b.strip()]
    frame = re.compile(r"\s*[0-9a-f]+ ([\w.]+)(?:\+0x([0-9a-f]+))?")
    got = []
    for lines in blocks:
        frames = [m.groups() for m in map(frame.match, lines) if m]
        if len(frames) < 2:
            continue
        key = (frames[0][0], int(frames[0][1] or "0", 16))
        if key in want:
            got.append((key, frames[1][0]))
    assert len(got) >= 300, text[:2000]
    wrong = [(k, caller) for k, caller in got if caller != want[k]]
    assert wrong == [], (len(wrong), len(got), wrong[:10])
    assert {k for k, _ in got} == set(want)
