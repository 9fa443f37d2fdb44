#!/usr/bin/env python3
"""Boot and run time against the number of vCPUs (docs/options.md, --smp).

For each --smp: one `pvperf run` whose command prints the guest's uptime,
runs COPIES copies of `loop N` at once, each under a `perf stat -e
instructions:u` of its own (the same work at every smp), and prints the
uptime again.  Printed per smp:

  boot    wall seconds from starting pvperf to the command's first line
  run     the guest's seconds for the copies (its uptime, which under TCG
          follows the host's clock)
  total   wall seconds of the whole pvperf run
  cpu     host CPU seconds of pvperf and QEMU together (rusage)
  load    the host's 1-minute load average at the end

    .venv/bin/python bench/bench_smp.py [--smp 1 4 16] [--copies 16]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROGRAMS = REPO / "tests" / "guest_programs"


def one(smp: int, copies: int, n: int) -> dict[str, float]:
    script = (f"cat /proc/uptime; i=0; while [ $i -lt {copies} ]; do "
              f"perf stat -x, -e instructions:u -o /tmp/st.$i ./loop {n} & "
              "i=$((i + 1)); done; wait; cat /proc/uptime; "
              "cat /tmp/st.* | grep -c instructions:u")
    t0 = time.monotonic()
    p = subprocess.Popen([str(REPO / ".venv" / "bin" / "pvperf"), "run",
                          "--smp", str(smp), "--share", str(PROGRAMS), "--",
                          "sh", "-c", script], stdout=subprocess.PIPE,
                         text=True)
    lines, boot = [], None
    for line in p.stdout:
        boot = boot if boot is not None else time.monotonic() - t0
        lines.append(line.split())
    _, status, ru = os.wait4(p.pid, 0)
    total = time.monotonic() - t0
    if status != 0 or len(lines) != 3 or lines[2] != [str(copies)]:
        raise SystemExit(f"smp {smp}: run failed ({status}): {lines}")
    return {"boot": boot, "run": float(lines[1][0]) - float(lines[0][0]),
            "total": total, "cpu": ru.ru_utime + ru.ru_stime,
            "load": os.getloadavg()[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smp", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--copies", type=int, default=16)
    ap.add_argument("--n", type=int, default=10_000_000)
    a = ap.parse_args()
    subprocess.run(["make", "-s", "-C", str(PROGRAMS)], check=True)
    print(f"{a.copies} x loop {a.n} under perf stat each; host cores "
          f"{os.cpu_count()}")
    print("smp   boot s   run s  total s    cpu s   load")
    for smp in a.smp:
        r = one(smp, a.copies, a.n)
        print(f"{smp:3d} {r['boot']:8.1f} {r['run']:7.2f} {r['total']:8.1f} "
              f"{r['cpu']:8.1f} {r['load']:6.1f}", flush=True)


if __name__ == "__main__":
    main()
