"""Kill-anything soak.

Cycles of `pvperf stat` and `pvperf profile` runs, each killed at a random
moment (seeded; the seed is printed, PVPERF_SOAK_SEED replays it) in one
of five ways:

  SIGINT, SIGTERM   pvperf cleans up as on Ctrl-C
  SIGKILL           pvperf cannot: QEMU dies with it (PR_SET_PDEATHSIG)
                    and the next pvperf sweeps its run directory and RAM
                    file (their owner's pid is gone)
  qemu              QEMU is SIGKILLed under pvperf
  socket            the service's end of the plugin<->service connection
                    is shut down inside pvperf (gdb calls shutdown(2) on
                    it): the plugin declares the service dead, the guest's
                    hypercalls fail, the run goes on to its end
The last two wait, at the chosen moment, until pvperf has a QEMU or a
connected plugin socket (at most TARGET_WAIT_S): under load pvperf may
still be starting then ("socket (none open)": the run's VM had already
stopped, at 3-5 s on a quiet host).  A signal may come while pvperf still imports
its modules: one line, no traceback (pyhost/cli/__init__.py).

After each kill: pvperf exits within a minute (no hang; a run that was
not stopped, after a socket shutdown or one that ended first, within
RUN_WAIT_S), then a short `pvperf stat` counts a program exactly
(valgrind's Ir), and nothing is left: no QEMU, no pvperf file in /tmp or
/dev/shm (support.leftovers) of the two pvperf processes of the cycle.
Only theirs: another test session beside this one may have SIGKILLed a
pvperf of its own, whose files wait for that session's next run.
Every failure names the cycle (what ran, how it was killed and when)
and what it saw: the killed run's stderr, the next run's output, the
files or processes left.  20 cycles by default; PVPERF_SLOW=1: 100.
"""
from __future__ import annotations

import collections
import os
import random
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from pyhost.profile.record import GUEST_WORKDIR, sweep_workdirs

from parallel import make
from support import (PROGRAMS, leftovers, pvperf_cmd, sigint_default,
                     valgrind_irefs)

pytestmark = pytest.mark.vm

CYCLES = 100 if os.environ.get("PVPERF_SLOW") == "1" else 20
SEED = int(os.environ.get("PVPERF_SOAK_SEED", "20261123"), 0)
KILLS = ("SIGINT", "SIGTERM", "SIGKILL", "qemu", "socket")
LONG = ["./loop", "100000000"]          # 200 M instructions: a few seconds
SHORT = ["./loop", "1000"]
EXIT_WAIT_S = 60
# A run that goes on to its end (the service's socket shut down, or
# nothing killed): a boot and 200 M instructions, on a loaded host too.
RUN_WAIT_S = 300
STOPPED = ("SIGINT", "SIGTERM", "SIGKILL", "qemu")
TARGET_WAIT_S = 60
SEQPACKET = 5                           # /proc/net/unix Type column
CONNECTED = 3                           # its St column: SS_CONNECTED


def service_sockets(pid: int) -> list[int]:
    """pvperf's connected SOCK_SEQPACKET unix sockets: its ends of the
    plugin's connections (QMP and the ports are SOCK_STREAM; the
    service's listener is SEQPACKET too, but shutting it down would only
    keep the plugin from connecting).  [] once pvperf is gone."""
    seqpacket = set()
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        f = line.split()
        if int(f[4], 16) == SEQPACKET and int(f[5], 16) == CONNECTED:
            seqpacket.add(f[6])
    fds = []
    try:
        entries = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return []
    for fd in entries:
        try:
            m = re.fullmatch(r"socket:\[(\d+)\]", os.readlink(fd))
        except OSError:
            continue
        if m and m.group(1) in seqpacket:
            fds.append(int(fd.name))
    return fds


def qemu_of(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid), "-f", "qemu-system"],
                         capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def once_there(find, proc: subprocess.Popen) -> list[int]:
    """find(pid) once it finds something, while the run lasts, at most
    TARGET_WAIT_S: on a loaded host pvperf may not have started QEMU or
    its service by the chosen moment (3 of 20 socket kills found no
    socket at load 8-17), and the cycle would test nothing."""
    deadline = time.monotonic() + TARGET_WAIT_S
    while not (found := find(proc.pid)) and proc.poll() is None and \
            time.monotonic() < deadline:
        time.sleep(0.1)
    return found


def kill(kind: str, proc: subprocess.Popen) -> str:
    """Do ``kind`` to the run; say what was actually done."""
    if kind in ("SIGINT", "SIGTERM", "SIGKILL"):
        proc.send_signal(getattr(signal, kind))
        return kind
    if kind == "qemu":
        pids = once_there(qemu_of, proc)
        for p in pids:
            os.kill(p, signal.SIGKILL)
        return "qemu" if pids else "qemu (not started yet)"
    fds = once_there(service_sockets, proc)
    if not fds:
        return "socket (none open)"
    try:
        subprocess.run(["gdb", "-p", str(proc.pid), "-batch", "-nx",
                        "-ex", f"call (int)shutdown({fds[0]}, 2)"],
                       capture_output=True, timeout=120)
    except subprocess.TimeoutExpired:
        return "socket (gdb timed out)"
    return "socket"


def start(what: str, out: Path) -> subprocess.Popen:
    args = (["stat", "-e", "instructions:u"] if what == "stat" else
            ["profile", "--output", str(out)])
    return subprocess.Popen(
        pvperf_cmd() + [*args, "--share", str(PROGRAMS), "--", *LONG],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        preexec_fn=sigint_default)


def next_run() -> tuple[int, subprocess.CompletedProcess]:
    """The short exact run after a kill: (its pid, what it did)."""
    args = ["run", "--share", str(PROGRAMS), "--", "perf", "stat", "-x,",
            "-e", "instructions:u", *SHORT]
    p = subprocess.Popen(pvperf_cmd() + args, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        out, err = p.communicate(timeout=RUN_WAIT_S)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        err += f"\n(still running {RUN_WAIT_S} s later: killed)"
    return p.pid, subprocess.CompletedProcess(args, p.returncode, out, err)


# In the parallel phase (scripts/test.sh), beside the other worker's
# guests: a kill that lands while pvperf still imports (0.6 s and more
# on a loaded host) gets one line from the CLI's start-up guard
# (pyhost/cli/__init__.py), no traceback; leftovers() asks only about
# this cycle's two pvperf processes, and the other worker's leftover
# checks wait for the next run to sweep what a SIGKILL here left.
def test_kill_anything_soak(tmp_path):
    make(PROGRAMS, "-s", check=True)
    exact = valgrind_irefs([str(PROGRAMS / SHORT[0]), *SHORT[1:]])
    rng = random.Random(SEED)
    done = collections.Counter()
    slowest_exit = 0.0
    killed = set()          # work directories of SIGKILLed profiles
    print(f"soak: seed {SEED:#x}, {CYCLES} cycles")
    for cycle in range(CYCLES):
        what = rng.choice(("stat", "profile"))
        kind = KILLS[cycle % len(KILLS)] if cycle < len(KILLS) else \
            rng.choice(KILLS)
        delay = rng.uniform(0.3, 5.0)
        proc = start(what, tmp_path / f"prof{cycle}")
        time.sleep(delay)
        did = kill(kind, proc) if proc.poll() is None else "none (ended)"
        where = f"cycle {cycle} (seed {SEED:#x}): {what}, {did} at " \
                f"{delay:.1f} s, pvperf pid {proc.pid}"
        wait = EXIT_WAIT_S if did in STOPPED else RUN_WAIT_S
        t0 = time.monotonic()
        try:
            _, err = proc.communicate(timeout=wait)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
            pytest.fail(f"{where}: pvperf still running {wait} s later; "
                        f"its stderr:\n{err[-2000:]}")
        slowest_exit = max(slowest_exit, time.monotonic() - t0)
        done[did] += 1
        where += f", exit status {proc.returncode} after " \
                 f"{time.monotonic() - t0:.1f} s"
        assert "Traceback" not in err, f"{where}:\n{err[-2000:]}"
        # `pvperf profile` works in a directory of the share: gone unless
        # nobody could remove it (SIGKILL: the next profile sweeps it).
        left = sorted(PROGRAMS.glob(f"{GUEST_WORKDIR}-{proc.pid}-*"))
        if did == "SIGKILL":
            killed.update(left)
        else:
            assert left == [], f"{where}: left {left}; its stderr:\n" \
                               f"{err[-2000:]}"
        # The next run sweeps what a SIGKILLed pvperf left, and counts
        # exactly.
        pid, r = next_run()
        seen = f"{where}; the next run (pid {pid}) exited " \
               f"{r.returncode}:\n{r.stdout[-1000:]}\n{r.stderr[-2000:]}"
        assert r.returncode == 0, seen
        counts = [ln.split(",")[0] for ln in r.stderr.splitlines()
                  if ",instructions:u," in ln]
        assert counts == [str(exact)], f"counted {counts}, valgrind " \
                                       f"{exact}: {seen}"
        left = leftovers({proc.pid, pid})
        assert left == [], f"{where}: left {left}; its stderr:\n" \
                           f"{err[-2000:]}"
    swept = set(sweep_workdirs(PROGRAMS))
    assert swept <= killed, f"work directories no SIGKILL left: " \
                            f"{swept - killed}"
    rest = list(PROGRAMS.glob(f"{GUEST_WORKDIR}-*"))
    assert rest == [], f"work directories left in the share: {rest}"
    print(f"soak: {CYCLES} cycles, kills {dict(done)}, 0 hangs, 0 "
          f"leftovers, slowest exit after the kill {slowest_exit:.1f} s")


def test_sweep_takes_only_work_directories_of_gone_processes(tmp_path):
    """What a SIGKILLed `pvperf profile` left in the share goes at the next
    profile; a live process's directory, another name and a link stay."""
    gone = subprocess.Popen(["true"])
    gone.wait()                         # its pid is free now
    dead = tmp_path / f"{GUEST_WORKDIR}-{gone.pid}-aaaaaa"
    live = tmp_path / f"{GUEST_WORKDIR}-{os.getpid()}-bbbbbb"
    other = tmp_path / "results"
    target = tmp_path / "target"
    for d in (dead, live, other, target):
        d.mkdir()
    (dead / "go").touch()
    link = tmp_path / f"{GUEST_WORKDIR}-{gone.pid}-cccccc"
    link.symlink_to(target)
    assert sweep_workdirs(tmp_path) == [dead]
    assert not dead.exists()
    assert live.is_dir() and other.is_dir() and target.is_dir()
    assert link.is_symlink()
