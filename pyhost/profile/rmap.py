"""The binary-translation reverse map: code-cache address -> guest code,
and which guest address space a vCPU ran at a given time.

Two recordings of one QEMU run are joined here:

* QEMU's own jitdump (``qemu -jitdump`` writes
  ``jit-<qemu pid>.dump`` into its current directory; writer: QEMU 10.0
  tcg/perf.c; format: the Linux perf jitdump specification,
  tools/perf/Documentation/jitdump-specification.txt, structs in
  tools/perf/util/jitdump.h).  A file header, then records, each with a
  prefix (id, total_size, timestamp).  QEMU writes one JIT_CODE_LOAD (id 0)
  per translation block, from perf_report_code(), which tb_gen_code calls
  once the TB's host code is generated and before the TB is linked: pid,
  tid (the translating thread), vma = code_addr (host start), code_size
  (the host code up to the end of the last guest instruction,
  gen_insn_end_off[icount-1]: without the out-of-line slow paths that
  follow), code_index, then the NUL-terminated name ``guest-0x<vaddr>``
  (the TB's first guest instruction; for CF_PCREL TBs the page offset from
  the TB's insn_start data with the translation-time pc's page) and the
  host code bytes.  Before each load a JIT_CODE_DEBUG_INFO (id 2), whose
  entries carry guest source lines only where QEMU has debug info for the
  guest (linux-user); in system mode it only has the trailing entry and is
  skipped here.  Timestamps are QEMU's get_clock(): CLOCK_MONOTONIC (the
  header's flags have no JITDUMP_FLAGS_ARCH_TIMESTAMP), the clock of
  ``perf record -k mono``.
* The records of ``qemu_plugin/pvperf-rmap.so`` (format defined once in
  ``contracts/rmap_format.h``; the struct formats below mirror it and
  tests/unit/profile/test_rmap.py compares them with the header): per translation the
  guest instruction sizes and bytes, kernel/user, the translating vCPU's
  page-table base, its thread and time; code-cache flushes; each vCPU's
  host thread; and every guest write of the user page-table base (the
  address-space timeline: the register qemu_plugin/rmap/<arch>.c names);
  with its counts=on option, how many times each TB record ran.

Index spaces (named once, used in every name below):

  hostpc      a host virtual address in QEMU's TCG code cache
  guestpc     a guest virtual address of a guest instruction
  page_table_base  the guest physical address of the top-level page table
              of a user address space (the architecture's register
              without its tag bits: contracts/rmap_format.h)
  vcpu        QEMU's cpu_index
  tid         a host thread id (gettid); jitdump loads, plugin TB records
              and host perf samples all carry one
  tgid        a guest process id
  generation  how many code-cache flushes happened before; a hostpc means
              something only together with its generation, because a
              flush lets QEMU reuse every code-cache address

Matching a jitdump load with the plugin's TB record.  On one host thread
translation is serial: tb_gen_code runs the translator, which calls the
plugin's tb_trans (plugin_gen_tb_end), then generates host code and calls
perf_report_code, before that thread translates anything else.  A retried
translation (tb_gen_code's restarts for a too-large TB or a page-lock
conflict, or after a code-buffer overflow) calls tb_trans again, and the
last call is the one whose code is reported.  So a load of vaddr V at time
t on thread h pairs with h's last TB record at or before t, which must be
for V; both timestamps come from CLOCK_MONOTONIC on the same thread, so
their order is program order.  Limits: a TB record whose translation was
abandoned (a code-buffer overflow that forced a flush) pairs with nothing
and is ignored; if either file lost its tail (QEMU killed: both are
buffered), loads without a record, or pairing with the wrong vaddr, are
counted as unmatched and resolve to their vaddr without code bytes.

Host extent of a TB.  A load's [code_addr, code_addr + code_size) is
exact; the slow paths, the TB's search data, alignment and the next TB's
header follow it.  A TB's extent runs to the next TB's start of the same
generation (address order), capped at ``MAX_TB_HOST``, so samples in its
slow paths count for it: QEMU allocates TBs in increasing address order in
each code-buffer region until a flush resets them all.  Within a
generation two loads share a start only when tb_gen_code discarded its
work (another vCPU linked the same TB first) and rolled the allocation
back; the later load at or before a sample's time is the code that ran.
Samples in QEMU's prologue (tcg_qemu_tb_exec's entry and exit, at the
buffer's start) fall before the first TB: resolve.py names them
"[tcg prologue]", emulator code.

Guest PC inside a TB: the jitdump has host ranges per TB only, so a sample
maps to the TB's first instruction, which is precise for symbols because a
TB rarely crosses a function boundary (any branch or call ends it).

Address spaces.  System-mode TBs are PC-relative (QEMU's CF_PCREL, on
every architecture pvperf knows), so one TB serves
every process that maps its physical page, at any vaddr with the same page
offset; ``Translation.guestpc`` is where the translating process had it.
``AddressSpaces`` gives the page-table base (and, with the plugin's task=
option, the process) live on a vCPU at a time, from the plugin's
address-space records; a host
sample's tid names its vCPU through the plugin's vCPU records (MTTCG: one
thread per vCPU; with round-robin TCG every vCPU shares one thread, and
only smp 1 can be told).  resolve.py uses it to move a user TB's guestpc
into the address space that ran it.
"""
from __future__ import annotations

import bisect
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

from ..arch import Arch, host

# -- the plugin's records (contracts/rmap_format.h) ----------------------------

MAGIC = b"PVRMAP\0\0"
VERSION = 3
REC_TB, REC_FLUSH, REC_VCPU, REC_ASPACE, REC_COUNTS = 1, 2, 3, 4, 5
FILE_TASKS, FILE_COUNTS = 0x1, 0x2
TB_KERNEL, TB_BASE_VALID = 0x1, 0x2
NO_PID = (1 << 32) - 1
COMM_LEN = 16

FILE_HEADER = struct.Struct("<8sIIIIQ")       # rmap_file_header
REC_HEADER = struct.Struct("<HHIQ")           # rmap_rec_header
TB_BODY = struct.Struct("<QQIIII")            # rmap_tb
VCPU_BODY = struct.Struct("<II")              # rmap_vcpu
ASPACE_BODY = struct.Struct(f"<QQII{COMM_LEN}s")  # rmap_aspace
COUNTS_BODY = struct.Struct("<QII")           # rmap_counts
assert FILE_HEADER.size == 32 and REC_HEADER.size == 16
assert TB_BODY.size == 32 and VCPU_BODY.size == 8 and ASPACE_BODY.size == 40
assert COUNTS_BODY.size == 16

# -- QEMU's jitdump (tcg/perf.c; perf's jitdump.h) -------------------------------

JIT_MAGIC = 0x4A695444                          # "JiTD" little-endian
JIT_VERSION = 1
JIT_HEADER = struct.Struct("<IIIIIIQQ")         # magic version total_size
#                                                 elf_mach pad1 pid
#                                                 timestamp flags
JIT_PREFIX = struct.Struct("<IIQ")              # id total_size timestamp
JIT_CODE_LOAD_BODY = struct.Struct("<IIQQQQ")   # pid tid vma code_addr
#                                                 code_size code_index
JIT_CODE_LOAD = 0
JITDUMP_FLAGS_ARCH_TIMESTAMP = 1
GUEST_NAME_RE = re.compile(rb"guest-0x([0-9a-f]+)$")

MAX_TB_HOST = 64 * 1024     # QEMU caps a TB's host code at 64 KiB (unwind)


class RmapFormatError(ValueError):
    """A record file or jitdump is not of a known format or version."""


@dataclass(slots=True)
class TbRecord:
    """The plugin's view of one translation."""
    time_ns: int
    tid: int
    guestpc: int
    page_table_base: int | None
    kernel: bool
    insn_sizes: list[int]
    code: bytes
    executions: int | None = None   # counts=on: times it ran


@dataclass(slots=True)
class AspaceEvent:
    """A guest write of the page-table base: from ``time_ns`` on,
    ``vcpu`` runs the address space ``page_table_base``."""
    time_ns: int
    vcpu: int
    page_table_base: int
    tgid: int | None        # None: not named (no task=, or a borrowed mm)
    comm: str
    guestpc: int


@dataclass
class PluginRecords:
    tbs: list[TbRecord] = field(default_factory=list)
    flushes_ns: list[int] = field(default_factory=list)
    vcpu_tids: dict[int, int] = field(default_factory=dict)
    aspace_events: list[AspaceEvent] = field(default_factory=list)
    names_tasks: bool = False
    counts: bool = False        # the plugin counted TB executions
    max_vcpus: int = 1
    truncated: bool = False


@dataclass(slots=True)
class JitLoad:
    """One JIT_CODE_LOAD of QEMU's jitdump."""
    time_ns: int
    tid: int
    host_start: int
    host_size: int
    name: str
    guestpc: int | None     # from the name; None if not "guest-0x..."


@dataclass
class JitDump:
    pid: int
    loads: list[JitLoad]
    truncated: bool = False


@dataclass(slots=True)
class Translation:
    """One TB: its host code, when, and which guest code it translates."""
    host_start: int
    host_size: int           # exact code (jitdump code_size)
    time_ns: int             # jitdump timestamp: code exists from here on
    tid: int
    generation: int
    guestpc: int             # where the translating process had it
    kernel: bool
    insn_sizes: list[int] | None     # None: no matching plugin record
    code: bytes | None
    page_table_base: int | None   # the translating vCPU's address space
    host_end: int = 0        # extent; set by ReverseMap
    executions: int | None = None    # times it ran (plugin's counts=on)

    @property
    def matched(self) -> bool:
        return self.code is not None


# -- reading the plugin's records -------------------------------------------------

def _parse_tb(time_ns: int, body: bytes) -> TbRecord:
    guestpc, base, tid, n_insns, n_bytes, flags = TB_BODY.unpack_from(body)
    off = TB_BODY.size
    return TbRecord(time_ns=time_ns, tid=tid, guestpc=guestpc,
                    page_table_base=base if flags & TB_BASE_VALID else None,
                    kernel=bool(flags & TB_KERNEL),
                    insn_sizes=list(body[off:off + n_insns]),
                    code=bytes(body[off + n_insns:off + n_insns + n_bytes]))


def _parse_aspace(time_ns: int, body: bytes) -> AspaceEvent:
    base, guestpc, vcpu, tgid, comm = ASPACE_BODY.unpack_from(body)
    return AspaceEvent(time_ns=time_ns, vcpu=vcpu, page_table_base=base,
                    tgid=None if tgid == NO_PID else tgid,
                    comm=comm.rstrip(b"\0").decode("utf-8", "replace"),
                    guestpc=guestpc)


def parse_records(data: bytes) -> PluginRecords:
    if len(data) < FILE_HEADER.size:
        raise RmapFormatError("rmap file shorter than its header")
    magic, version, hsize, flags, max_vcpus, _ = FILE_HEADER.unpack_from(data)
    if magic != MAGIC or version != VERSION:
        raise RmapFormatError(f"not a pvperf-rmap v{VERSION} file "
                              f"(magic {magic!r}, version {version})")
    out = PluginRecords(names_tasks=bool(flags & FILE_TASKS),
                        counts=bool(flags & FILE_COUNTS),
                        max_vcpus=max_vcpus)
    counts: list[tuple[int, memoryview]] = []
    off = hsize
    while off + REC_HEADER.size <= len(data):
        rtype, _, size, time_ns = REC_HEADER.unpack_from(data, off)
        if size < REC_HEADER.size or size % 8 or off + size > len(data):
            break
        body = memoryview(data)[off + REC_HEADER.size:off + size]
        if rtype == REC_TB:
            out.tbs.append(_parse_tb(time_ns, body))
        elif rtype == REC_FLUSH:
            out.flushes_ns.append(time_ns)
        elif rtype == REC_VCPU:
            vcpu, tid = VCPU_BODY.unpack_from(body)
            out.vcpu_tids[vcpu] = tid
        elif rtype == REC_ASPACE:
            out.aspace_events.append(_parse_aspace(time_ns, body))
        elif rtype == REC_COUNTS:
            counts.append((COUNTS_BODY.unpack_from(body)[0], body))
        off += size
    out.truncated = off != len(data)
    for first, body in counts:
        _set_executions(out.tbs, first, body)
    out.flushes_ns.sort()
    return out


def _set_executions(tbs: list[TbRecord], first: int, body) -> None:
    """A COUNTS record's executions onto TB records first.. (file order)."""
    _, n, _ = COUNTS_BODY.unpack_from(body)
    n = min(n, max(0, len(tbs) - first),
            (len(body) - COUNTS_BODY.size) // 8)
    for i, c in enumerate(struct.unpack_from(f"<{n}Q", body,
                                             COUNTS_BODY.size)):
        tbs[first + i].executions = c


# -- reading the jitdump ---------------------------------------------------------

def _jit_load(time_ns: int, data: bytes, off: int, end: int) -> JitLoad:
    """The JIT_CODE_LOAD whose body is data[off:end]."""
    _, tid, _, code_addr, code_size, _ = \
        JIT_CODE_LOAD_BODY.unpack_from(data, off)
    start = off + JIT_CODE_LOAD_BODY.size
    nul = data.find(b"\0", start, end)
    raw = data[start:nul if nul >= 0 else end]
    m = GUEST_NAME_RE.match(raw)
    return JitLoad(time_ns=time_ns, tid=tid, host_start=code_addr,
                   host_size=code_size, name=raw.decode("utf-8", "replace"),
                   guestpc=int(m.group(1), 16) if m else None)


def parse_jitdump(data: bytes) -> JitDump:
    if len(data) < JIT_HEADER.size:
        raise RmapFormatError("jitdump shorter than its header")
    magic, version, total, _, _, pid, _, flags = JIT_HEADER.unpack_from(data)
    if magic != JIT_MAGIC or version != JIT_VERSION:
        raise RmapFormatError(f"not a little-endian jitdump v{JIT_VERSION} "
                              f"(magic {magic:#x}, version {version})")
    if flags & JITDUMP_FLAGS_ARCH_TIMESTAMP:
        raise RmapFormatError("jitdump uses the arch timestamp, not "
                              "CLOCK_MONOTONIC")
    loads, off = [], total
    while off + JIT_PREFIX.size <= len(data):
        rid, size, time_ns = JIT_PREFIX.unpack_from(data, off)
        if size < JIT_PREFIX.size or off + size > len(data):
            break
        if rid == JIT_CODE_LOAD:
            loads.append(_jit_load(time_ns, data, off + JIT_PREFIX.size,
                                   off + size))
        off += size
    return JitDump(pid=pid, loads=loads, truncated=off != len(data))


# -- the join -------------------------------------------------------------------

def records_by_tid(tbs: list[TbRecord]) -> dict[int, tuple[list, list]]:
    """tid -> (times, records), each in time order."""
    by_tid: dict[int, list[TbRecord]] = {}
    for r in tbs:
        by_tid.setdefault(r.tid, []).append(r)
    out = {}
    for tid, recs in by_tid.items():
        recs.sort(key=lambda r: r.time_ns)
        out[tid] = ([r.time_ns for r in recs], recs)
    return out


def match_record(load: JitLoad, by_tid) -> TbRecord | None:
    """The plugin record of ``load``: its thread's last TB record at or
    before it, if that is for the same vaddr (see the module docstring)."""
    times, recs = by_tid.get(load.tid, ((), ()))
    i = bisect.bisect_right(times, load.time_ns) - 1
    if i < 0 or recs[i].guestpc != load.guestpc:
        return None
    return recs[i]


class ReverseMap:
    """Every translation of one run, by generation and host start."""

    def __init__(self, jit: JitDump, records: PluginRecords,
                 arch: Arch | None = None):
        self.arch = arch or host()
        self.flushes_ns = records.flushes_ns
        self.truncated = jit.truncated or records.truncated
        self.spaces = AddressSpaces(records)
        self.n_loads = len(jit.loads)
        self.n_unmatched = 0
        self._by_gen: dict[int, list[Translation]] = {}
        self._starts: dict[int, list[int]] = {}
        self.counts = records.counts
        by_tid = records_by_tid(records.tbs)
        matched = set()
        for load in jit.loads:
            rec = match_record(load, by_tid)
            matched.add(id(rec))
            self._add(self._translation(load, rec))
        # guest instructions the plugin counted in TBs no load names
        self.unmatched_insns = sum(
            (r.executions or 0) * len(r.insn_sizes)
            for r in records.tbs if id(r) not in matched)
        self._index()

    def _translation(self, load: JitLoad, rec: TbRecord | None
                     ) -> Translation:
        self.n_unmatched += rec is None
        guestpc = load.guestpc if load.guestpc is not None else 0
        return Translation(
            host_start=load.host_start, host_size=load.host_size,
            time_ns=load.time_ns, tid=load.tid,
            generation=self.generation_at(load.time_ns), guestpc=guestpc,
            kernel=rec.kernel if rec else self.arch.is_kernel(guestpc),
            insn_sizes=rec.insn_sizes if rec else None,
            code=rec.code if rec else None,
            page_table_base=rec.page_table_base if rec else None,
            executions=rec.executions if rec else None)

    def _add(self, tr: Translation) -> None:
        self._by_gen.setdefault(tr.generation, []).append(tr)

    def _index(self) -> None:
        """Sort each generation by (host start, time); set extents."""
        for gen, trs in self._by_gen.items():
            trs.sort(key=lambda t: (t.host_start, t.time_ns))
            self._starts[gen] = [t.host_start for t in trs]
            ends = {}
            starts = sorted(set(self._starts[gen]))
            for cur, nxt in zip(starts, starts[1:] + [None]):
                cap = cur + MAX_TB_HOST
                ends[cur] = min(cap, nxt) if nxt is not None else cap
            for t in trs:
                t.host_end = max(ends[t.host_start],
                                 t.host_start + t.host_size)

    # -- queries -------------------------------------------------------------

    @property
    def generations(self) -> list[int]:
        return sorted(self._by_gen)

    def translations(self, generation: int | None = None):
        if generation is not None:
            return list(self._by_gen.get(generation, []))
        return [t for g in self.generations for t in self._by_gen[g]]

    def generation_at(self, time_ns: int) -> int:
        """The generation live at a host CLOCK_MONOTONIC time."""
        return bisect.bisect_right(self.flushes_ns, time_ns)

    def hostpc_to_translation(self, hostpc: int, time_ns: int
                              ) -> Translation | None:
        """The TB whose host code held ``hostpc`` at ``time_ns``."""
        gen = self.generation_at(time_ns)
        starts = self._starts.get(gen)
        if not starts:
            return None
        i = bisect.bisect_right(starts, hostpc) - 1
        if i < 0:
            return None
        start, trs = starts[i], self._by_gen[gen]
        while i >= 0 and starts[i] == start:
            tr = trs[i]
            if tr.time_ns <= time_ns:
                return tr if hostpc < tr.host_end else None
            i -= 1
        return None


class AddressSpaces:
    """Which address space (and guest process) each vCPU ran, over host
    time."""

    def __init__(self, records: PluginRecords):
        self.names_tasks = records.names_tasks
        self.vcpu_tids = dict(records.vcpu_tids)
        per_tid: dict[int, list[int]] = {}
        for vcpu, tid in self.vcpu_tids.items():
            per_tid.setdefault(tid, []).append(vcpu)
        # round-robin TCG runs every vCPU on one thread: not attributable
        self._tid_vcpu = {tid: v[0] for tid, v in per_tid.items()
                          if len(v) == 1}
        self._events: dict[int, list[AspaceEvent]] = {}
        for ev in sorted(records.aspace_events, key=lambda e: e.time_ns):
            self._events.setdefault(ev.vcpu, []).append(ev)
        self._times = {v: [e.time_ns for e in evs]
                       for v, evs in self._events.items()}

    @property
    def n_events(self) -> int:
        return sum(len(evs) for evs in self._events.values())

    def events(self, vcpu: int | None = None) -> list[AspaceEvent]:
        if vcpu is not None:
            return list(self._events.get(vcpu, []))
        return sorted((e for evs in self._events.values() for e in evs),
                      key=lambda e: e.time_ns)

    def tid_to_vcpu(self, tid: int) -> int | None:
        return self._tid_vcpu.get(tid)

    def at(self, vcpu: int | None, time_ns: int) -> AspaceEvent | None:
        """The last address-space switch on ``vcpu`` at or before
        ``time_ns``."""
        times = self._times.get(vcpu)
        if not times:
            return None
        i = bisect.bisect_right(times, time_ns) - 1
        return self._events[vcpu][i] if i >= 0 else None

    def sample_space(self, tid: int, time_ns: int) -> AspaceEvent | None:
        """The address space a host sample of thread ``tid`` ran."""
        return self.at(self.tid_to_vcpu(tid), time_ns)

    def translation_page_table(self, tr: Translation) -> int | None:
        """The translating vCPU's page-table base: recorded, or from the
        timeline."""
        if tr.page_table_base is not None:
            return tr.page_table_base
        ev = self.sample_space(tr.tid, tr.time_ns)
        return ev.page_table_base if ev else None


# -- QEMU's -perfmap (for comparison) -------------------------------------------

class PerfMap:
    """QEMU's ``-perfmap`` file (tcg/perf.c write_perfmap_entry): one line
    "HOSTPC SIZE NAME" (hex, hex) per guest instruction of every TB ever
    translated, named ``guest-0x<vaddr>``, in translation order, without
    time.  A lookup does what perf does with a perf-PID.map: the line with
    the greatest start at or below the address, if the address is inside
    it; a start written more than once keeps its last line."""

    def __init__(self, lines: list[tuple[int, int, int | None]]):
        by_start = {start: (size, vaddr) for start, size, vaddr in lines}
        self._starts = sorted(by_start)
        self._lines = [by_start[s] for s in self._starts]

    def __len__(self) -> int:
        return len(self._starts)

    @classmethod
    def parse(cls, text: str) -> "PerfMap":
        lines = []
        for line in text.splitlines():
            parts = line.split(None, 2)
            if len(parts) != 3:
                continue
            m = GUEST_NAME_RE.match(parts[2].encode())
            lines.append((int(parts[0], 16), int(parts[1], 16),
                          int(m.group(1), 16) if m else None))
        return cls(lines)

    @classmethod
    def read(cls, path: str | Path) -> "PerfMap":
        return cls.parse(Path(path).read_text())

    def hostpc_to_guestpc(self, hostpc: int) -> int | None:
        i = bisect.bisect_right(self._starts, hostpc) - 1
        if i < 0:
            return None
        size, vaddr = self._lines[i]
        return vaddr if hostpc < self._starts[i] + size else None


# -- entry points ---------------------------------------------------------------

def parse(jitdump: bytes, records: bytes, arch: Arch | None = None
          ) -> ReverseMap:
    return ReverseMap(parse_jitdump(jitdump), parse_records(records), arch)


def read_records(path: str | Path) -> PluginRecords:
    return parse_records(Path(path).read_bytes())


def read(jitdump_path: str | Path, records_path: str | Path,
         arch: Arch | None = None) -> ReverseMap:
    """The reverse map of one run of a guest of ``arch`` (default: the
    host's)."""
    return parse(Path(jitdump_path).read_bytes(),
                 Path(records_path).read_bytes(), arch)
