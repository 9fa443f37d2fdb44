"""A sampled task that moves between vCPUs: where each sample lands.

``loop N`` (tests/guest_programs/loop.c) runs ``dec %rdx; jnz`` (arm64:
``subs x1; b.ne``, aarch64/loop.c) with the register the iterations
left, so the user registers of any moment name how many loop
instructions have run: 2(N - left) before the decrement, one less before
the branch.  Both guest architectures, smp 2, one boot each.  Samples carry the registers as they were just before their
instruction (--user-regs, test_sample_regs.py), so each sample's exact
position in the run is known, not only its address.  A shell moves the
task between the two vCPUs every 5 ms (taskset -p, as in
test_sample_rate.py), 8 times, then stops and kills it.

* ``--per-thread``: one event follows the task; DISABLE on the old vCPU
  keeps the distance left, ENABLE on the new one counts it down (as
  hardware's pmu->stop(PERF_EF_UPDATE) / start(PERF_EF_RELOAD) carry
  hwc->period_left).  So every sample is exactly P instructions after
  the one before, whatever the moves.
* ``perf record CMD`` without it opens one event per CPU for the task,
  each with its own period left (on hardware too): after a move the next
  sample comes when the new CPU's event reaches its period, so seen as
  one sequence the samples jump off the period (the symptom reported on
  2026-11-27: up to a period late or early right after a move; the total
  stays floor(a/P) + floor(b/P)).  The reference here is where each
  per-CPU event must overflow: a context-switches event sampled at every
  switch-out, with the user registers there (rdx and ip), gives the
  exact position at which each stint on a CPU ended; each instruction
  sample of CPU c must then be the k*P-th instruction the task ran on c,
  for k = 1, 2, 3 ... in order.
"""
from __future__ import annotations

import re
import subprocess

import pytest

from parallel import make
from support import PROGRAMS, aarch64_image, run_guest_script

pytestmark = pytest.mark.vm

N = 2_000_000_000           # never reached: the mover kills the task
P = 10_007                  # odd prime: samples on both instructions
MOVES = 8                   # moves before the task is killed
MOVE_US = 5000              # virtual time between two moves

# Moves the task to the other vCPU every MOVE_US until it has moved
# MOVES times, then stops it (in the loop: that switch-out tells where
# it stopped; an exiting task's last switch is no longer sampled) and
# kills it: the number of moves does not depend on how
# fast the host runs the guest.
_HOP = f"""
hop() {{
  p=; while [ -z "$p" ]; do p=$(pidof loop); done
  moves=0
  while [ $moves -lt {MOVES} ] && kill -0 $p 2>/dev/null; do
    usleep {MOVE_US}
    taskset -p $((2 >> (moves % 2))) $p > /dev/null 2>&1 && moves=$((moves + 1))
  done
  kill -STOP $p; usleep {MOVE_US}; kill -KILL $p
  echo "moves $moves"
}}
"""
REC = ("perf record -q -m 2048 --sample-cpu --user-regs={regs} "
       f"-e 'instructions/period={P}/u' -e 'context-switches/period=1/'")
SCRIPT = f"""
sec() {{{{ echo "=== $1"; }}}}
D=/tmp/mig; mkdir -p $D
{_HOP.replace("{", "{{").replace("}", "}}")}
for mode in perthread percpu; do
  sec $mode
  o=; [ $mode = perthread ] && o=--per-thread
  taskset -c 0 {REC} $o -o $D/$mode.data ./loop {N} > /dev/null 2>&1 &
  hop
  wait
  perf script -i $D/$mode.data -F event,cpu,ip,uregs 2>&1
done
sec end
"""


def loop_x86_64() -> tuple[str, int, int]:
    """The loop's counter register and the addresses of its dec and jnz
    (objdump)."""
    out = subprocess.run(["objdump", "-d", str(PROGRAMS / "loop")],
                         capture_output=True, text=True, check=True).stdout
    m = re.search(r"^\s*([0-9a-f]+):[^\n]*\tdec\s+%rdx\n"
                  r"\s*([0-9a-f]+):[^\n]*\tjne\s", out, re.M)
    assert m, out
    return "dx", int(m.group(1), 16), int(m.group(2), 16)


def loop_aarch64() -> tuple[str, int, int]:
    """The same for arm64: subs and b.ne, the loop after `cbz` (the other
    one is main_sp's for the default N)."""
    out = subprocess.run(["aarch64-linux-gnu-objdump", "-d",
                          str(PROGRAMS / "aarch64" / "loop")],
                         capture_output=True, text=True, check=True).stdout
    m = re.search(r"\scbz\s.*\n"
                  r"\s*([0-9a-f]+):\s+\S+\s+subs\s+(x\d+), \2, #0x1\n"
                  r"\s*([0-9a-f]+):\s+\S+\s+b\.ne\s+\1 ", out)
    assert m, "loop's subs/b.ne not found"
    return m.group(2), int(m.group(1), 16), int(m.group(3), 16)


# arch: (the loop, perf's name of the pc register, `pvperf run` options)
ARCHES = {"x86_64": (loop_x86_64, "ip", lambda: ()),
          "aarch64": (loop_aarch64, "pc", aarch64_image)}


def rows(lines: list[str], arch: str) -> list[tuple[int, str, int | None]]:
    """(cpu, "insn" or "switch", loop instructions run before the
    sampled or interrupted user instruction; None outside the loop)."""
    loop, pc, _ = ARCHES[arch]
    reg, dec, branch = loop()
    row = re.compile(r"\s*\[(\d+)\]\s+(\S+):\s+[0-9a-f]+\s+ABI:\d+\s+"
                     rf"{reg}:0x([0-9a-f]+)\s+{pc}:0x([0-9a-f]+)", re.I)
    out = []
    for line in lines:
        m = row.match(line)
        if not m:
            continue
        cpu, left, uip = int(m.group(1)), int(m.group(3), 16), int(m.group(4), 16)
        kind = "switch" if "context-switches" in m.group(2) else "insn"
        done = None
        if uip == dec:
            done = 2 * (N - left)
        elif uip == branch:
            done = 2 * (N - left) - 1
        out.append((cpu, kind, done))
    return out


def stints(rs) -> list[tuple[int, int, int]]:
    """(cpu, first, end): the loop instructions [first, end) the task ran
    on each CPU, from the switch-out samples (the last one: where it was
    killed); switches before the loop end nothing."""
    out, start = [], 0
    for cpu, kind, done in rs:
        if kind == "switch" and done is not None and done > start:
            out.append((cpu, start, done))
            start = done
    return out


def off_period(rs, per_cpu: bool) -> tuple[list, dict, dict]:
    """Samples not where their event must overflow, with the instructions
    each event counted and the samples it gave.  An event (one per CPU,
    or the one that follows the task) overflows at every P-th instruction
    it counts; the user instructions before the loop ran on CPU 0, and
    how many the first sample tells."""
    runs = stints(rs)
    samples = [(c, d) for c, k, d in rs if k == "insn"]
    assert samples and all(d is not None for _, d in samples), samples[:5]
    assert samples[0][0] == 0, samples[0]
    counted = {0: P - 1 - samples[0][1], 1: 0}
    seen = {0: 0, 1: 0}
    bad, i = [], 0
    for cpu, first, end in runs:
        ev = cpu if per_cpu else 0
        while i < len(samples) and samples[i][1] < end:
            c, d = samples[i]
            i += 1
            seen[ev] += 1
            late = counted[ev] + (d - first) + 1 - seen[ev] * P
            if c != cpu or d < first or late:
                bad.append((i, c, cpu, late))
        counted[ev] += end - first
    assert i == len(samples), ("samples past the last switch-out",
                               samples[i:i + 3], runs[-3:])
    return bad, counted, seen


@pytest.fixture(scope="module", params=list(ARCHES))
def guest(request):
    arch = request.param
    loop, pc, options = ARCHES[arch]
    if arch == "aarch64":
        make(PROGRAMS, "-s", "aarch64",
                       check=True)
    script = SCRIPT.format(regs=f"{loop()[0]},{pc}")
    if arch == "aarch64":
        script = "cd aarch64\n" + script
    s = run_guest_script(script, smp=2, timeout=600, options=tuple(options()))
    s["arch"] = arch
    return s


@pytest.mark.parametrize("mode", ["perthread", "percpu"])
def test_each_sample_where_its_event_overflows(guest, mode):
    lines = guest[mode]
    rs = rows(lines, guest["arch"])
    moved = {c for c, _, _ in stints(rs)}
    assert moved == {0, 1}, ("the task never moved", lines[:5])
    bad, counted, seen = off_period(rs, per_cpu=mode == "percpu")
    assert not bad, f"{len(bad)} samples off their event's period " \
        f"(index, sample cpu, stint cpu, instructions late): {bad[:10]}"
    for ev in seen:
        assert seen[ev] == counted[ev] // P, (ev, seen, counted)
