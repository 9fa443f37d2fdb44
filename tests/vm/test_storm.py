"""Opt-in, long: a guest that keeps the PMU as busy as it can for ten
minutes leaves the host service's memory flat and its CPU bounded.

Two vCPUs, for PVPERF_STORM_S seconds (default 600):

* an open/close storm: `perf stat -r 100` with four events, back to back
  (every run OPENs, ENABLEs, DISABLEs, READs and CLOSEs each: about 60
  runs a second);
* beside it, sampling at the highest rate on every counter at once:
  `perf record` of the eight generic events (the per-vCPU maximum),
  each with period 1,000 and the kernel's throttling off.

pvperf's resident memory is sampled every second: from 10 % of the run
to its end it may grow by at most 4 MiB; its CPU time is reported (user
+ system, against wall time).  Afterwards counting is exact (valgrind).

  PVPERF_SLOW=1 .venv/bin/python -m pytest -s tests/vm/test_storm.py
"""
from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from parallel import make
from support import (PROGRAMS, RssSampler, perf_count, pvperf_cmd,
                      sections, valgrind_irefs)

pytestmark = [pytest.mark.vm, pytest.mark.slow]

SECONDS = int(os.environ.get("PVPERF_STORM_S", "600"))
EIGHT = ("instructions:u,branches:u,cycles:u,ref-cycles:u,bus-cycles:u,"
         "cache-references:u,cache-misses:u,branch-misses:u")
N_LOOP = 1000

SCRIPT = f"""
sec() {{ echo "=== $1"; }}
echo 10000000 > /proc/sys/kernel/perf_event_max_sample_rate
echo 0 > /proc/sys/kernel/perf_cpu_time_max_percent
end=$(($(date +%s) + {SECONDS}))
(
    r=0; samples=0
    while [ $(date +%s) -lt $end ]; do
        taskset -c 1 perf record -q -e {EIGHT} -c 1000 -o /tmp/s.data \\
            ./loop 2000000 > /dev/null 2>&1 && r=$((r + 1))
        s=$(perf report -i /tmp/s.data --stats 2>/dev/null |
            sed -n 's/^ *SAMPLE events: *\\([0-9]*\\).*/\\1/p' | head -1)
        samples=$((samples + ${{s:-0}}))
    done
    echo "records $r samples $samples" > /tmp/sampler.out
) &
n=0
while [ $(date +%s) -lt $end ]; do
    taskset -c 0 perf stat -r 100 -e instructions,branches,cycles,cache-misses \\
        -x, true > /dev/null 2>&1 && n=$((n + 100))
done
wait
sec storm
echo "perf stat runs $n"
cat /tmp/sampler.out
sec after
perf stat -x, -e instructions:u ./loop {N_LOOP} 2>&1
sec end
"""


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (its threads: the service)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:13]) / os.sysconf("SC_CLK_TCK")


def test_ten_minute_storm_keeps_the_service_flat():
    make(PROGRAMS, "-s", "loop", check=True)
    t0 = time.monotonic()
    proc = subprocess.Popen(
        pvperf_cmd() + ["run", "--smp", "2", "--share", str(PROGRAMS),
                        "--timeout", str(SECONDS + 600), "--", "sh", "-c",
                        SCRIPT],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rss = RssSampler(proc.pid, period=1.0)
    rss.start()
    cpu = 0.0
    while proc.poll() is None:
        try:
            cpu = cpu_seconds(proc.pid)     # the last reading before exit
        except OSError:
            break
        time.sleep(1.0)
    out, err = proc.communicate()
    rss.join()
    wall = time.monotonic() - t0
    assert proc.returncode == 0, err[-3000:]
    s = sections(out)
    assert "end" in s, out[-3000:]
    runs = int(re.search(r"perf stat runs (\d+)", out).group(1))
    m = re.search(r"records (\d+) samples (\d+)", out)
    records, samples = int(m.group(1)), int(m.group(2))
    start, peak, last = rss.growth_kib(0.1)
    print(f"storm {SECONDS} s: {runs} perf stat runs (x4 events), "
          f"{records} perf records of 8 events at period 1000 "
          f"({samples} samples); pvperf RSS {start} KiB at 10%, peak "
          f"{peak}, end {last}; pvperf CPU {cpu:.0f} s in {wall:.0f} s")
    assert runs >= 100 and records >= 1 and samples > 0, out[-2000:]
    assert peak - start <= 4096, rss.samples[::30]
    assert perf_count(s["after"], "instructions:u") == str(
        valgrind_irefs([str(PROGRAMS / "loop"), str(N_LOOP)])), s["after"]
