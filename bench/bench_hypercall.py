#!/usr/bin/env python3
"""Hypercall round trip: what the guest sees, against the host alone.

  guest    pvperf run with guest_kernel_patch/hctest/pvperf_hctest.ko in
           mode=latency: N PROBE hypercalls timed in the guest kernel
           (ktime_get_ns, IRQs off), marker store to ->ret written.  This is
           TCG + plugin + socket + service, everything a hypercall costs.
  service  the host service alone: a separate Python client process sends
           the plugin's PROBE message to a pyhost.pmu.service.PluginService
           over its SOCK_SEQPACKET socket and waits for the reply, as the
           plugin does (tests/unit/pmu/test_service.py's round trip).
  echo     the same client against a bare recv/send thread on the same
           kind of socket: the transport and thread wake-ups, no backend.

guest - service is what the guest side (TCG, plugin, a C client instead of
a Python one) adds; service - echo is the Python backend's own cost.
Target: guest p50 <= 50 us.  Rounds alternate the three.

  .venv/bin/python bench/bench_hypercall.py [--count 20000] [--rounds 3]
"""
from __future__ import annotations

import argparse
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from benchlib import REPO

from pyhost import abi
from pyhost.pmu import plugin_protocol as proto
from pyhost.pmu.guestmem import GuestMemory
from pyhost.pmu.hypercall import PerfBackend
from pyhost.pmu.service import PluginService

PVPERF = REPO / ".venv" / "bin" / "pvperf"
KO = REPO / "guest_kernel_patch" / "hctest" / "pvperf_hctest.ko"
TARGET_P50_US = 50.0
BLOCK_GPA = 0x1000
KVADDR = 0xFFFFFFFF81000000
LATENCY_RE = re.compile(r"pvperf_hctest: latency (n=\d+ .*)$", re.M)

# The client process: N round trips, then nanoseconds on stdout.
CLIENT = r"""
import socket, sys, time
path, n, msg = sys.argv[1], int(sys.argv[2]), bytes.fromhex(sys.argv[3])
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.connect(path)
out = []
for i in range(n + 100):
    t0 = time.perf_counter_ns()
    s.send(msg)
    s.recv(4096)
    if i >= 100:
        out.append(time.perf_counter_ns() - t0)
s.close()
sys.stdout.write(" ".join(map(str, out)))
"""


def pct(values: list[int], p: int) -> int:
    """Nearest rank, as pvperf_hctest computes it."""
    v = sorted(values)
    return v[(len(v) - 1) * p // 100]


def summary(ns: list[int]) -> dict[str, int]:
    return {"p50_ns": pct(ns, 50), "p90_ns": pct(ns, 90),
            "p99_ns": pct(ns, 99), "max_ns": max(ns)}


def guest_round(count: int) -> dict[str, int]:
    with tempfile.TemporaryDirectory(prefix="bench-hcall-") as share:
        (Path(share) / KO.name).write_bytes(KO.read_bytes())
        r = subprocess.run(
            [str(PVPERF), "run", "--share", share, "--", "sh", "-c",
             f"insmod {KO.name} mode=latency count={count} && "
             "rmmod pvperf_hctest; dmesg | grep 'pvperf_hctest: latency'"],
            capture_output=True, text=True, timeout=600)
    m = LATENCY_RE.search(r.stdout)
    if r.returncode or not m:
        raise SystemExit(f"bench: guest run failed ({r.returncode}):\n"
                         f"{r.stdout}{r.stderr}")
    fields = {k: int(v) for k, v in (f.split("=") for f in m.group(1).split())}
    if fields["errors"]:
        raise SystemExit(f"bench: {fields['errors']} PROBEs failed")
    return fields


def client(path: str, count: int, svc: PluginService | None = None
           ) -> list[int]:
    """Run the client process; ``svc`` is told to serve it (SO_PEERCRED)."""
    msg = proto.HcallMessage(0, BLOCK_GPA, KVADDR, (0,) * proto.NR_COUNTERS).pack()
    proc = subprocess.Popen([sys.executable, "-c", CLIENT, path, str(count),
                             msg.hex()], stdout=subprocess.PIPE, text=True)
    if svc is not None:
        svc.allow_peer(proc.pid)
    out, _ = proc.communicate(timeout=600)
    if proc.returncode:
        raise SystemExit(f"bench: client failed ({proc.returncode})")
    return [int(x) for x in out.split()]


def service_round(count: int) -> dict[str, int]:
    ram = bytearray(1 << 16)
    ram[BLOCK_GPA:BLOCK_GPA + 64] = abi.pack_hcall(abi.HC_PERF_OP,
                                                   abi.OP_PROBE, ret=-38)
    with tempfile.TemporaryDirectory(prefix="bench-svc-") as d:
        svc = PluginService(PerfBackend(GuestMemory(ram)), f"{d}/svc")
        svc.start()
        try:
            ns = client(svc.path, count, svc)
        finally:
            svc.stop()
    assert int.from_bytes(ram[BLOCK_GPA + abi.HCALL_OFFSET_RET:
                              BLOCK_GPA + abi.HCALL_OFFSET_RET + 8],
                          "little") == abi.ABI_VERSION
    return summary(ns)


def echo_round(count: int) -> dict[str, int]:
    """A recv/send thread: the floor under any Python service."""
    tmp = tempfile.TemporaryDirectory(prefix="bench-echo-")
    name = f"{tmp.name}/echo"
    lsock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    lsock.bind(name)
    lsock.listen(1)
    reply = proto.pack_reply(0)

    def serve():
        conn, _ = lsock.accept()
        with conn:
            while conn.recv(proto.HCALL_MSG.size + 1):
                conn.send(reply)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        ns = client(name, count)
    finally:
        t.join(timeout=5)
        lsock.close()
        tmp.cleanup()
    return summary(ns)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    r = subprocess.run(["make", "-s", "-C", str(REPO / "guest_kernel_patch"),
                        "hctest"], capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"bench: make hctest failed:\n{r.stdout}{r.stderr}")
    runs = {"guest": [], "service": [], "echo": []}
    for i in range(args.rounds):
        runs["guest"].append(guest_round(args.count))
        runs["service"].append(service_round(args.count))
        runs["echo"].append(echo_round(args.count))
        print(f"  round {i + 1}/{args.rounds} " + "  ".join(
            f"{k} p50={v[-1]['p50_ns'] / 1000:.1f}us" for k, v in runs.items()),
            file=sys.stderr)
    print(f"round trip, {args.count} calls x {args.rounds} rounds "
          "(median of the rounds' percentiles), microseconds")
    print(f"{'':<8} {'p50':>8} {'p90':>8} {'p99':>8} {'max':>9}")
    med = {}
    for k, rows in runs.items():
        med[k] = {p: statistics.median(r[p] for r in rows) / 1000
                  for p in ("p50_ns", "p90_ns", "p99_ns", "max_ns")}
        m = med[k]
        print(f"{k:<8} {m['p50_ns']:>8.1f} {m['p90_ns']:>8.1f} "
              f"{m['p99_ns']:>8.1f} {m['max_ns']:>9.1f}")
    clock = statistics.median(r["clock_p50_ns"] for r in runs["guest"])
    g, s = med["guest"]["p50_ns"], med["service"]["p50_ns"]
    # The host-side client sleeps in recv(); the plugin spins up to 100 us
    # for the answer, so on a host with slow wake-ups the guest path can
    # be the faster one.
    print(f"guest - service at p50: {g - s:+.1f} us (the plugin spin-waits, "
          f"the test client sleeps); the backend adds "
          f"{s - med['echo']['p50_ns']:.1f} us over a bare echo; guest clock "
          f"read {clock:.0f} ns")
    verdict = "meets" if g <= TARGET_P50_US else "MISSES"
    print(f"target guest p50 <= {TARGET_P50_US:.0f} us: {verdict} ({g:.1f} us)")


if __name__ == "__main__":
    main()
