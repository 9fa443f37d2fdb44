#!/usr/bin/env python3
"""The overflow interrupt, doorbell against QMP, against plain TCG.

Each configuration is a whole `pvperf run` of the CPU-bound ``loop``
(2 instructions an iteration), measured as the whole process minus the
same run of a tiny loop (boot, perf's start-up and its data file cancel
out), in host CPU seconds of pvperf and QEMU together (``BENCH_WALL=1``:
wall seconds; on a shared host those mostly measure the other work):

  plain      pvperf run --no-pmu -- ./loop N              (no plugin)
  IRQ        perf record -e instructions:u -c P ./loop N  an interrupt per
                                                          sample (buffered 0)
  IRQ -g     perf record -g -e instructions:u -c P ...    every overflow
                                                          SYNC: the vCPU waits
                                                          until the interrupt
                                                          is raised

for IRQ in doorbell (the plugin writes the record into the vCPU's ring
and rings its ivshmem-doorbell vector itself; the service only accounts,
afterwards), doorbell-svc (the service writes the record and rings;
PVPERF_SERVICE_WRITES=1) and qmp (inject-nmi, the path before the
doorbell, which deterministic runs still take).  P is chosen from
the first plain run for about RATE samples a second.  Rounds alternate the
configurations' order; the figure is the median over rounds.

Latency: with --debug the plugin reports (verbose, on the console) how
long each SYNC overflow held its vCPU, from the overflowing instruction
until QEMU had raised the interrupt, p50 and p99; in the -g runs every
sample is SYNC.  The guest's handler runs at the vCPU's next block
boundary, right after (the vCPU resumes only then): this is the latency
from the overflowing instruction to the handler, minus the guest's
interrupt entry.

  .venv/bin/python bench/bench_overflow_irq.py [N] [ROUNDS] [RATE]

Targets (the doorbell's reason to exist): IRQ <= 1.15x plain, IRQ -g <= 1.3x plain.
"""
from __future__ import annotations

import os
import re
import resource
import statistics
import subprocess
import sys
import time

from benchlib import PROGRAMS, REPO

PVPERF = REPO / ".venv" / "bin" / "pvperf"
TINY = 1000
# doorbell: the plugin writes the record and rings;
# doorbell-svc: the service writes it and rings (SYNC overflows: the
# plugin rings once the service answered), PVPERF_SERVICE_WRITES=1;
# qmp: the NMI over QMP.  BENCH_IRQS=doorbell,qmp picks some.
IRQS = tuple(os.environ.get("BENCH_IRQS", "doorbell,doorbell-svc,qmp")
             .split(","))
SERVICE_WRITES = "-svc"
WALL = os.environ.get("BENCH_WALL") == "1"
RECORD = ("echo 0 > /sys/module/pvperf/parameters/buffered; "
          "perf record -q {g} -e instructions:u -c {p} -o /tmp/a.data "
          "./loop {n} && perf report -i /tmp/a.data --stdio 2>/dev/null | "
          "sed -n 's/^# Samples: *\\([0-9KM]*\\).*/SAMPLES \\1/p' | head -1")


def cpu_s() -> float:
    """CPU time of every process we waited for (pvperf, and QEMU, which
    pvperf waited for), user and system."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run(args: list[str], env: dict | None = None
        ) -> tuple[float, str, str]:
    """The run's host CPU seconds (QEMU's threads, the service): on a
    host shared with other work the wall time mostly measures the others;
    the CPU a run takes is what sampling costs.  BENCH_WALL=1: wall."""
    t0, c0 = time.monotonic(), cpu_s()
    r = subprocess.run([str(PVPERF), "--debug", "run", "--console",
                        "--share", str(PROGRAMS), *args], capture_output=True,
                       text=True, timeout=1800,
                       env={**os.environ, **(env or {})})
    t = time.monotonic() - t0 if WALL else cpu_s() - c0
    if r.returncode:
        sys.exit(f"bench: pvperf run {args} failed:\n{r.stderr[-3000:]}")
    return t, r.stdout, r.stderr


def config_args(name: str, n: int, period: int) -> list[str]:
    if name == "plain":
        return ["--no-pmu", "--", "./loop", str(n)]
    irq, _, g = name.partition(" ")
    return ["--overflow-irq", irq.removesuffix(SERVICE_WRITES), "--", "sh",
            "-c", RECORD.format(g=g, p=period, n=n)]


def config_env(name: str) -> dict:
    irq = name.partition(" ")[0]
    return {"PVPERF_SERVICE_WRITES": "1"} if irq.endswith(SERVICE_WRITES) \
        else {}


def measure(name: str, n: int, period: int) -> tuple[float, str, str]:
    """Whole run of N minus whole run of TINY; the big run's outputs."""
    env = config_env(name)
    tiny, _, _ = run(config_args(name, TINY, period), env)
    t, out, err = run(config_args(name, n, period), env)
    return t - tiny, out, err


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000_000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    rate = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
    subprocess.run(["make", "-s", "-C", str(PROGRAMS)], check=True)
    # The period from one whole plain run (its boot makes the rate a
    # little low: fewer samples, never more than RATE).
    first, _, _ = run(config_args("plain", n, 0))
    period = max(1000, int(2 * n / first / rate)) | 1
    names = ["plain"] + [f"{i}{g}" for i in IRQS for g in ("", " -g")]
    times = {k: [] for k in names}
    samples, raised = {}, {k: [] for k in names}
    svc_cpu = {k: [] for k in names}
    for r in range(rounds):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            t, out, err = measure(name, n, period)
            times[name].append(t)
            if m := re.search(r"^SAMPLES (\S+)", out, re.M):
                samples[name] = m.group(1)
            if m := re.search(r"SampleStats\(samples=(\d+).*nmis=(\d+)", err):
                samples[name] = f"{samples.get(name, '?')} ({m.group(2)} " \
                    f"interrupts for {m.group(1)} records)"
            if m := re.search(r"(\d+ overflow messages, \d+ us of service "
                              r"CPU each)", err):
                svc_cpu[name].append(m.group(1))
            if m := re.search(r"SYNC overflows held the vCPU until their "
                              r"interrupt was raised: (p50 [^(]*)", err):
                raised[name].append(m.group(1))
            print(f"round {r + 1}: {name:14s} {t:6.2f} s", flush=True)
    base = statistics.median(times["plain"])
    print(f"\n{'wall' if WALL else 'host CPU'} seconds")
    print(f"loop {n}: {2 * n / 1e6:.0f} M instructions, plain TCG "
          f"{base:.2f} s (median of {rounds}; runs "
          f"{', '.join(f'{t:.2f}' for t in times['plain'])}), "
          f"-c {period} (~{2 * n / period / base:.0f} samples/s of plain)")
    for name in names[1:]:
        t = statistics.median(times[name])
        target = 1.3 if name.endswith("-g") else 1.15
        print(f"{name:14s} {t:6.2f} s  {t / base:5.2f}x plain (target <= "
              f"{target}x; runs {', '.join(f'{x / base:.2f}' for x in times[name])})"
              f"  {samples.get(name, '?')} samples")
        if name.endswith("-g"):
            print(f"{'':14s} overflow -> interrupt raised: "
                  f"{'; '.join(raised[name]) or '?'}")
        print(f"{'':14s} service: {'; '.join(svc_cpu[name]) or '?'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
