#!/usr/bin/env python3
"""Reverse-map overhead: pvperf-rmap.so against plain TCG, in one run.

Boots the default image in each configuration and times the same
CPU-bound guest program with the guest's perf stat task-clock (a software
event: no plugin involved):

  plain   no plugin (plain TCG, as `pvperf run --no-pmu`)
  first   pvperf-rmap.so,hooks=first  (what `pvperf profile` uses: one
          marker, an inline add, per TB)
  last    pvperf-rmap.so,hooks=last   (also a marker on each TB's last insn)
  all     pvperf-rmap.so,hooks=all    (a marker on every instruction)

Target (issue 5): first <= 1.3x plain.  Configurations alternate within
each round, and each round starts one configuration later than the one
before, so a slow phase of the host does not always hit the same
configuration.  The table shows, per configuration, the median and the
minimum over the rounds and their ratios to plain's median and minimum:
the host is shared and noisy (run-to-run swings of 30% are seen), and
noise only ever adds time, so the minimum is the steadier estimate of
each configuration's own cost; the median shows the typical run.

  .venv/bin/python bench/bench_rmap.py [--rounds 3] [--configs plain first]
"""
from __future__ import annotations

import argparse
import asyncio
import io
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchlib import task_clock_ms as parse_task_clock  # noqa: E402
from pyhost import image  # noqa: E402
from pyhost.profile import ProfiledVM  # noqa: E402
from pyhost.vm import VMConfig  # noqa: E402

PROGRAMS = REPO / "tests" / "guest_programs"
CFLAGS = ["-O2", "-static", "-nostdlib", "-fno-pic", "-no-pie",
          "-fno-stack-protector", "-fcf-protection=none",
          "-fno-asynchronous-unwind-tables", "-fno-omit-frame-pointer"]
# Each about 1.5 s of guest time under plain TCG, so start-up noise does
# not dominate (busybox: 60 md5sums of the busybox binary, ~25 ms each).
WORKLOADS = {"hotcold": "./hotcold 600000",
             "busybox": "sh -c 'i=0; while [ $i -lt 60 ]; do "
                        "md5sum /bin/busybox >/dev/null; i=$((i+1)); done'"}
CONFIGS = ("plain", "first", "last", "all")


async def _run(cfg: VMConfig, hooks: str | None, rmap_out: Path) -> str:
    out, err = io.BytesIO(), io.BytesIO()
    vm = ProfiledVM(cfg, rmap_out, hooks) if hooks else None
    if vm is None:
        from pyhost.vm import VM
        vm = VM(cfg)
    async with vm:
        pumps = await vm.pump_output(out, err)
        await vm.wait_ready()
        await vm.wait_exit(900)
        await asyncio.wait(pumps, timeout=5)
    return err.getvalue().decode()


def task_clock_ms(share: Path, config: str, workload: str) -> float:
    cmd = f"perf stat -x, -e task-clock {WORKLOADS[workload]}"
    cfg = VMConfig(image=image.image_status("default"), command=cmd,
                   share=share, pmu=False)
    hooks = None if config == "plain" else config
    stderr = asyncio.run(_run(cfg, hooks, share / "bench.rmap"))
    return parse_task_clock(stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS))
    ap.add_argument("--workload", nargs="+", default=list(WORKLOADS))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        share = Path(tmp)
        subprocess.run(["gcc", *CFLAGS, "-o", str(share / "hotcold"),
                        str(PROGRAMS / "hotcold.c")], check=True)
        print(f"{'workload':<8} {'config':<6} {'median ms':>10} "
              f"{'ratio':>6} {'min ms':>8} {'ratio':>6}")
        n = len(args.configs)
        for wl in args.workload:
            times = {c: [] for c in args.configs}
            for i in range(args.rounds):
                for k in range(n):
                    c = args.configs[(i + k) % n]
                    times[c].append(task_clock_ms(share, c, wl))
                print(f"  round {i + 1}/{args.rounds} " + "  ".join(
                    f"{c}={times[c][-1]:.0f}" for c in args.configs),
                    file=sys.stderr)
            med0 = statistics.median(times[args.configs[0]])
            min0 = min(times[args.configs[0]])
            for c in args.configs:
                med, low = statistics.median(times[c]), min(times[c])
                print(f"{wl:<8} {c:<6} {med:>10.0f} {med / med0:>5.2f}x "
                      f"{low:>8.0f} {low / min0:>5.2f}x")


if __name__ == "__main__":
    main()
