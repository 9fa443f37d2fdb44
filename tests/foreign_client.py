"""A foreign local user's client: what another account on the host can do
to a running pvperf's channels.  Stdlib only: tests/vm/test_channels.py runs
it with the system python3 as user `nobody` (as_nobody() below).

  probe TARGETS_JSON   try every target once; print one JSON list of
                       {..., "result": "connected" | "refused (ERRNO)"}
  race                 print "racing", read a pvperf pid from stdin, then
                       until SIGTERM connect in a tight loop to every
                       unix socket named like that run's (pvperf-PID-)
                       as soon as it appears in /proc/net/unix, and keep
                       whatever connects (an attacker would hold QMP);
                       then print one JSON summary

A target is {"channel": ..., "kind": "path" | "abstract" | "procfd",
"addr": ..., "type": "stream" | "seqpacket"}; "procfd" is another
process's descriptor, /proc/PID/fd/N, which a foreign user can only try
to open.
"""
from __future__ import annotations

import errno
import json
import os
import pwd
import signal
import socket
import sys
import time

TYPES = {"stream": socket.SOCK_STREAM, "seqpacket": socket.SOCK_SEQPACKET}
# /proc/net/unix's Type column
PROC_TYPES = {"0001": "stream", "0005": "seqpacket"}


def as_nobody() -> None:
    """subprocess preexec_fn: drop every privilege to user nobody."""
    user = pwd.getpwnam("nobody")
    os.setgroups([])
    os.setgid(user.pw_gid)
    os.setuid(user.pw_uid)


def _refused(e: OSError) -> str:
    return f"refused ({errno.errorcode.get(e.errno, e.errno)})"


def try_target(t: dict, keep: list) -> str:
    if t["kind"] == "procfd":
        try:
            fd = os.open(t["addr"], os.O_RDWR)
        except OSError as e:
            return _refused(e)
        keep.append(fd)
        return "connected"
    s = socket.socket(socket.AF_UNIX, TYPES[t["type"]])
    s.settimeout(1)
    addr = ("\0" + t["addr"]) if t["kind"] == "abstract" else t["addr"]
    try:
        s.connect(addr)
    except OSError as e:
        s.close()
        return _refused(e)
    keep.append(s)
    return "connected"


def probe(targets: list[dict]) -> list[dict]:
    keep: list = []
    return [dict(t, result=try_target(t, keep)) for t in targets]


def pvperf_sockets(tag: str) -> list[dict]:
    """Every unix socket in /proc/net/unix whose name holds ``tag``."""
    out = []
    with open("/proc/net/unix") as f:
        next(f)
        for line in f:
            fields = line.split()
            if len(fields) < 8 or tag not in fields[7]:
                continue
            name, kind = fields[7], "path"
            if name.startswith("@"):
                name, kind = name[1:], "abstract"
            out.append({"channel": "race", "kind": kind, "addr": name,
                        "type": PROC_TYPES.get(fields[4], "stream")})
    return out


def race() -> dict:
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    keep: list = []
    seen: set[str] = set()
    connected: set[str] = set()
    refusals: dict[str, int] = {}
    attempts = 0
    print("racing", flush=True)
    tag = f"pvperf-{int(sys.stdin.readline())}-"
    while not stop:
        for t in pvperf_sockets(tag):
            key = f"{t['kind']}:{t['addr']}"
            if key in connected:
                continue
            seen.add(key)
            attempts += 1
            result = try_target(t, keep)
            if result == "connected":
                connected.add(key)
            else:
                refusals[result] = refusals.get(result, 0) + 1
        time.sleep(0.0005)
    return {"attempts": attempts, "seen": sorted(seen),
            "connected": sorted(connected), "refusals": refusals}


if __name__ == "__main__":
    if sys.argv[1] == "probe":
        print(json.dumps(probe(json.loads(sys.argv[2]))))
    else:
        print(json.dumps(race()), flush=True)
