"""The binary-translation reverse map: code-cache address -> guest PC.

Reads the record file of ``qemu_plugin/pvperf-rmap.so`` (format defined
once in ``qemu_plugin/rmap_format.h``; the struct formats below mirror it
and tests/test_rmap.py compares them with the header).

Index spaces (named once, used in every name below):

  hostpc      a host virtual address in QEMU's TCG code cache
  guestpc     a guest virtual address of a guest instruction
  gpa         a guest physical address (offset into the guest RAM file)
  generation  how many code-cache flushes happened before; a hostpc
              means something only together with its generation, because
              a flush lets QEMU reuse every code-cache address
  vcpu        QEMU's cpu_index (version 2 records do not know it: None)

Markers.  The plugin gives every TB an inline op on its own counter slot,
and QEMU's x86-64 backend puts the slot's 64-bit address into the TB's host
code as the immediate of a ``movabs $slot,%reg``; the plugin finds these
immediates by scanning the code cache (at every flush, at exit and about
once a second while QEMU runs) and records each one's address, the
"marker address" (``Translation.hostpc``).  Every TB whose code is in the
cache is recorded, executed or not.

Host extent of a TB.  QEMU 7.2 starts a TB's host code on a 64-byte
boundary (tcg_tb_alloc aligns to the icache line) and the TB's marker op
is the first code after the few bytes of the icount/exit check (its imm64
measured ``TB_MARKER_OFFSET`` = 13 bytes in), so the TB starts at
``hostpc & ~63`` (``Translation.host_start``): samples in the prologue
bytes before the marker belong to the TB too.  It ends where the next
recorded TB of the same generation starts (address order), capped at
``MAX_TB_HOST``: QEMU allocates TBs from the code cache in increasing
address order per region, so the code, its out-of-line slow paths and the
next TB's header lie in between.  TBs without a marker (QEMU's one-insn
I/O TBs, CF_MEMI_ONLY, get no exec ops) are not recorded; a sample in one
falls into the extent of the TB before it.

Guest PC inside a TB.  With the plugin's ``hooks=first`` (the default and
cheapest) a sample maps to the TB; its guest PC is the TB's first
instruction, which is precise for symbols because a TB rarely crosses a
function boundary (any branch or call ends it).  With ``hooks=last`` a
sample at or past the last instruction's marker op maps to the last
instruction; with ``hooks=all`` every instruction has its own host range,
from its marker op (the movabs, ``MARKER_IMM_OFFSET`` = 2 bytes before
its marker address) to the next one's.
"""
from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass, field
from pathlib import Path

MAGIC = b"PVRMAP\0\0"
VERSION = 2
REC_TB, REC_INSN, REC_FLUSH = 1, 2, 3
HOOK_LAST, HOOK_ALL = 0x1, 0x2
TB_KERNEL, TB_GPA_VALID = 0x1, 0x2
NO_GPA = (1 << 64) - 1
VCPU_UNKNOWN = (1 << 32) - 1

FILE_HEADER = struct.Struct("<8sIIIIQ")       # rmap_file_header
REC_HEADER = struct.Struct("<HHIQ")           # rmap_rec_header
TB_BODY = struct.Struct("<QQQIIII")           # rmap_tb
INSN_BODY = struct.Struct("<QQII")            # rmap_insn
FLUSH_BODY = struct.Struct("<Q")              # rmap_flush
assert FILE_HEADER.size == 32 and REC_HEADER.size == 16
assert TB_BODY.size == 40 and INSN_BODY.size == 24 and FLUSH_BODY.size == 8

TB_HOST_ALIGN = 64
TB_MARKER_OFFSET = 13       # a TB's marker address - its host code start
MARKER_IMM_OFFSET = 2       # REX.W, B8+r, then the imm64
MAX_TB_HOST = 32 * 1024
KERNEL_HALF = 0xFFFF800000000000


class RmapFormatError(ValueError):
    """The record file is not a pvperf-rmap file of a known version."""


@dataclass
class Translation:
    """One TB: where its host code is and which guest code it translates."""
    generation: int
    hostpc: int                      # marker address (imm64 in TB code)
    guestpc: int
    gpa: int | None
    vcpu: int | None                 # None: unknown (version 2)
    kernel: bool
    insn_sizes: list[int]
    code: bytes
    insn_hostpc: dict[int, int] = field(default_factory=dict)
    host_end: int = 0                # set by ReverseMap.finish()

    @property
    def host_start(self) -> int:
        return self.hostpc & ~(TB_HOST_ALIGN - 1)

    @property
    def insn_guestpcs(self) -> list[int]:
        pcs, pc = [], self.guestpc
        for size in self.insn_sizes:
            pcs.append(pc)
            pc += size
        return pcs

    @property
    def guest_end(self) -> int:
        return self.guestpc + len(self.code)

    def insn_host_start(self, index: int) -> int | None:
        """Where instruction ``index``'s marker op starts (hooks), if
        recorded; instruction 0's host code starts at the TB's."""
        if index == 0:
            return self.host_start
        marker = self.insn_hostpc.get(index)
        return None if marker is None else marker - MARKER_IMM_OFFSET

    def hostpc_to_insn_index(self, hostpc: int) -> int:
        """Index of the instruction whose host code holds ``hostpc``: the
        last marked instruction whose marker op starts at or before it
        (instruction 0 without a marker of its own)."""
        best, best_start = 0, self.host_start
        for index in self.insn_hostpc:
            start = self.insn_host_start(index)
            if best_start < start <= hostpc:
                best, best_start = index, start
        return best

    def hostpc_to_guestpc(self, hostpc: int) -> int:
        return self.insn_guestpcs[self.hostpc_to_insn_index(hostpc)]


@dataclass
class Resolution:
    translation: Translation
    guestpc: int
    precise: bool       # per-instruction (hooks) or only the TB's start


class ReverseMap:
    """All translations of one run, indexed by generation and host start."""

    def __init__(self, hooks: int = 0, n_vcpus: int = 1):
        self.hooks = hooks
        self.n_vcpus = n_vcpus
        self.flush_times_ns: dict[int, int] = {}     # generation -> time
        self._by_gen: dict[int, list[Translation]] = {}
        self._starts: dict[int, list[int]] = {}
        self._pending_insn: list[tuple[int, int, int, int]] = []
        self.truncated = False

    # -- building ------------------------------------------------------------

    def add(self, tr: Translation) -> None:
        self._by_gen.setdefault(tr.generation, []).append(tr)

    def add_insn_hostpc(self, generation: int, tb_hostpc: int, index: int,
                        hostpc: int) -> None:
        self._pending_insn.append((generation, tb_hostpc, index, hostpc))

    def add_flush(self, generation: int, monotonic_ns: int) -> None:
        self.flush_times_ns[generation] = monotonic_ns

    def finish(self) -> "ReverseMap":
        """Sort each generation by host start and set host extents."""
        by_key = {}
        for gen, trs in self._by_gen.items():
            trs.sort(key=lambda t: t.host_start)
            self._starts[gen] = [t.host_start for t in trs]
            for cur, nxt in zip(trs, trs[1:] + [None]):
                end = cur.host_start + MAX_TB_HOST
                cur.host_end = min(end, nxt.host_start) if nxt else end
                by_key[(gen, cur.hostpc)] = cur
        for gen, tb_hostpc, index, hostpc in self._pending_insn:
            tr = by_key.get((gen, tb_hostpc))
            if tr is not None and 0 < index < len(tr.insn_sizes):
                tr.insn_hostpc[index] = hostpc
        self._pending_insn.clear()
        return self

    # -- queries -------------------------------------------------------------

    @property
    def generations(self) -> list[int]:
        return sorted(self._by_gen)

    def translations(self, generation: int | None = None):
        if generation is not None:
            return list(self._by_gen.get(generation, []))
        return [t for g in self.generations for t in self._by_gen[g]]

    def generation_at(self, monotonic_ns: int | None) -> int:
        """The generation live at a host CLOCK_MONOTONIC time."""
        gen = 0
        if monotonic_ns is None:
            return max(self._by_gen, default=0)
        for g, t in sorted(self.flush_times_ns.items()):
            if t <= monotonic_ns:
                gen = g
        return gen

    def hostpc_to_translation(self, hostpc: int, generation: int
                              ) -> Translation | None:
        starts = self._starts.get(generation)
        if not starts:
            return None
        i = bisect.bisect_right(starts, hostpc) - 1
        if i < 0:
            return None
        tr = self._by_gen[generation][i]
        return tr if hostpc < tr.host_end else None

    def hostpc_to_guestpc(self, hostpc: int, generation: int
                          ) -> Resolution | None:
        tr = self.hostpc_to_translation(hostpc, generation)
        if tr is None:
            return None
        precise = bool(self.hooks & HOOK_ALL) or len(tr.insn_sizes) == 1
        if self.hooks & HOOK_LAST and not precise:
            last = len(tr.insn_sizes) - 1
            start = tr.insn_host_start(last)
            precise = start is not None and hostpc >= start
        return Resolution(tr, tr.hostpc_to_guestpc(hostpc), precise)

    def host_ranges(self):
        """(host_start, host_end) of every translation, all generations."""
        return [(t.host_start, t.host_end) for t in self.translations()]


# -- reading -------------------------------------------------------------------

def _parse_tb(gen: int, body: bytes) -> Translation:
    hostpc, guestpc, gpa, n_insns, n_bytes, vcpu, flags = \
        TB_BODY.unpack_from(body)
    off = TB_BODY.size
    sizes = list(body[off:off + n_insns])
    code = bytes(body[off + n_insns:off + n_insns + n_bytes])
    return Translation(generation=gen, hostpc=hostpc, guestpc=guestpc,
                       gpa=gpa if flags & TB_GPA_VALID else None,
                       vcpu=None if vcpu == VCPU_UNKNOWN else vcpu,
                       kernel=bool(flags & TB_KERNEL), insn_sizes=sizes,
                       code=code)


def parse(data: bytes) -> ReverseMap:
    if len(data) < FILE_HEADER.size:
        raise RmapFormatError("rmap file shorter than its header")
    magic, version, hsize, hooks, n_vcpus, _ = FILE_HEADER.unpack_from(data)
    if magic != MAGIC or version != VERSION:
        raise RmapFormatError(f"not a pvperf-rmap v{VERSION} file "
                              f"(magic {magic!r}, version {version})")
    rmap = ReverseMap(hooks=hooks, n_vcpus=n_vcpus)
    off = hsize
    while off + REC_HEADER.size <= len(data):
        rtype, _, size, gen = REC_HEADER.unpack_from(data, off)
        if size < REC_HEADER.size or size % 8 or off + size > len(data):
            rmap.truncated = True
            break
        body = memoryview(data)[off + REC_HEADER.size:off + size]
        if rtype == REC_TB:
            rmap.add(_parse_tb(gen, body))
        elif rtype == REC_INSN:
            tb_hostpc, hostpc, index, _ = INSN_BODY.unpack_from(body)
            rmap.add_insn_hostpc(gen, tb_hostpc, index, hostpc)
        elif rtype == REC_FLUSH:
            rmap.add_flush(gen, FLUSH_BODY.unpack_from(body)[0])
        off += size
    if off != len(data) and not rmap.truncated:
        rmap.truncated = True
    return rmap.finish()


def read(path: str | Path) -> ReverseMap:
    return parse(Path(path).read_bytes())
