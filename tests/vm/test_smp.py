"""More vCPUs than host cores: every task counted exactly, no sample lost.

QEMU runs each vCPU on a thread of its own (MTTCG), so a guest with 4 or
16 vCPUs on a 2-core host has its vCPU threads, QEMU's main loop (which
raises the overflow interrupts) and the service's threads take turns on
the host's cores.  A vCPU may then wait for the service's answer to a
hypercall, or run while the main loop that would raise its interrupt
does not; nothing of that may show in the counts or the samples.

One boot per vCPU count (4 in the default suite; 16 with PVPERF_SLOW=1)
runs, in the guest:

  stat    2 x smp freestanding programs at once, unpinned (loop and
          pages alternately, each with its own argument), each under a
          `perf stat -e instructions:u` of its own: each count equals
          valgrind's Ir for that program and argument on the host.
  record  `perf record -a` (one event per vCPU, a sample every P user
          instructions) while smp loops run, each pinned to a vCPU of
          its own: the samples in each loop's code number its Ir / P
          (one more or fewer: the per-CPU event's phase when the loop
          starts), all on its own vCPU, and `perf report --stats` shows
          no LOST or LOST_SAMPLES record.  The samples are told by their
          code (dso), not by their task's name: a sample of taskset's
          own code, written before it exec'd the loop and delivered at
          the next interrupt, after the exec, bears the new name (seen:
          3,999 "loop" samples for Ir / P = 3,997.4).

The references are valgrind's Ir at the smallest, middle and largest
argument of each program (same number of digits): the counts of a
freestanding program are affine in its argument (tests/guest_programs/
loop.c, pages.c), which the middle one checks, and the rest follow.
"""
from __future__ import annotations

import re

import pytest

from support import PROGRAMS, run_guest_script, valgrind_irefs

pytestmark = pytest.mark.vm

PERIOD = 10007
LOOP0, LOOP_STEP = 5_000_000, 1000       # stat's loops: ~10^7 insns
PAGES0, PAGES_STEP = 2000, 10
REC0, REC_STEP = 5_000_000, 1000         # record's loops: ~1,000 samples

SCRIPT = f"""
sec() {{ echo "=== $1"; }}
S=$(nproc); D=/tmp/s; mkdir -p $D
sec nproc; echo $S
sec stat
i=0
while [ $i -lt $((2 * S)) ]; do
  if [ $((i % 2)) -eq 0 ]; then set -- ./loop $(({LOOP0} + i * {LOOP_STEP}))
  else set -- ./pages $(({PAGES0} + i * {PAGES_STEP})); fi
  perf stat -x, -e instructions:u -o $D/st.$i "$@" &
  i=$((i + 1))
done
wait
i=0
while [ $i -lt $((2 * S)) ]; do
  echo "$i $(grep instructions:u $D/st.$i)"; i=$((i + 1))
done
sec record
echo 10000000 > /proc/sys/kernel/perf_event_max_sample_rate
echo 0 > /proc/sys/kernel/perf_cpu_time_max_percent
perf record -q -a -e instructions:u -c {PERIOD} -o $D/r.data -- sh -c '
  c=0
  while [ $c -lt $(nproc) ]; do
    taskset -c $c ./loop $(({REC0} + c * {REC_STEP})) &
    c=$((c + 1))
  done
  wait' 2>&1
perf report -i $D/r.data --stats 2>&1 |
  grep -E "^ *(SAMPLE|LOST|LOST_SAMPLES) events"
sec samples
perf script -i $D/r.data -F pid,cpu,ip,dso 2>/dev/null |
  awk 'index($4, "/loop)") {{ print $1, $2 }}' | sort | uniq -c
sec end
"""

SMPS = [4, pytest.param(16, marks=pytest.mark.slow)]


def stat_argv(i: int) -> list[str]:
    """The program and argument the script's i-th stat run counts."""
    if i % 2 == 0:
        return ["loop", str(LOOP0 + i * LOOP_STEP)]
    return ["pages", str(PAGES0 + i * PAGES_STEP)]


def affine_irefs(program: str, args: list[int]) -> dict[int, int]:
    """valgrind's Ir of ``program ARG`` for every ARG in args, from three
    valgrind runs: the smallest, the middle and the largest."""
    lo, hi = min(args), max(args)
    mid = (lo + hi) // 2
    ir = {n: valgrind_irefs([str(PROGRAMS / program), str(n)])
          for n in (lo, mid, hi)}
    slope, rem = divmod(ir[hi] - ir[lo], hi - lo)
    assert rem == 0 and ir[mid] == ir[lo] + slope * (mid - lo), \
        f"{program}: valgrind's Ir is not affine in the argument: {ir}"
    return {n: ir[lo] + slope * (n - lo) for n in args}


@pytest.fixture(scope="module", params=SMPS, ids=lambda n: f"smp{n}")
def guest(request):
    smp = request.param
    s = run_guest_script(SCRIPT, smp, timeout=300 + 60 * smp)
    return smp, s


def test_every_vcpu_is_online(guest):
    smp, s = guest
    assert s["nproc"] == [str(smp)], s["nproc"]


def test_every_concurrent_process_counts_exactly(guest):
    smp, s = guest
    argvs = [stat_argv(i) for i in range(2 * smp)]
    ref = {}
    for prog in ("loop", "pages"):
        ns = [int(a[1]) for a in argvs if a[0] == prog]
        ref |= {(prog, n): ir for n, ir in affine_irefs(prog, ns).items()}
    seen = {}
    for line in s["stat"]:
        i, _, csv = line.partition(" ")
        seen[int(i)] = csv.split(",")[0]
    wrong = {f"{' '.join(a)}": (seen.get(i), ref[a[0], int(a[1])])
             for i, a in enumerate(argvs)
             if seen.get(i) != str(ref[a[0], int(a[1])])}
    assert wrong == {}, f"(counted, valgrind) where they differ: {wrong}"


def test_system_wide_record_loses_no_record(guest):
    """perf report --stats prints each record type's total once, then the
    same per file: the first is the run's."""
    _, s = guest
    stats = {}
    for line in s["record"]:
        m = re.match(r"\s*(\w+) events:\s+(\d+)", line)
        if m:
            stats.setdefault(m.group(1), int(m.group(2)))
    assert stats.get("SAMPLE", 0) > 0, s["record"]
    assert stats.get("LOST", 0) == stats.get("LOST_SAMPLES", 0) == 0, \
        s["record"]


def test_each_pinned_loop_gets_its_samples_on_its_vcpu(guest):
    """perf script's lines "COUNT PID [CPU]" for the samples in the
    loops' code."""
    smp, s = guest
    by_pid = {}
    for line in s["samples"]:
        count, pid, cpu = line.split()
        by_pid.setdefault(int(pid), []).append((int(cpu.strip("[]")),
                                                int(count)))
    assert len(by_pid) == smp and all(len(v) == 1 for v in by_pid.values()), \
        f"each loop on one vCPU: {by_pid} from {s['samples']}"
    ir = affine_irefs("loop", [REC0 + c * REC_STEP for c in range(smp)])
    got = {cpu: n for (cpu, n), in by_pid.values()}
    assert sorted(got) == list(range(smp)), got
    off = {c: (got[c], ir[REC0 + c * REC_STEP] / PERIOD) for c in got
           if abs(got[c] - ir[REC0 + c * REC_STEP] / PERIOD) > 1.001}
    assert off == {}, f"vCPU: (samples, Ir / period) off by more than 1: {off}"
