"""System-wide profile of QEMU and its guest: record, then resolve.

record:  boot the guest with ``qemu_plugin/pvperf-rmap.so`` loaded (plain
         TCG otherwise; the paravirtual PMU is not needed), and sample the
         QEMU process with the host's ``perf record -e cpu-clock -k mono
         --call-graph dwarf -p <qemu pid>`` (a software event: hardware
         events are not supported on these hosts).  The guest runs CMD
         under a small shell wrapper that waits for a ``go`` file in the
         share (created once perf runs), snapshots /proc/PID/maps of the
         command (0.1 s after its start, then every second: short commands
         may have none, static executables are then placed by their own
         addresses), writes ``done`` when CMD exits and only then captures
         the module lines of /proc/kallsyms.  Samples outside [go, done]
         (host CLOCK_MONOTONIC) are dropped.
resolve: each sample's leaf IP: in QEMU's code cache (the anonymous
         executable mapping; perf calls it ``/tmp/perf-PID.map``) ->
         reverse map at the generation live at the sample's time -> guest
         PC -> guest kernel or user symbol; anywhere else -> emulator
         symbol (QEMU, its libraries, the plugin, the host kernel).
         Accounting (seed 003's CPU switch vs domain switch): "guest"
         counts code-cache samples only; "guest+emulator" also gives each
         emulator sample to the guest function whose TB called it, found
         as the innermost code-cache frame of the sample's DWARF-unwound
         host stack (helpers and the softmmu slow paths are called from
         TBs; the main loop, I/O threads and the TB lookup between TBs are
         not, and stay "emulator").
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

from . import rmap as rmap_mod
from .errors import SetupError, VMError
from .symbols import GuestUserSymbols, HostSymbols, Mapping, kernel_symbols
from .vm import REPO_ROOT, VM, VMConfig, _qemu_escape

log = logging.getLogger("pvperf.profile")

RMAP_PLUGIN = REPO_ROOT / "qemu_plugin" / "pvperf-rmap.so"
SESSION_VERSION = 1
SESSION_FILE = "session.json"
EVENT = "cpu-clock"
SAMPLE_FREQ = 4000
SPACES = ("emulator", "guest-kernel", "guest-user")
UNRESOLVED = "[code cache, unresolved]"
GUEST_WORKDIR = ".pvperf-profile"


# -- the VM with the reverse-map plugin -------------------------------------------

class ProfiledVM(VM):
    """A VM that also loads pvperf-rmap.so, writing to ``rmap_path``."""

    def __init__(self, config: VMConfig, rmap_path: Path, hooks: str):
        super().__init__(config)
        self.rmap_path = rmap_path
        self.hooks = hooks

    def qemu_argv(self) -> list[str]:
        if not RMAP_PLUGIN.exists():
            raise SetupError("reverse-map plugin not built",
                             f"{RMAP_PLUGIN} missing",
                             "run `make -C qemu_plugin`")
        opts = [str(RMAP_PLUGIN), f"out={_qemu_escape(str(self.rmap_path))}",
                f"ram={_qemu_escape(str(self.ram_path))}",
                f"hooks={self.hooks}"]
        return super().qemu_argv() + ["-plugin", ",".join(opts)]

    @property
    def qemu_pid(self) -> int:
        return self.console.child.pid


def guest_wrapper(command: str, workdir: str) -> str:
    """The guest shell script that runs ``command`` between go and done."""
    d = shlex.quote(workdir)
    return (
        f"while [ ! -e {d}/go ]; do sleep 0.02; done; "
        f"( {command} ) & p=$!; "
        f"( sleep 0.1; while [ -e /proc/$p/maps ]; do "
        f"cat /proc/$p/maps > {d}/maps.tmp 2>/dev/null && "
        f"[ -s {d}/maps.tmp ] && mv {d}/maps.tmp {d}/maps.$p; sleep 1; "
        f"done ) & "
        f"wait $p; rc=$?; touch {d}/done; "
        f"grep '\\]$' /proc/kallsyms > {d}/modsyms 2>/dev/null; "
        f"exit $rc")


@dataclass
class Recording:
    """What record() leaves for resolve()."""
    workdir: Path                   # host side of the guest's workdir
    perf_data: Path
    rmap_path: Path
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


async def record(config: VMConfig, outdir: Path, hooks: str = "first",
                 stdout=None, stderr=None) -> Recording:
    """Boot, run config.command while sampling QEMU; keep the raw data."""
    stdout = stdout or sys.stdout.buffer
    stderr = stderr or sys.stderr.buffer
    share = config.share
    workdir = share / f"{GUEST_WORKDIR}-{os.getpid()}-{os.urandom(3).hex()}"
    workdir.mkdir()
    guest_dir = "/mnt/host/" + workdir.name
    command = config.command
    config.command = guest_wrapper(command, guest_dir)
    rmap_path, perf_data = outdir / "rmap.bin", outdir / "perf.data"
    perf = None
    try:
        async with ProfiledVM(config, rmap_path, hooks) as vm:
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
    return Recording(workdir=workdir, perf_data=perf_data,
                     rmap_path=rmap_path, qemu_pid=pid, qemu_maps=qemu_maps,
                     window=(t_go, t_done), status=status, command=command,
                     smp=config.smp, perf_stderr=perf_err)


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


# -- resolve -----------------------------------------------------------------------

@dataclass
class Resolver:
    rmap: rmap_mod.ReverseMap
    kernel: object                     # symbols.SymbolTable
    user: GuestUserSymbols
    host: HostSymbols
    code_cache: list[tuple[int, int]]
    _guest_cache: dict = field(default_factory=dict)

    def in_code_cache(self, frame: Frame) -> bool:
        if frame.dso.startswith("/tmp/perf-") or frame.dso == "//anon":
            return True
        return any(lo <= frame.ip < hi for lo, hi in self.code_cache)

    def guest(self, hostpc: int, generation: int) -> dict | None:
        res = self.rmap.hostpc_to_guestpc(hostpc, generation)
        if res is None:
            return None
        tr = res.translation
        key = (tr.generation, tr.hostpc, res.guestpc)
        if key not in self._guest_cache:
            self._guest_cache[key] = self._guest_symbol(tr, res.guestpc)
        out = dict(self._guest_cache[key])
        out.update(guestpc=res.guestpc, precise=res.precise,
                   tb_guestpc=tr.guestpc)
        return out

    def _guest_symbol(self, tr, guestpc: int) -> dict:
        if tr.kernel:
            sym = self.kernel.lookup(guestpc)
            name = sym.name if sym else f"[guest kernel {guestpc:#x}]"
            dso = sym.dso if sym else "[kernel]"
            return {"space": "guest-kernel", "symbol": name, "dso": dso,
                    "sym_start": sym.start if sym else guestpc}
        found = self.user.guestpc_to_symbol(tr.guestpc, tr.code)
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


def resolve_sample(r: Resolver, s: PerfSample) -> dict:
    gen = r.rmap.generation_at(int(s.time * 1e9))
    leaf = s.frames[0] if s.frames else Frame(0, "[unknown]", "[unknown]")
    out = {"tid": s.tid, "thread": s.comm, "time": s.time,
           "hostpc": leaf.ip, "generation": gen, "code_cache": False,
           "resolved": False, "behalf": None}
    host_stack = []
    for depth, frame in enumerate(s.frames):
        if r.in_code_cache(frame):
            g = r.guest(frame.ip, gen)
            if depth == 0:
                out["code_cache"] = True
                out["resolved"] = g is not None
                if g is None:
                    out.update(space="emulator", symbol=UNRESOLVED,
                               dso="[code cache]")
                else:
                    out.update(space=g["space"], symbol=g["symbol"],
                               dso=g["dso"], guestpc=g["guestpc"],
                               tb_guestpc=g["tb_guestpc"],
                               precise=g["precise"])
            elif g is not None:
                out["behalf"] = {"space": g["space"], "symbol": g["symbol"]}
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


def build_resolver(rec_rmap: Path, image, modsyms: str, share: Path,
                   maps_texts: list[str], extra_elves: list[Path],
                   qemu_maps: str) -> Resolver:
    mappings = [m for t in maps_texts for m in Mapping.parse_maps(t)]
    return Resolver(
        rmap=rmap_mod.read(rec_rmap),
        kernel=kernel_symbols(image.system_map.read_text(), modsyms),
        user=GuestUserSymbols(image.root, share, mappings, extra_elves),
        host=HostSymbols(), code_cache=code_cache_ranges(qemu_maps))


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


def resolve(rec: Recording, image, share: Path) -> dict:
    """Turn a Recording into the session dict (see SESSION_VERSION)."""
    wd = rec.workdir
    modsyms = (wd / "modsyms").read_text() if (wd / "modsyms").exists() else ""
    maps_texts = [p.read_text() for p in sorted(wd.glob("maps.[0-9]*"))]
    resolver = build_resolver(rec.rmap_path, image, modsyms, share, maps_texts,
                              command_elves(rec.command, share, image.root),
                              rec.qemu_maps)
    t0, t1 = rec.window
    raw = [s for s in perf_script(rec.perf_data) if t0 <= s.time <= t1]
    samples = [resolve_sample(resolver, s) for s in raw]
    hot_code = hot_guest_code(resolver, samples)
    return {
        "version": SESSION_VERSION,
        "meta": {"event": EVENT, "frequency_hz": SAMPLE_FREQ,
                 "duration_s": t1 - t0, "samples": len(samples),
                 "lost_samples": perf_lost(rec.perf_data),
                 "vcpus": rec.smp, "target": f"qemu-system-x86_64 pid "
                 f"{rec.qemu_pid}", "command": rec.command,
                 "exit_status": rec.status, "qemu_pid": rec.qemu_pid,
                 "rmap_hooks": resolver.rmap.hooks,
                 "rmap_translations": len(resolver.rmap.translations()),
                 "rmap_generations": resolver.rmap.generations,
                 "maps_snapshots": len(maps_texts)},
        "samples": samples,
        "hot_guest_code": hot_code,
        "translations": perf_map_entries(resolver),
    }


def hot_guest_code(r: Resolver, samples: list[dict], top: int = 3) -> list:
    """The guest code bytes of the hottest guest functions' TBs, with the
    samples of each TB, for the capstone annotation."""
    per_sym = Counter((s["space"], s["symbol"]) for s in samples
                      if s.get("resolved"))
    out = []
    for (space, symbol), n in per_sym.most_common(top):
        tbs = Counter(s["tb_guestpc"] for s in samples
                      if s.get("resolved") and s["symbol"] == symbol)
        blocks = {}
        for tr in r.rmap.translations():
            if tr.guestpc in tbs and tr.guestpc not in blocks:
                blocks[tr.guestpc] = {"guestpc": tr.guestpc,
                                      "code": tr.code.hex(),
                                      "samples": tbs[tr.guestpc]}
        out.append({"space": space, "symbol": symbol, "samples": n,
                    "blocks": sorted(blocks.values(),
                                     key=lambda b: b["guestpc"])})
    return out


def perf_map_entries(r: Resolver) -> list[list]:
    """[host_start, size, name] per translation; where generations reuse
    host addresses, the latest generation's translation wins (a perf map
    has no notion of time)."""
    latest = {}
    for tr in r.rmap.translations():
        latest[tr.host_start] = tr
    out = []
    for start in sorted(latest):
        tr = latest[start]
        g = r._guest_symbol(tr, tr.guestpc)
        out.append([start, tr.host_end - start,
                    f"{g['space']}:{g['symbol']}"])
    return out


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
