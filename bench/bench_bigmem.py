#!/usr/bin/env python3
"""pvperf's own memory against guest RAM: `pvperf run --mem SIZE` of
bigtouch (tests/guest_programs/bigtouch.c: maps MIB MiB, stores into
every page) at several sizes, the peak resident memory of

  service  the pvperf process (CLI + host service): RssAnon, and
           RssShmem, the guest RAM pages it mapped and read;
  QEMU     RssAnon: QEMU's heap, TCG's code buffer and the plugin's
           structures (the plugin lives in QEMU; with --no-pmu too,
           to tell the plugin's share); RssShmem: guest RAM the guest
           touched (the RAM file, shared with the service)

sampled from /proc every 0.1 s.  Guest RAM itself is the RAM file in
/dev/shm, not pvperf's: neither RssAnon should grow with --mem.

  .venv/bin/python bench/bench_bigmem.py [--mem 1G,6G,16G] [--mib 512]
"""
from __future__ import annotations

import argparse
import subprocess
import threading
import time

from benchlib import PROGRAMS, REPO, qemu_pid

FIELDS = ("RssAnon", "RssShmem")


def rss_kib(pid: int | None) -> dict[str, int]:
    out = dict.fromkeys(FIELDS, 0)
    try:
        for line in open(f"/proc/{pid}/status"):
            key, _, value = line.partition(":")
            if key in out:
                out[key] = int(value.split()[0])
    except (OSError, TypeError):
        pass
    return out


def measure(mem: str, mib: int, pmu: bool) -> dict[str, dict[str, int]]:
    argv = [str(REPO / ".venv" / "bin" / "pvperf"), "run", "--mem", mem,
            "--share", str(PROGRAMS)] + ([] if pmu else ["--no-pmu"])
    cmd = f"./bigtouch {mib} 1" if not pmu else \
        f"perf stat -e instructions:u ./bigtouch {mib} 1"
    proc = subprocess.Popen(argv + ["--", "sh", "-c", cmd],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    peak = {"service": dict.fromkeys(FIELDS, 0),
            "qemu": dict.fromkeys(FIELDS, 0)}

    def poll():
        while proc.poll() is None:
            for who, pid in (("service", proc.pid),
                             ("qemu", qemu_pid(proc.pid))):
                for k, v in rss_kib(pid).items():
                    peak[who][k] = max(peak[who][k], v)
            time.sleep(0.1)
    t = threading.Thread(target=poll)
    t.start()
    out, err = proc.communicate()
    t.join()
    if proc.returncode:
        raise SystemExit(f"bench: {mem}: exit {proc.returncode}\n{err}")
    return peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mem", default="1G,6G,16G")
    ap.add_argument("--mib", type=int, default=512,
                    help="MiB bigtouch touches in each guest")
    args = ap.parse_args()
    subprocess.run(["make", "-s", "-C", str(PROGRAMS), "bigtouch"],
                   check=True)
    print(f"bigtouch {args.mib} in each guest; peak MiB")
    print(f"{'--mem':>6} {'service anon':>13} {'service shmem':>14} "
          f"{'QEMU anon':>10} {'QEMU anon no-pmu':>17} {'QEMU shmem':>11}")
    for mem in args.mem.split(","):
        on = measure(mem, args.mib, True)
        off = measure(mem, args.mib, False)
        print(f"{mem:>6} {on['service']['RssAnon'] >> 10:>13} "
              f"{on['service']['RssShmem'] >> 10:>14} "
              f"{on['qemu']['RssAnon'] >> 10:>10} "
              f"{off['qemu']['RssAnon'] >> 10:>17} "
              f"{on['qemu']['RssShmem'] >> 10:>11}", flush=True)


if __name__ == "__main__":
    main()
