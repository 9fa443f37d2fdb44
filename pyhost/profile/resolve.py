"""System-wide profile of QEMU and its guest, step 2: resolve.

resolve: each sample's leaf IP: in QEMU's code cache (the anonymous
         executable mapping) -> the translation whose host code held it at
         the sample's time (rmap.py: jitdump joined with the plugin's
         records) -> guest code; anywhere else -> emulator symbol (QEMU,
         its libraries, the plugin, the host kernel).
         Process: the sample's host thread names its vCPU, the address-space
         timeline the address space (and guest process) that vCPU ran at
         the sample's time.  A user TB translated in another address
         space (TBs are PC-relative and shared through the physical page)
         is placed in the running process: at its own vaddr if that
         process has the same code there (same load address), else at the
         same file offset of the same ELF in that process's mappings, else
         where that process's executable mappings hold the TB's bytes at
         the same page offset.  Then guest kernel or user symbol, the user
         one from the running process's mappings, checked by code bytes.
         Accounting, in two views because the emulator's work for guest
         code can be charged to either (CPU switch vs domain switch): "guest"
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
With a QEMU ``-perfmap`` recorded, the session's meta compares it with
the reverse map (``perfmap_comparison``).  The result is the session dict
(session.py writes and reads it; report.py renders it).
"""
from __future__ import annotations

import re
import shlex
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from ..errors import ProfileError
from . import bt_table
from . import rmap as rmap_mod
from .hostperf import EVENT, SAMPLE_FREQ, Frame, PerfSample, perf_lost, \
    perf_script
from .procmaps import code_cache_ranges
from .record import Recording
from .session import SESSION_VERSION
from .symbols import GuestUserSymbols, HostSymbols, Mapping, kernel_symbols

UNRESOLVED = "[code cache, unresolved]"
# QEMU's prologue and epilogue (tcg_qemu_tb_exec's entry into translated
# code and its way back), which tcg_prologue_init writes at the head of
# the code buffer, before the first region's TBs: emulator code, not a
# translation.  QEMU's own -perfmap names it "tcg-prologue-buffer" (its
# jitdump does not).  pvperf takes it as the gap between the buffer's
# start and its first TB, if that gap is this small (0x100 on these
# hosts: the prologue, aligned to the region).
PROLOGUE = "[tcg prologue]"
PROLOGUE_MAX = 4096


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
    """A recording's samples -> guest code and functions (built by
    build_resolver; resolve() runs it over a whole recording).  Public:
    guest() for a code-cache address, guest_symbol() for a translation,
    place(), process() and host_name()."""
    rmap: rmap_mod.ReverseMap
    kernel: object                     # symbols.SymbolTable
    user: GuestUserSymbols
    host: HostSymbols
    code_cache: list[tuple[int, int]]
    comms: dict[int, str] = field(default_factory=dict)
    prologue: tuple[int, int] | None = None
    _symbol_cache: dict = field(default_factory=dict)
    _place_cache: dict = field(default_factory=dict)

    def in_prologue(self, hostpc: int) -> bool:
        return self.prologue is not None and \
            self.prologue[0] <= hostpc < self.prologue[1]

    def in_code_cache(self, frame: Frame) -> bool:
        if frame.dso.startswith("/tmp/perf-") or frame.dso == "//anon":
            return True
        return any(lo <= frame.ip < hi for lo, hi in self.code_cache)

    def process(self, space: rmap_mod.AspaceEvent | None
                ) -> tuple[int | None, str]:
        if space is None or space.tgid is None:
            return None, ""
        # The maps snapshots' comm first: the switch into a new program's
        # address space (exec_mmap) comes before exec renames the task,
        # so its record carries the old name (the shell's).
        return space.tgid, self.comms.get(space.tgid) or space.comm

    def place(self, tr: rmap_mod.Translation,
              space: rmap_mod.AspaceEvent | None) -> Placement:
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
        key = (id(tr), space.page_table_base if space else None, pid)
        if key not in self._place_cache:
            pc, how = self._place(tr, space, pid)
            self._place_cache[key] = Placement(pc, pid, comm, how)
        return self._place_cache[key]

    def _place(self, tr, space, pid) -> tuple[int, str]:
        if tr.kernel or space is None:
            return tr.guestpc, "translated"
        if space.page_table_base == self.rmap.spaces.translation_page_table(tr):
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
            self._symbol_cache[key] = self.guest_symbol(tr, p.guestpc,
                                                        p.pid)
        out = dict(self._symbol_cache[key])
        out.update(guestpc=p.guestpc, tb_guestpc=p.guestpc,
                   translated_guestpc=tr.guestpc, placement=p.how,
                   pid=p.pid, comm=p.comm, precise=False,
                   tb=(tr.host_start, tr.time_ns))
        return out

    def guest_symbol(self, tr: rmap_mod.Translation, guestpc: int,
                     pid: int | None) -> dict:
        """The guest function of translation ``tr`` at ``guestpc``, as
        process ``pid`` maps its code (None: unknown, or a kernel TB):
        the dict's space, symbol, dso, sym_start and named (False: no
        function symbol, named by address or DSO offset)."""
        if tr.kernel:
            sym = self.kernel.lookup(guestpc)
            name = sym.name if sym else f"[guest kernel {guestpc:#x}]"
            dso = sym.dso if sym else "[kernel]"
            return {"space": "guest-kernel", "symbol": name, "dso": dso,
                    "sym_start": sym.start if sym else guestpc,
                    "named": sym is not None}
        found = self.user.guestpc_to_symbol(guestpc, tr.code or b"", pid)
        if found is None:
            return self._guest_dso_offset(tr, guestpc, pid)
        sym, img = found
        return {"space": "guest-user", "symbol": sym.name,
                "dso": str(img.path), "sym_start": sym.start, "named": True}

    def _guest_dso_offset(self, tr, guestpc: int, pid: int | None) -> dict:
        """No function symbol: DSO+offset if the file is known (one row
        for every process that maps it), else the address."""
        at = self.user.dso_offset(guestpc, tr.code or b"", pid)
        if at is None:
            return {"space": "guest-user", "symbol":
                    f"[guest user {guestpc:#x}]", "dso": "?",
                    "sym_start": guestpc, "named": False}
        path, offset = at
        return {"space": "guest-user", "dso": path, "sym_start": guestpc,
                "symbol": f"{PurePosixPath(path).name}+{offset:#x}",
                "named": False}

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
        if r.in_prologue(frame.ip):
            if depth == 0:
                out.update(space="emulator", symbol=PROLOGUE,
                           dso="[code cache]")
            host_stack.append(PROLOGUE)
            break
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
    rmap = read_reverse_map(rec)
    code_cache = code_cache_ranges(rec.qemu_maps)
    return Resolver(
        rmap=rmap,
        kernel=kernel_symbols(image.system_map.read_text(), modsyms),
        user=GuestUserSymbols(image.root, share, maps, extra_elves,
                              rec.arch.plt_entry),
        host=HostSymbols(), code_cache=code_cache, comms=comms,
        prologue=tcg_prologue(code_cache, rmap.translations()))


def tcg_prologue(code_cache: list[tuple[int, int]], translations
                 ) -> tuple[int, int] | None:
    """[start, end) of QEMU's prologue: from the start of the code-cache
    mapping that holds the lowest TB up to that TB (PROLOGUE above)."""
    first = min((t.host_start for t in translations), default=None)
    if first is None:
        return None
    for lo, hi in code_cache:
        if lo <= first < hi and 0 < first - lo <= PROLOGUE_MAX:
            return lo, first
    return None


def read_reverse_map(rec: Recording) -> rmap_mod.ReverseMap:
    """The recording's jitdump joined with the plugin's records; a file
    that is missing or of another format is a ProfileError."""
    try:
        return rmap_mod.read(rec.jitdump_path, rec.rmap_path, rec.arch)
    except rmap_mod.RmapFormatError as e:
        raise ProfileError("reading the reverse map", str(e),
                           "rebuild the plugin (`make -C qemu_plugin`) so "
                           "that it writes the records pyhost reads, and "
                           "use a QEMU that writes jitdump v1", exc=e) from e
    except OSError as e:
        raise ProfileError("reading the reverse map",
                           f"{e.filename}: {e.strerror}",
                           "profile again; QEMU or the rmap plugin did not "
                           "write it", exc=e) from e


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
            "aspace_writes": len(events),
            "aspace_writes_named": sum(e.tgid is not None for e in events),
            "placements": dict(Counter(s["placement"] for s in samples
                                       if s.get("resolved"))),
            "tcg_prologue": list(r.prologue) if r.prologue else None,
            "samples_tcg_prologue": sum(s.get("symbol") == PROLOGUE
                                        for s in samples)}


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
            "vcpus": rec.smp, "arch": rec.arch.name,
            "target": f"{resolver.rmap.arch.qemu} pid "
            f"{rec.qemu_pid}", "command": rec.command,
            "exit_status": rec.status, "qemu_pid": rec.qemu_pid,
            "maps_snapshots": len(snapshots),
            **rmap_meta(resolver, samples, (int(t0 * 1e9), int(t1 * 1e9))),
            "unsymbolized": unsymbolized(resolver, samples)}
    if rec.perfmap_path is not None:
        meta["perfmap_comparison"] = compare_perfmap(
            resolver, rec.perfmap_path, samples)
    return {"version": SESSION_VERSION, "meta": meta, "samples": samples,
            "processes": process_table(resolver),
            "hot_guest_code": hot_guest_code(resolver, samples),
            "translation_table": bt_table.build(resolver, samples),
            "translations": perf_map_entries(resolver)}


def unsymbolized(r: Resolver, samples: list[dict]) -> list[dict]:
    """The emulator's files whose samples found no function symbol
    (named FILE!0x... or FILE!fn@0x...), with their samples and why."""
    counts = Counter(s["dso"] for s in samples
                     if s["space"] == "emulator" and "!" in s["symbol"]
                     and s["dso"].startswith("/"))
    return [{"dso": dso, "samples": n, "why": r.host.why_unnamed(dso)}
            for dso, n in counts.most_common()]


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
        g = r.guest_symbol(tr, tr.guestpc, None)
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
    if r.rmap.arch.is_kernel(vaddr):
        sym = r.kernel.lookup(vaddr)
        return ("guest-kernel", sym.name) if sym else None
    found = r.user.guestpc_to_symbol(vaddr, b"", None)
    return ("guest-user", found[0].name) if found else None


