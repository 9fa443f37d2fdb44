"""The host's perf tool: recording QEMU, reading samples back, its report.

    perf record -e cpu-clock -F 4000 -k mono --call-graph dwarf -p QEMU
        (a software event: hardware events are not supported on these
        hosts; -k mono: the clock of QEMU's jitdump and the rmap records),
        started with its events off (-D -1) and switched on through its
        control FIFO, whose "ack" says sampling runs (a fixed wait was not
        enough on a fresh CI machine: the start of a short workload was
        missed, and a process that only ran then lost its samples)
    perf script -F comm,tid,time,ip,sym,dso     -> PerfSample per sample
    perf report --stats                         -> lost samples
    perf report --stdio with our perf map       -> perf-report.txt
"""
from __future__ import annotations

import contextlib
import os
import re
import select
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import ProfileError, SetupError

EVENT = "cpu-clock"
SAMPLE_FREQ = 4000


def find_perf() -> str:
    path = shutil.which("perf")
    if path is None:
        raise SetupError("host perf not found", "no `perf` in PATH",
                         "apt-get install linux-perf")
    return path


@dataclass
class HostRecord:
    """A running ``perf record`` and the two ends of its control FIFOs."""
    proc: subprocess.Popen
    control_dir: Path
    ctl_fd: int
    ack_fd: int
    stderr: str | None = None       # once stopped


def start_record(pid: int, out: Path) -> HostRecord:
    """``perf record`` on process ``pid`` into ``out``, its events off
    until enable(); stop_record ends it.  The FIFOs live in
    ``out``'s directory and go with stop_record."""
    find_perf()
    control_dir = out.parent / ".perf-control"
    shutil.rmtree(control_dir, ignore_errors=True)
    control_dir.mkdir()
    ctl, ack = control_dir / "ctl", control_dir / "ack"
    os.mkfifo(ctl)
    os.mkfifo(ack)
    # Read-write opens of a FIFO never block: a perf that dies before
    # opening its ends cannot hang us.
    ctl_fd = os.open(ctl, os.O_RDWR)
    ack_fd = os.open(ack, os.O_RDWR | os.O_NONBLOCK)
    argv = ["perf", "record", "-e", EVENT, "-F", str(SAMPLE_FREQ), "-k",
            "mono", "--call-graph", "dwarf,8192", "-m", "1024", "-p",
            str(pid), "-o", str(out), "-q", "-D", "-1",
            "--control", f"fifo:{ctl},{ack}"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    return HostRecord(proc, control_dir, ctl_fd, ack_fd)


def enable(rec: HostRecord, timeout: float = 60.0) -> None:
    """Switch sampling on and return once perf acknowledges it."""
    os.write(rec.ctl_fd, b"enable\n")
    deadline, said = time.monotonic() + timeout, b""
    while b"ack\n" not in said:
        if rec.proc.poll() is not None:
            said_err = stop_record(rec).strip()[-200:]
            raise SetupError("host perf record failed",
                             f"perf record exited with {rec.proc.returncode}"
                             + (f": {said_err}" if said_err else ""),
                             "check perf_event_paranoid / run as root")
        if time.monotonic() > deadline:
            raise SetupError("host perf record failed",
                             f"no ack of `enable` within {timeout:g} s",
                             "see whether perf record runs by hand")
        ready, _, _ = select.select([rec.ack_fd], [], [], 0.05)
        if ready:
            said += os.read(rec.ack_fd, 64)


def stop_record(rec: HostRecord) -> str:
    """SIGINT, then wait; returns perf's stderr.  Removes the FIFOs.
    Stopping again returns the same."""
    if rec.stderr is not None:
        return rec.stderr
    perf = rec.proc
    if perf.poll() is None:
        perf.send_signal(signal.SIGINT)
    try:
        _, err = perf.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        perf.kill()
        _, err = perf.communicate()
    for fd in (rec.ctl_fd, rec.ack_fd):
        with contextlib.suppress(OSError):
            os.close(fd)
    shutil.rmtree(rec.control_dir, ignore_errors=True)
    rec.stderr = err or ""
    return rec.stderr


@dataclass
class Frame:
    ip: int
    sym: str
    dso: str


@dataclass
class PerfSample:
    comm: str
    tid: int
    time: float
    frames: list[Frame]


# perf script prints fields separated by blanks, and comm and sym may
# hold blanks themselves ("CPU 0/TCG", "operator new(unsigned long)").
# perf 6.1's script has no field separator (-F picks fields only; the
# -t/--field-separator of perf report does not exist here) and prints a
# callchain as one indented "ip sym+off (dso)" line per frame, so the
# lines are taken apart by their shape: the head line ends in
# "tid time:", a frame line in "(dso)".  A function the compiler inlined
# is a frame of its own, "(inlined)" in place of the dso, before the frame
# of the function it was inlined into, at the same ip: it is dropped, so
# that a frame is a function of the binary's symbol table (the one an
# address resolves to), whose dso is known.
HEAD_RE = re.compile(r"^\s*(?P<comm>.*?)\s+(?P<tid>\d+)\s+(?P<time>\d+\.\d+):"
                     r"\s+(?P<period>\d+)?")
FRAME_RE = re.compile(r"^\s+(?P<ip>[0-9a-f]+)\s+(?P<sym>.*?)\s+\((?P<dso>.*)\)$")


def parse_perf_script(text: str) -> list[PerfSample]:
    samples, cur = [], None
    for line in text.splitlines():
        if not line.strip():
            cur = None
            continue
        m = FRAME_RE.match(line) if cur is not None else None
        if m:
            if m["dso"] == "inlined":
                continue
            sym = re.sub(r"\+0x[0-9a-f]+$", "", m["sym"])
            cur.frames.append(Frame(int(m["ip"], 16), sym, m["dso"]))
            continue
        h = HEAD_RE.match(line)
        if h:
            cur = PerfSample(h["comm"], int(h["tid"]), float(h["time"]), [])
            samples.append(cur)
    return samples


def perf_script(perf_data: Path) -> list[PerfSample]:
    """The samples of ``perf_data``; a perf script failure is a
    ProfileError (one line: perf's last complaint)."""
    try:
        out = subprocess.run(["perf", "script", "-i", str(perf_data), "-F",
                              "comm,tid,time,ip,sym,dso"],
                             capture_output=True, text=True, check=True
                             ).stdout
    except subprocess.CalledProcessError as e:
        said = (e.stderr or "").strip().splitlines()
        raise ProfileError(f"reading the samples of {perf_data}",
                           f"perf script exited with {e.returncode}"
                           + (f": {said[-1]}" if said else ""),
                           f"run `perf script -i {perf_data}` to see why",
                           exc=e) from e
    return parse_perf_script(out)


def perf_lost(perf_data: Path) -> int:
    out = subprocess.run(["perf", "report", "--stats", "-i", str(perf_data)],
                         capture_output=True, text=True).stdout
    return parse_lost(out)


def parse_lost(stats: str) -> int:
    """Samples lost, from `perf report --stats`: the per-event sections'
    LOST_SAMPLES lines ("cpu-clock stats:" ...), which sum the samples
    the ring buffer dropped.  The "Aggregated stats" section's line of
    the same name counts records (one per event at the end), not
    samples."""
    lost, per_event = 0, False
    for line in stats.splitlines():
        if re.match(r"\S.* stats:$", line.strip()) and \
                not line.strip().startswith("Aggregated"):
            per_event = True
        m = re.match(r"\s*LOST_SAMPLES events:\s+(\d+)", line)
        if m and per_event:
            lost += int(m.group(1))
    return lost


def perf_report(perf_data: Path, qemu_pid: int, perf_map: str) -> str:
    """The host perf's own report of ``perf_data``, with ``perf_map`` as
    QEMU's /tmp/perf-PID.map while it runs (perf only reads it there),
    removed again afterwards."""
    tmp_map = Path(f"/tmp/perf-{qemu_pid}.map")
    try:
        tmp_map.write_text(perf_map)
        return subprocess.run(["perf", "report", "--stdio", "--no-children",
                               "--sort", "dso,sym", "-i", str(perf_data)],
                              capture_output=True, text=True).stdout
    finally:
        with contextlib.suppress(OSError):
            tmp_map.unlink()
