"""System-wide profile of QEMU and its guest: record, then resolve.

record:  boot the guest under plain TCG (the paravirtual PMU is not
         needed) with QEMU's ``-jitdump`` (``jit-<qemu pid>.dump`` in the
         output directory: QEMU writes it into its current directory, so
         QEMU starts there through ``env -C``) and the translation-time
         plugin ``qemu_plugin/pvperf-rmap.so`` (per TB its guest code
         bytes and the translating address space; the CR3 timeline with
         the guest task behind every address-space switch, named through
         offsets from the guest kernel's BTF, kernel_layout.py), and sample
         the QEMU process with the host's ``perf record -e cpu-clock -k
         mono --call-graph dwarf -p <qemu pid>`` (a software event:
         hardware events are not supported on these hosts).  The guest
         runs CMD under a small shell wrapper that waits for a ``go`` file
         in the share (created once perf runs), snapshots the maps and
         comm of every guest process (one busybox grep, 0.1 s after the
         start, then every second: processes living less than that have
         none), writes ``done`` when CMD exits and only then captures the
         module lines of /proc/kallsyms.  Samples outside [go, done] (host
         CLOCK_MONOTONIC) are dropped.
resolve: each sample's leaf IP: in QEMU's code cache (the anonymous
         executable mapping) -> the translation whose host code held it at
         the sample's time (rmap.py: jitdump joined with the plugin's
         records) -> guest code; anywhere else -> emulator symbol (QEMU,
         its libraries, the plugin, the host kernel).
         Process: the sample's host thread names its vCPU, the CR3
         timeline the address space (and guest process) that vCPU ran at
         the sample's time.  A user TB translated in another address
         space (TBs are PC-relative and shared through the physical page)
         is placed in the running process: at its own vaddr if that
         process has the same code there (same load address), else at the
         same file offset of the same ELF in that process's mappings, else
         where that process's executable mappings hold the TB's bytes at
         the same page offset.  Then guest kernel or user symbol, the user
         one from the running process's mappings, checked by code bytes.
         Accounting (seed 003's CPU switch vs domain switch): "guest"
         counts code-cache samples only; "guest+emulator" also gives each
         emulator sample to the guest function whose TB called it, found
         as the innermost code-cache frame of the sample's DWARF-unwound
         host stack (helpers and the softmmu slow paths are called from
         TBs; the main loop, I/O threads and the TB lookup between TBs are
         not, and stay "emulator").
What stays inexact: a sample maps to its TB's first instruction (the
jitdump has no per-instruction host ranges); kernel samples are given to
the process whose address space is live, which under lazy TLB is the last
user process even while a kernel thread runs; a process without a maps
snapshot (shorter than its first snapshot) keeps the translation-time
vaddr; with round-robin TCG and smp > 1 one host thread runs every vCPU,
so no sample names its vCPU and user code keeps its translation-time
vaddr; a TB whose code bytes occur twice at one page offset in a
process's mappings is placed at the first.
With ``perfmap=True`` QEMU also writes ``-perfmap`` (/tmp/perf-PID.map,
moved into the output directory when QEMU is gone) and the session's meta
compares it with the reverse map (``perfmap_comparison``).
The result is a versioned session file (``session.json``), which every
renderer in ``report.py`` reads.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from . import kernel_layout
from . import rmap as rmap_mod
from .errors import SetupError, VMError
from .symbols import GuestUserSymbols, HostSymbols, Mapping, kernel_symbols
from .vm import REPO_ROOT, VM, VMConfig, _qemu_escape

log = logging.getLogger("pvperf.profile")

RMAP_PLUGIN = REPO_ROOT / "qemu_plugin" / "pvperf-rmap.so"
SESSION_VERSION = 2
SESSION_FILE = "session.json"
RMAP_FILE = "rmap.bin"
QEMU_PERFMAP = "qemu-perf.map"
EVENT = "cpu-clock"
SAMPLE_FREQ = 4000
SPACES = ("emulator", "guest-kernel", "guest-user")
UNRESOLVED = "[code cache, unresolved]"
GUEST_WORKDIR = ".pvperf-profile"
SNAPSHOT_FIRST_S, SNAPSHOT_EVERY_S = 0.1, 1


# -- the VM with the reverse-map recorders ------------------------------------------

def guest_task_layout(image) -> kernel_layout.TaskLayout | None:
    """The plugin's task= offsets for the image's kernel, or None."""
    try:
        return kernel_layout.task_layout(image.vmlinux,
                                         image.system_map.read_text())
    except (OSError, kernel_layout.LayoutError) as e:
        log.warning("guest processes will be named by code bytes only: %s",
                    e)
        return None


def with_tb_size(argv: list[str], tb_size_mb: int) -> list[str]:
    """QEMU's argv with a code buffer of tb_size_mb MiB: ``-accel
    tcg,tb-size=N`` (QEMU refuses it together with -machine accel=)."""
    argv = list(argv)
    i = argv.index("-machine") + 1
    opts = argv[i].split(",")
    if "accel=tcg" not in opts:
        raise SetupError("setting the TCG code buffer size",
                         f"no accel=tcg in -machine {argv[i]}",
                         "update profile.with_tb_size for the launcher")
    opts.remove("accel=tcg")
    argv[i] = ",".join(opts)
    return argv + ["-accel", f"tcg,tb-size={tb_size_mb}"]


class ProfiledVM(VM):
    """A VM whose QEMU runs in ``outdir`` with -jitdump (and optionally
    -perfmap) and pvperf-rmap.so writing ``outdir/rmap.bin`` (``plugin``
    False: without it, for bench_rmap.py's jitdump-only figure)."""

    def __init__(self, config: VMConfig, outdir: Path,
                 task: kernel_layout.TaskLayout | None = None,
                 tb_size_mb: int | None = None, perfmap: bool = False,
                 plugin: bool = True, verbose: bool = False):
        super().__init__(config)
        self.outdir = outdir
        self.rmap_path = outdir / RMAP_FILE
        self.task = task
        self.tb_size_mb = tb_size_mb
        self.perfmap = perfmap
        self.plugin = plugin
        self.verbose = verbose          # the plugin's summary at exit
        self.pid: int | None = None

    def plugin_arg(self) -> str:
        if not RMAP_PLUGIN.exists():
            raise SetupError("reverse-map plugin not built",
                             f"{RMAP_PLUGIN} missing",
                             "run `make -C qemu_plugin pvperf-rmap.so`")
        opts = [str(RMAP_PLUGIN), f"out={_qemu_escape(str(self.rmap_path))}"]
        if self.task is not None:
            opts.append(f"task={self.task.plugin_option()}")
        if self.verbose:
            opts.append("verbose=on")
        return ",".join(opts)

    def qemu_argv(self) -> list[str]:
        argv = super().qemu_argv() + ["-jitdump"]
        if self.plugin:
            argv += ["-plugin", self.plugin_arg()]
        if self.perfmap:
            argv.append("-perfmap")
        if self.tb_size_mb:
            argv = with_tb_size(argv, self.tb_size_mb)
        # QEMU writes jit-PID.dump into its current directory; env execs
        # QEMU, which keeps env's pid.
        return ["env", "-C", str(self.outdir), *argv]

    async def start(self) -> None:
        try:
            await super().start()
        finally:
            if self.console is not None:
                self.pid = self.console.child.pid

    @property
    def qemu_pid(self) -> int:
        return self.pid

    @property
    def jitdump_path(self) -> Path:
        return self.outdir / f"jit-{self.pid}.dump"

    def keep_perfmap(self) -> Path | None:
        """Move QEMU's /tmp/perf-PID.map into outdir (QEMU is gone)."""
        if self.pid is None:
            return None
        src = Path(f"/tmp/perf-{self.pid}.map")
        if not src.exists():
            return None
        dst = self.outdir / QEMU_PERFMAP
        shutil.move(str(src), dst)
        return dst


def guest_wrapper(command: str, workdir: str) -> str:
    """The guest shell script that runs ``command`` between go and done,
    snapshotting every process's maps and comm (one grep per round:
    lines "/proc/PID/maps:..." and "/proc/PID/comm:NAME")."""
    d = shlex.quote(workdir)
    return (
        f"while [ ! -e {d}/go ]; do sleep 0.02; done; "
        f"( {command} ) & p=$!; "
        f"( sleep {SNAPSHOT_FIRST_S}; n=0; while [ -e /proc/$p/maps ]; do "
        f"n=$((n+1)); grep -H '' /proc/[0-9]*/comm /proc/[0-9]*/maps "
        f"> {d}/snap.tmp 2>/dev/null; mv {d}/snap.tmp {d}/snap.$n; "
        f"sleep {SNAPSHOT_EVERY_S}; done ) & "
        f"wait $p; rc=$?; touch {d}/done; "
        f"grep '\\]$' /proc/kallsyms > {d}/modsyms 2>/dev/null; "
        f"exit $rc")


@dataclass
class Recording:
    """What record() leaves for resolve()."""
    workdir: Path                   # host side of the guest's workdir
    perf_data: Path
    rmap_path: Path
    jitdump_path: Path
    perfmap_path: Path | None       # QEMU's -perfmap, if asked for
    qemu_pid: int
    qemu_maps: str
    window: tuple[float, float]     # host CLOCK_MONOTONIC seconds
    status: int
    command: str
    smp: int
    perf_stderr: str = ""


async def _wait_file(path: Path, vm: VM, timeout: float | None) -> None:
    deadline = None if timeout is None else time.monotonic() + timeout
    while not path.exists():
        if not vm.console.alive():
            raise VMError("profiled command", "QEMU exited before the "
                          "command finished", "see --console output")
        if deadline is not None and time.monotonic() > deadline:
            raise VMError("profiled command", f"not done within {timeout:g}"
                          " s", "raise --timeout")
        await asyncio.sleep(0.005)


def _start_perf(pid: int, out: Path) -> subprocess.Popen:
    if shutil.which("perf") is None:
        raise SetupError("host perf not found", "no `perf` in PATH",
                         "apt-get install linux-perf")
    argv = ["perf", "record", "-e", EVENT, "-F", str(SAMPLE_FREQ), "-k",
            "mono", "--call-graph", "dwarf,8192", "-m", "1024", "-p",
            str(pid), "-o", str(out), "-q"]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def _stop_perf(perf: subprocess.Popen) -> str:
    if perf.poll() is None:
        perf.send_signal(signal.SIGINT)
    try:
        _, err = perf.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        perf.kill()
        _, err = perf.communicate()
    return err or ""


async def record(config: VMConfig, outdir: Path, tb_size_mb: int | None = None,
                 perfmap: bool = False, stdout=None, stderr=None
                 ) -> Recording:
    """Boot, run config.command while sampling QEMU; keep the raw data."""
    stdout = stdout or sys.stdout.buffer
    stderr = stderr or sys.stderr.buffer
    share = config.share
    workdir = share / f"{GUEST_WORKDIR}-{os.getpid()}-{os.urandom(3).hex()}"
    workdir.mkdir()
    guest_dir = "/mnt/host/" + workdir.name
    command = config.command
    config.command = guest_wrapper(command, guest_dir)
    perf_data = outdir / "perf.data"
    perf, vm = None, ProfiledVM(config, outdir, guest_task_layout(config.image),
                                tb_size_mb, perfmap)
    try:
        async with vm:
            pumps = await vm.pump_output(stdout, stderr)
            await vm.wait_ready()
            pid = vm.qemu_pid
            qemu_maps = Path(f"/proc/{pid}/maps").read_text()
            perf = _start_perf(pid, perf_data)
            await asyncio.sleep(0.5)        # perf attaches to every thread
            if perf.poll() is not None:
                raise SetupError("host perf record failed",
                                 _stop_perf(perf).strip()[-200:],
                                 "check perf_event_paranoid / run as root")
            t_go = time.monotonic()
            (workdir / "go").touch()
            await _wait_file(workdir / "done", vm, config.timeout)
            t_done = time.monotonic()
            perf_err = _stop_perf(perf)
            perf = None
            status = await vm.wait_exit(60)
            await asyncio.wait(pumps, timeout=5)
    finally:
        config.command = command
        if perf is not None:
            _stop_perf(perf)
        perfmap_path = vm.keep_perfmap()
    return Recording(workdir=workdir, perf_data=perf_data,
                     rmap_path=vm.rmap_path, jitdump_path=vm.jitdump_path,
                     perfmap_path=perfmap_path, qemu_pid=pid,
                     qemu_maps=qemu_maps, window=(t_go, t_done),
                     status=status, command=command, smp=config.smp,
                     perf_stderr=perf_err)


# -- perf script -------------------------------------------------------------------

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
            sym = re.sub(r"\+0x[0-9a-f]+$", "", m["sym"])
            cur.frames.append(Frame(int(m["ip"], 16), sym, m["dso"]))
            continue
        h = HEAD_RE.match(line)
        if h:
            cur = PerfSample(h["comm"], int(h["tid"]), float(h["time"]), [])
            samples.append(cur)
    return samples


def perf_script(perf_data: Path) -> list[PerfSample]:
    out = subprocess.run(["perf", "script", "-i", str(perf_data), "-F",
                          "comm,tid,time,ip,sym,dso"],
                         capture_output=True, text=True, check=True).stdout
    return parse_perf_script(out)


def perf_lost(perf_data: Path) -> int:
    out = subprocess.run(["perf", "report", "--stats", "-i", str(perf_data)],
                         capture_output=True, text=True).stdout
    lost = 0
    for line in out.splitlines():
        m = re.match(r"\s*LOST_SAMPLES events:\s+(\d+)", line)
        if m:
            lost += int(m.group(1))
    return lost


def code_cache_ranges(qemu_maps: str) -> list[tuple[int, int]]:
    """Anonymous executable mappings of QEMU: the TCG code cache."""
    out = []
    for line in qemu_maps.splitlines():
        parts = line.split()
        if len(parts) >= 5 and "x" in parts[1] and len(parts) == 5:
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            out.append((lo, hi))
    return out


# -- guest processes ------------------------------------------------------------

SNAP_RE = re.compile(r"^/proc/(\d+)/(maps|comm):(.*)$")


def parse_snapshots(texts: list[str]) -> tuple[dict, dict]:
    """pid -> [Mapping] (the union over snapshots) and pid -> comm, from
    the wrapper's grep -H lines."""
    maps: dict[int, set] = {}
    comms: dict[int, str] = {}
    for text in texts:
        for line in text.splitlines():
            m = SNAP_RE.match(line)
            if not m:
                continue
            pid = int(m.group(1))
            if m.group(2) == "comm":
                comms[pid] = m.group(3).strip()
            else:
                maps.setdefault(pid, set()).update(
                    Mapping.parse_maps(m.group(3)))
    return ({pid: sorted(ms, key=lambda x: x.start)
             for pid, ms in maps.items()}, comms)


# -- resolve -----------------------------------------------------------------------

@dataclass
class Placement:
    """Where the process that ran a TB had its code."""
    guestpc: int            # the TB's first instruction in that process
    pid: int | None
    comm: str
    how: str                # see Resolver.place


@dataclass
class Resolver:
    rmap: rmap_mod.ReverseMap
    kernel: object                     # symbols.SymbolTable
    user: GuestUserSymbols
    host: HostSymbols
    code_cache: list[tuple[int, int]]
    comms: dict[int, str] = field(default_factory=dict)
    _symbol_cache: dict = field(default_factory=dict)
    _place_cache: dict = field(default_factory=dict)

    def in_code_cache(self, frame: Frame) -> bool:
        if frame.dso.startswith("/tmp/perf-") or frame.dso == "//anon":
            return True
        return any(lo <= frame.ip < hi for lo, hi in self.code_cache)

    def process(self, space: rmap_mod.Cr3Event | None
                ) -> tuple[int | None, str]:
        if space is None or space.tgid is None:
            return None, ""
        return space.tgid, space.comm or self.comms.get(space.tgid, "")

    def place(self, tr: rmap_mod.Translation,
              space: rmap_mod.Cr3Event | None) -> Placement:
        """The running process's address of a TB.  ``how``:
        translated      kernel TB, or no timeline: the translation's vaddr
        same-space      run in the address space that translated it
        same-vaddr      the running process has the same bytes there
        relocated       moved by the page-offset-preserving delta to the
                        running process's copy (same file offset, or its
                        bytes at the same page offset)
        unplaced        the running process is unknown (no name, no maps
                        snapshot) or has no such code: translation vaddr
        """
        pid, comm = self.process(space)
        key = (id(tr), space.cr3 if space else None, pid)
        if key not in self._place_cache:
            pc, how = self._place(tr, space, pid)
            self._place_cache[key] = Placement(pc, pid, comm, how)
        return self._place_cache[key]

    def _place(self, tr, space, pid) -> tuple[int, str]:
        if tr.kernel or space is None:
            return tr.guestpc, "translated"
        if space.cr3 == self.rmap.spaces.translation_cr3(tr):
            return tr.guestpc, "same-space"
        if pid is None or tr.code is None:
            return tr.guestpc, "unplaced"
        if self.user.has_code(pid, tr.guestpc, tr.code):
            return tr.guestpc, "same-vaddr"
        moved = self.user.relocate(tr.guestpc, tr.code, pid)
        return (moved, "relocated") if moved is not None else \
            (tr.guestpc, "unplaced")

    def guest(self, hostpc: int, time_ns: int, tid: int) -> dict | None:
        tr = self.rmap.hostpc_to_translation(hostpc, time_ns)
        if tr is None:
            return None
        p = self.place(tr, self.rmap.spaces.sample_space(tid, time_ns))
        key = (id(tr), p.guestpc, p.pid)
        if key not in self._symbol_cache:
            self._symbol_cache[key] = self._guest_symbol(tr, p.guestpc,
                                                         p.pid)
        out = dict(self._symbol_cache[key])
        out.update(guestpc=p.guestpc, tb_guestpc=p.guestpc,
                   translated_guestpc=tr.guestpc, placement=p.how,
                   pid=p.pid, comm=p.comm, precise=False,
                   tb=(tr.host_start, tr.time_ns))
        return out

    def _guest_symbol(self, tr, guestpc: int, pid: int | None) -> dict:
        if tr.kernel:
            sym = self.kernel.lookup(guestpc)
            name = sym.name if sym else f"[guest kernel {guestpc:#x}]"
            dso = sym.dso if sym else "[kernel]"
            return {"space": "guest-kernel", "symbol": name, "dso": dso,
                    "sym_start": sym.start if sym else guestpc}
        found = self.user.guestpc_to_symbol(guestpc, tr.code or b"", pid)
        if found is None:
            return {"space": "guest-user", "symbol":
                    f"[guest user {guestpc:#x}]", "dso": "?",
                    "sym_start": guestpc}
        sym, img = found
        return {"space": "guest-user", "symbol": sym.name,
                "dso": str(img.path), "sym_start": sym.start}

    def host_name(self, frame: Frame) -> str:
        if frame.dso == "[kernel.kallsyms]":
            return f"[host kernel] {frame.sym}"
        if frame.dso.startswith("/"):
            return self.host.dso_offset_to_name(frame.dso, frame.ip)
        return frame.sym if frame.sym != "[unknown]" else \
            f"{frame.dso}!{frame.ip:#x}"


GUEST_FIELDS = ("guestpc", "tb_guestpc", "translated_guestpc", "placement",
                "pid", "comm", "precise", "tb")


def resolve_sample(r: Resolver, s: PerfSample) -> dict:
    time_ns = int(round(s.time * 1e9))
    leaf = s.frames[0] if s.frames else Frame(0, "[unknown]", "[unknown]")
    out = {"tid": s.tid, "thread": s.comm, "time": s.time,
           "hostpc": leaf.ip, "generation": r.rmap.generation_at(time_ns),
           "code_cache": False, "resolved": False, "behalf": None}
    host_stack = []
    for depth, frame in enumerate(s.frames):
        if r.in_code_cache(frame):
            g = r.guest(frame.ip, time_ns, s.tid)
            if depth == 0:
                out["code_cache"] = True
                out["resolved"] = g is not None
                if g is None:
                    out.update(space="emulator", symbol=UNRESOLVED,
                               dso="[code cache]")
                else:
                    out.update(space=g["space"], symbol=g["symbol"],
                               dso=g["dso"],
                               **{k: g[k] for k in GUEST_FIELDS})
            elif g is not None:
                out["behalf"] = {"space": g["space"], "symbol": g["symbol"],
                                 "pid": g["pid"]}
            host_stack.append("[code cache]")
            break
        name = r.host_name(frame)
        host_stack.append(name)
        if depth == 0:
            out.update(space="emulator", symbol=name, dso=frame.dso,
                       dso_offset=frame.ip)
    # folded order: outermost first
    out["host_stack"] = list(reversed(host_stack))
    return out


def build_resolver(rec: Recording, image, modsyms: str, share: Path,
                   snapshots: list[str], extra_elves: list[Path]
                   ) -> Resolver:
    maps, comms = parse_snapshots(snapshots)
    return Resolver(
        rmap=rmap_mod.read(rec.jitdump_path, rec.rmap_path),
        kernel=kernel_symbols(image.system_map.read_text(), modsyms),
        user=GuestUserSymbols(image.root, share, maps, extra_elves),
        host=HostSymbols(), code_cache=code_cache_ranges(rec.qemu_maps),
        comms=comms)


def command_elves(command: str, share: Path, image_root: Path) -> list[Path]:
    """Host paths of the command's own program (share or image root)."""
    try:
        argv0 = shlex.split(command)[0]
    except (ValueError, IndexError):
        return []
    out = []
    for base in (share, image_root, image_root / "bin", image_root / "usr/bin"):
        p = (base / argv0.lstrip("/")) if not argv0.startswith("./") \
            else share / argv0[2:]
        if p.is_file():
            out.append(p)
    return out


def rmap_meta(r: Resolver, samples: list[dict], window_ns) -> dict:
    """How the reverse map did: its inputs and the samples' placements."""
    m, spaces = r.rmap, r.rmap.spaces
    events = spaces.events()
    return {"rmap_translations": m.n_loads,
            "rmap_unmatched": m.n_unmatched,
            "rmap_generations": m.generations,
            "rmap_flushes_in_window": sum(window_ns[0] <= t <= window_ns[1]
                                          for t in m.flushes_ns),
            "rmap_truncated": m.truncated,
            "rmap_vcpu_tids": {str(k): v for k, v in
                               spaces.vcpu_tids.items()},
            "cr3_writes": len(events),
            "cr3_writes_named": sum(e.tgid is not None for e in events),
            "placements": dict(Counter(s["placement"] for s in samples
                                       if s.get("resolved")))}


def resolve(rec: Recording, image, share: Path) -> dict:
    """Turn a Recording into the session dict (see SESSION_VERSION)."""
    wd = rec.workdir
    modsyms = (wd / "modsyms").read_text() if (wd / "modsyms").exists() else ""
    snapshots = [p.read_text() for p in sorted(wd.glob("snap.[0-9]*"))]
    resolver = build_resolver(rec, image, modsyms, share, snapshots,
                              command_elves(rec.command, share, image.root))
    t0, t1 = rec.window
    raw = [s for s in perf_script(rec.perf_data) if t0 <= s.time <= t1]
    samples = [resolve_sample(resolver, s) for s in raw]
    meta = {"event": EVENT, "frequency_hz": SAMPLE_FREQ,
            "duration_s": t1 - t0, "samples": len(samples),
            "lost_samples": perf_lost(rec.perf_data),
            "vcpus": rec.smp, "target": f"qemu-system-x86_64 pid "
            f"{rec.qemu_pid}", "command": rec.command,
            "exit_status": rec.status, "qemu_pid": rec.qemu_pid,
            "maps_snapshots": len(snapshots),
            **rmap_meta(resolver, samples, (int(t0 * 1e9), int(t1 * 1e9)))}
    if rec.perfmap_path is not None:
        meta["perfmap_comparison"] = compare_perfmap(
            resolver, rec.perfmap_path, samples)
    return {"version": SESSION_VERSION, "meta": meta, "samples": samples,
            "processes": process_table(resolver),
            "hot_guest_code": hot_guest_code(resolver, samples),
            "translations": perf_map_entries(resolver)}


def process_table(r: Resolver) -> dict:
    """pid -> comm and executable mappings [start, end, offset, path] of
    every guest process a snapshot saw (JSON keys are strings)."""
    return {str(pid): {"comm": r.comms.get(pid, ""),
                       "maps": [[m.start, m.end, m.offset, m.path]
                                for m in maps]}
            for pid, maps in r.user.by_pid.items() if pid is not None}


def hot_guest_code(r: Resolver, samples: list[dict], top: int = 3) -> list:
    """The guest code bytes of the hottest guest functions' TBs (at their
    running address), with the samples of each, for the capstone
    annotation."""
    per_sym = Counter((s["space"], s["symbol"]) for s in samples
                      if s.get("resolved"))
    by_tb = {(t.host_start, t.time_ns): t for t in r.rmap.translations()}
    out = []
    for (space, symbol), n in per_sym.most_common(top):
        tbs = Counter((s["tb_guestpc"], tuple(s["tb"])) for s in samples
                      if s.get("resolved") and s["symbol"] == symbol)
        blocks = {}
        for (guestpc, tb), k in tbs.items():
            tr = by_tb[tb]
            if tr.code is None:
                continue
            b = blocks.setdefault(guestpc, {"guestpc": guestpc,
                                            "code": tr.code.hex(),
                                            "samples": 0})
            b["samples"] += k
        out.append({"space": space, "symbol": symbol, "samples": n,
                    "blocks": sorted(blocks.values(),
                                     key=lambda b: b["guestpc"])})
    return out


def perf_map_entries(r: Resolver) -> list[list]:
    """[host_start, size, name] per translation; where generations reuse
    host addresses, the latest translation wins (a perf map has no notion
    of time).  Names use the translation-time vaddr."""
    latest = {}
    for tr in r.rmap.translations():
        if tr.host_start not in latest or \
                latest[tr.host_start].time_ns < tr.time_ns:
            latest[tr.host_start] = tr
    out = []
    for start in sorted(latest):
        tr = latest[start]
        g = r._guest_symbol(tr, tr.guestpc, None)
        out.append([start, tr.host_end - start,
                    f"{g['space']}:{g['symbol']}"])
    return out


# -- QEMU's -perfmap, for comparison -----------------------------------------------

def compare_perfmap(r: Resolver, perfmap_path: Path, samples: list[dict]
                    ) -> dict:
    """Code-cache samples resolved by QEMU's timeless -perfmap, against
    the reverse map's resolution of the same samples.

    perfmap lookup, as perf does it for a perf-PID.map: the line with the
    greatest start at or below the sample's address, if the address is
    inside it; for a start written more than once, the last line.  Its
    name ``guest-0x<vaddr>`` is symbolized like the reverse map's
    translation-time vaddr (no code bytes: user vaddrs in any snapshot's
    mapping or a static executable, unchecked)."""
    pm = rmap_mod.PerfMap.read(perfmap_path)
    cc = [s for s in samples if s["code_cache"]]
    resolved = named = agree = 0
    for s in cc:
        vaddr = pm.hostpc_to_guestpc(s["hostpc"])
        if vaddr is None:
            continue
        resolved += 1
        sym = perfmap_symbol(r, vaddr)
        named += sym is not None
        agree += sym is not None and s.get("resolved") and \
            sym == (s["space"], s["symbol"])
    ours_named = sum(1 for s in cc if s.get("resolved")
                     and not s["symbol"].startswith("[guest"))
    n = len(cc) or 1
    return {"code_cache_samples": len(cc), "perfmap_lines": len(pm),
            "perfmap_resolved": round(resolved / n, 4),
            "perfmap_guest_function": round(named / n, 4),
            "perfmap_agrees_with_rmap": round(agree / n, 4),
            "rmap_resolved": round(sum(1 for s in cc if s.get("resolved"))
                                   / n, 4),
            "rmap_guest_function": round(ours_named / n, 4)}


def perfmap_symbol(r: Resolver, vaddr: int) -> tuple[str, str] | None:
    if vaddr >= rmap_mod.KERNEL_HALF:
        sym = r.kernel.lookup(vaddr)
        return ("guest-kernel", sym.name) if sym else None
    found = r.user.guestpc_to_symbol(vaddr, b"", None)
    return ("guest-user", found[0].name) if found else None


def write_session(session: dict, outdir: Path) -> Path:
    path = outdir / SESSION_FILE
    path.write_text(json.dumps(session))
    return path


def load_session(path: Path) -> dict:
    session = json.loads(Path(path).read_text())
    if session.get("version") != SESSION_VERSION:
        raise VMError("reading the profile session", f"version "
                      f"{session.get('version')} in {path}",
                      f"re-record with this pvperf (session v"
                      f"{SESSION_VERSION})")
    return session


def cleanup_workdir(rec: Recording) -> None:
    with contextlib.suppress(OSError):
        shutil.rmtree(rec.workdir)
