"""Python mirror of contracts/pvperf_proto.h (plugin <-> service).

One SOCK_SEQPACKET connection per vCPU.  The plugin sends one
``HcallMessage`` per hypercall, carrying that vCPU's raw counters exact at the
marker store, and waits for one reply.  tests/contracts/test_plugin_protocol.py
checks this file against the header.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from .. import abi

HCALL_MAGIC = 0x51505650
REPLY_MAGIC = 0x52505650
OVERFLOW_MAGIC = 0x4F505650

CTR_INSN_KERNEL = 0
CTR_INSN_USER = 1
CTR_BRANCH_KERNEL = 2
CTR_BRANCH_USER = 3
NR_INLINE_COUNTERS = 4      # counted by generated code; samplable

# Model counters (PVPERF_M_*), each a (kernel, user) pair: ctr_model().
M_I1_MISS = 0
M_LL_IMISS = 1
M_D1_READ = 2
M_D1_READ_MISS = 3
M_LL_READ_MISS = 4
M_D1_WRITE = 5
M_D1_WRITE_MISS = 6
M_LL_WRITE_MISS = 7
M_COND = 8
M_COND_MISS = 9
M_IND = 10
M_IND_MISS = 11
M_DTLB_READ_MISS = 12
M_DTLB_WRITE_MISS = 13
M_ITLB_MISS = 14
M_STALL = 15                # timing model: penalty cycles
# The emulator's own work (qemu_plugin/pvperf/emu.c).
M_TB_TRANSLATED = 16        # blocks translated
M_TB_FLUSH = 17             # code-cache flushes
M_DEVICE = 18               # MMIO and port I/O accesses
M_HOST_NS = 19              # the vCPU thread's host CPU time, ns
NR_MODEL_COUNTERS = 20
NR_COUNTERS = NR_INLINE_COUNTERS + 2 * NR_MODEL_COUNTERS


def ctr_model(m: int, mode: int) -> int:
    """The raw counter index of model counter m in mode (abi.MODE_*)."""
    return NR_INLINE_COUNTERS + 2 * m + mode

REPLY_COUNTING = 1 << 0
REPLY_SAMPLING = 1 << 1
REPLY_REGS = 1 << 2        # some sampling event needs every register
REPLY_BRANCHES = 1 << 3    # some open event counts branches
REPLY_FRAME = 1 << 4       # some sampling event needs only sp and bp
REPLY_CACHE = 1 << 5       # some open event needs the cache model
REPLY_BPRED = 1 << 6       # some open event needs the branch predictor
REPLY_MODELS_LIVE = 1 << 7     # this vCPU runs an event counting models
REPLY_MODELS_COLD = 1 << 8     # a session of model events starts
REPLY_TLB = 1 << 9         # some open event needs the TLB models
REPLY_DEVICE = 1 << 10     # some open event counts device accesses
REPLY_HOST_TIME = 1 << 11  # some sampling event is on host CPU time
REPLY_KNOWN = (1 << 12) - 1
# On a SYNC overflow's answer only: ring your doorbell (pvperf_proto.h).
REPLY_RING = 1 << 12
# Slot / overflow flag: the vCPU waits for the answer (callchain events).
SYNC = 1 << 0
# Slot: capture registers at the overflow; overflow message: regs valid.
REGS = 1 << 1
# Overflow message: the plugin delivered the sample itself (its ring);
# record written, ring full (lost counted), interrupt raised after it.
WRITTEN = 1 << 2
LOST = 1 << 3
RANG = 1 << 4
DELIVER_BUFFERED = 1 << 0   # struct pvperf_proto_deliver flags
RING_NOTIFIED = 1 << 0      # struct pvperf_proto_ring flags
IRQ_RETRY_US = 50000        # an unanswered interrupt is raised again
MAX_SLOTS = 8
DISARMED = (1 << 64) - 1

TIMEOUT_MS = 5000

HCALL_MSG = struct.Struct("<IIQQ%dQ" % NR_COUNTERS)
SLOT = struct.Struct("<QQQIBBH")
REPLY_HEAD = struct.Struct("<IIII")
RING = struct.Struct("<QIIIIII")
DELIVER = struct.Struct("<QQII")
REPLY_MSG_SIZE = REPLY_HEAD.size + MAX_SLOTS * (SLOT.size + DELIVER.size) \
    + RING.size
OVERFLOW_MSG = struct.Struct(f"<IIIHHQQQQ{abi.NR_REGS}Q")
assert HCALL_MSG.size == 376
assert SLOT.size == 32
assert RING.size == 32
assert DELIVER.size == 24
assert REPLY_MSG_SIZE == 496
assert OVERFLOW_MSG.size == 48 + 8 * abi.NR_REGS

# Checkpoints: the plugin's state file (struct pvperf_state_*).
STATE_MAGIC = 0x53505650
STATE_VERSION = 3       # 3: 32 register slots (abi.NR_REGS)
STATE_HEADER = struct.Struct("<IIIIII")
STATE_HELD = struct.Struct(f"<QQQQQHBBI{abi.NR_REGS}Q")
STATE_VCPU_HEAD = struct.Struct(f"<{NR_COUNTERS}QQIIII")
STATE_VCPU_SIZE = (STATE_VCPU_HEAD.size + MAX_SLOTS * SLOT.size
                   + MAX_SLOTS * STATE_HELD.size)
assert STATE_HEADER.size == 24
assert STATE_HELD.size == 48 + 8 * abi.NR_REGS
assert STATE_VCPU_SIZE == 2040 + MAX_SLOTS * 8 * (abi.NR_REGS - 16)


class ProtocolError(ValueError):
    """A malformed message from the plugin."""


@dataclass(frozen=True)
class HcallMessage:
    vcpu: int
    block_gpa: int
    insn_vaddr: int
    counters: tuple[int, ...]

    @classmethod
    def unpack(cls, raw: bytes) -> "HcallMessage":
        if len(raw) != HCALL_MSG.size:
            raise ProtocolError(f"hypercall message of {len(raw)} bytes, "
                                f"expected {HCALL_MSG.size}")
        f = HCALL_MSG.unpack(raw)
        if f[0] != HCALL_MAGIC:
            raise ProtocolError(f"bad magic {f[0]:#x}")
        return cls(vcpu=f[1], block_gpa=f[2], insn_vaddr=f[3],
                   counters=tuple(f[4:]))

    def pack(self) -> bytes:
        return HCALL_MSG.pack(HCALL_MAGIC, self.vcpu, self.block_gpa,
                              self.insn_vaddr, *self.counters)


@dataclass(frozen=True)
class Slot:
    """One threshold to arm on a vCPU (struct pvperf_proto_slot)."""
    threshold: int
    period: int
    event_id: int
    ctr_mask: int
    rand_bits: int = 0
    flags: int = 0          # SYNC
    # What its records carry when the plugin writes them (struct
    # pvperf_proto_deliver; replies only, never in a state file).
    event_gpa: int = 0
    sample_period: int = 0
    deliver_flags: int = 0  # DELIVER_BUFFERED

    def pack(self) -> bytes:
        return SLOT.pack(self.threshold, self.period, self.ctr_mask,
                         self.event_id, self.rand_bits, self.flags, 0)

    def pack_deliver(self) -> bytes:
        return DELIVER.pack(self.event_gpa, self.sample_period,
                            self.deliver_flags, 0)


@dataclass(frozen=True)
class Ring:
    """A vCPU's sample ring handed to the plugin (struct pvperf_proto_ring)."""
    gpa: int
    capacity: int
    watermark: int
    head: int
    lost: int
    notified: int | None

    def pack(self) -> bytes:
        return RING.pack(self.gpa, self.capacity, self.watermark, self.head,
                         self.lost, self.notified or 0,
                         0 if self.notified is None else RING_NOTIFIED)


@dataclass(frozen=True)
class OverflowMessage:
    """The plugin saw an armed threshold reached at instruction ``ip``."""
    vcpu: int
    event_id: int
    mode: int
    ip: int
    threshold: int
    next_threshold: int
    flags: int = 0          # SYNC: the plugin waits for an answer;
                            # REGS: regs holds the state before ip ran
    regs: tuple[int, ...] = (0,) * abi.NR_REGS
    data_addr: int = 0      # model events: the data access's address

    @classmethod
    def unpack(cls, raw: bytes) -> "OverflowMessage":
        if len(raw) != OVERFLOW_MSG.size:
            raise ProtocolError(f"overflow message of {len(raw)} bytes")
        f = OVERFLOW_MSG.unpack(raw)
        if f[0] != OVERFLOW_MAGIC:
            raise ProtocolError(f"bad magic {f[0]:#x}")
        magic, vcpu, event_id, mode, flags, ip, threshold, nxt, addr = f[:9]
        return cls(vcpu, event_id, mode, ip, threshold, nxt, flags,
                   tuple(f[9:]), addr)

    def pack(self) -> bytes:
        return OVERFLOW_MSG.pack(OVERFLOW_MAGIC, self.vcpu, self.event_id,
                                 self.mode, self.flags, self.ip,
                                 self.threshold, self.next_threshold,
                                 self.data_addr, *self.regs)


def unpack_message(raw: bytes):
    """An HcallMessage or an OverflowMessage, told apart by magic."""
    if len(raw) >= 4 and int.from_bytes(raw[:4], "little") == OVERFLOW_MAGIC:
        return OverflowMessage.unpack(raw)
    return HcallMessage.unpack(raw)


def pack_reply(flags: int, slots=(), ring: Ring | None = None) -> bytes:
    """A reply; ``ring``: the vCPU's ring, handed to the plugin."""
    slots = list(slots)
    if len(slots) > MAX_SLOTS:
        raise ValueError(f"{len(slots)} slots, at most {MAX_SLOTS}")
    free = MAX_SLOTS - len(slots)
    return b"".join([
        REPLY_HEAD.pack(REPLY_MAGIC, flags, len(slots), 0),
        *(s.pack() for s in slots), bytes(SLOT.size * free),
        ring.pack() if ring is not None else bytes(RING.size),
        *(s.pack_deliver() for s in slots), bytes(DELIVER.size * free)])


_DELIVER_AT = REPLY_HEAD.size + MAX_SLOTS * SLOT.size + RING.size


def unpack_reply(raw: bytes) -> tuple[int, list[Slot]]:
    """(flags, slots) of a reply (fake plugins and tests use it)."""
    magic, flags, n, _ = REPLY_HEAD.unpack_from(raw)
    if magic != REPLY_MAGIC or len(raw) != REPLY_MSG_SIZE or n > MAX_SLOTS:
        raise ProtocolError("bad reply")
    return flags, [_unpack_slot(raw, REPLY_HEAD.size + i * SLOT.size,
                                _DELIVER_AT + i * DELIVER.size)
                   for i in range(n)]


def unpack_reply_ring(raw: bytes) -> Ring | None:
    """The ring a reply hands over, if any (tests)."""
    gpa, cap, wm, head, lost, notified, fl = RING.unpack_from(
        raw, REPLY_HEAD.size + MAX_SLOTS * SLOT.size)
    return Ring(gpa, cap, wm, head, lost,
                notified if fl & RING_NOTIFIED else None) if gpa else None


def _unpack_slot(raw: bytes, offset: int, deliver_at: int | None = None
                 ) -> Slot:
    t, p, m, e, r, fl, _ = SLOT.unpack_from(raw, offset)
    gpa = period = dfl = 0
    if deliver_at is not None:
        gpa, period, dfl, _ = DELIVER.unpack_from(raw, deliver_at)
    return Slot(t, p, e, m, r, fl, gpa, period, dfl)


@dataclass(frozen=True)
class VcpuState:
    """One vCPU's record of a plugin state file (what pvperf shows and
    checks; the plugin restores the rest: held overflows, prng)."""
    counters: tuple[int, ...]
    reply_flags: int
    slots: tuple[Slot, ...]
    held_mask: int


def parse_plugin_state(raw: bytes, n_vcpus: int) -> tuple[int, list[VcpuState]]:
    """(reply flags, per-vCPU records) of a plugin state file, checked as
    the plugin checks it (qemu_plugin/pvperf/state.c); ProtocolError says why
    it cannot be restored."""
    if len(raw) < STATE_HEADER.size:
        raise ProtocolError("plugin state: too short")
    magic, version, n, vsize, flags, _ = STATE_HEADER.unpack_from(raw)
    if magic != STATE_MAGIC:
        raise ProtocolError("plugin state: bad magic")
    if version != STATE_VERSION:
        raise ProtocolError(f"plugin state: version {version}, this pvperf "
                            f"reads {STATE_VERSION}")
    if n != n_vcpus or vsize != STATE_VCPU_SIZE:
        raise ProtocolError(f"plugin state: {n} vCPUs of {vsize} bytes, "
                            f"expected {n_vcpus} of {STATE_VCPU_SIZE}")
    if len(raw) != STATE_HEADER.size + n * vsize:
        raise ProtocolError("plugin state: truncated or too long")
    if flags & ~REPLY_KNOWN:
        raise ProtocolError(f"plugin state: unknown flags {flags:#x}")
    return flags, [_vcpu_state(raw, STATE_HEADER.size + i * vsize)
                   for i in range(n)]


def _vcpu_state(raw: bytes, off: int) -> VcpuState:
    f = STATE_VCPU_HEAD.unpack_from(raw, off)
    counters, (_prng, flags, n_slots, held, _) = f[:NR_COUNTERS], \
        f[NR_COUNTERS:]
    if flags & ~REPLY_KNOWN or n_slots > MAX_SLOTS:
        raise ProtocolError("plugin state: bad vCPU flags or slot count")
    slots = [_unpack_slot(raw, off + STATE_VCPU_HEAD.size + i * SLOT.size)
             for i in range(n_slots)]
    for s in slots:
        if not s.ctr_mask or s.ctr_mask >> NR_COUNTERS or s.rand_bits > 31 \
                or s.flags & ~(SYNC | REGS):
            raise ProtocolError("plugin state: bad slot")
    n_inline = sum(1 for s in slots if not s.ctr_mask >> NR_INLINE_COUNTERS)
    if held >> n_inline:
        raise ProtocolError("plugin state: held overflow without its slot")
    return VcpuState(tuple(counters), flags, tuple(slots), held)
