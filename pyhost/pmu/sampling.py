"""The host half of sampling: sample records into guest RAM, NMI requests.

Each vCPU registers one ring (SAMPLE_BUF: a struct pvperf_sample_buf
header followed by struct pvperf_sample records).  An overflow from the
plugin, already matched to its event by the PMU model, becomes here:

  1. guest_perf_event.overflows + 1 (the host is its only writer);
  2. one record in the overflowing vCPU's ring (when it is full, or the
     guest garbled ``tail``, or the vCPU has none: the ring's ``lost`` and
     the event's ``lost`` + 1, which the driver reports to perf as lost
     samples); record first, then ``head``;
  3. an interrupt request, through the ``Doorbell`` (doorbell.py: the
     vCPU's own MSI-X vector) or the ``NmiInjector`` (nmi.py: QMP
     inject-nmi, deterministic runs and --overflow-irq qmp), unless one is
     still outstanding (the guest has not consumed up to the head we
     notified, and not for NMI_RETRY_S).  Buffered events request one
     only when the ring holds ``watermark`` records.  A SYNC overflow
     (callchain events, and every few dozen overflows of a vCPU: the
     plugin's flow control) waits until QEMU has raised the NMI, the new
     one or the outstanding one.

With a doorbell the plugin holds (doorbell.py), steps 2 and 3 are the
plugin's (qemu_plugin/pvperf/ring.c): the service hands the vCPU's ring
over on each reply to that vCPU's hypercalls (``handover``: head, lost,
notified), the plugin writes the records and rings at the overflow, and
tells the service afterwards; ``account`` then mirrors what it did, so
the next handover, or the service's own writes (no ring handed over: a
restored checkpoint before its first hypercall), go on from there.

inject-nmi reaches every vCPU (the injector's ``broadcast``), so before
each such request every ring's ``nmis`` is incremented: each driver
claims exactly one NMI per increment and never sees "NMI for unknown
reason".  A doorbell vector reaches one vCPU, an ordinary interrupt the
driver always takes: nothing to count.

Every address comes from the guest: ring and record writes go through
GuestMemory's checks (GuestMemoryError), and nothing is re-read that a
decision was based on except ``tail``, which is range-checked.
"""
from __future__ import annotations

import errno
import logging
import time
from dataclasses import dataclass
from typing import Callable

from .. import abi
from . import plugin_protocol as proto
from .guestmem import GuestMemory
from .model import PmuError, PmuEvent

# An NMI not answered (ring tail not moved) within this long is re-sent;
# in deterministic runs, within this many overflows (host time would make
# the re-sends, and so the guest's NMI work, differ from run to run).
NMI_RETRY_S = proto.IRQ_RETRY_US / 1e6
NMI_RETRY_OVERFLOWS = 64
U32 = (1 << 32) - 1

log = logging.getLogger("pvperf.pmu")


@dataclass
class SampleRing:
    """The host's private view of one vCPU's struct pvperf_sample_buf."""
    gpa: int
    capacity: int          # records
    watermark: int         # records (buffered events)
    head: int = 0          # ours; never read back from the guest
    lost: int = 0
    notified: int | None = None    # head when we last asked for an NMI
    notified_at: float = 0.0


@dataclass
class SampleStats:
    samples: int = 0
    lost: int = 0
    stale: int = 0
    nmis: int = 0


# Seconds from a SYNC overflow's interrupt request until QEMU has raised
# it (what the waiting vCPU pays beyond its message to the service): the
# first RAISE_TIMES of a run, for the debug log and the bench.
RAISE_TIMES = 100000


def percentiles(seconds: list[float]) -> str:
    t = sorted(seconds)
    if not t:
        return "no SYNC interrupt"
    p50, p99 = (t[min(len(t) - 1, int(len(t) * q))] * 1e6 for q in (.5, .99))
    return f"{len(t)} SYNC raises, p50 {p50:.0f} us, p99 {p99:.0f} us"


class Sampler:
    """Per-vCPU sample rings in guest RAM and the NMIs that announce them.

    Not thread-safe on its own: PerfBackend calls it under its lock."""

    def __init__(self, memory: GuestMemory,
                 nmi: Callable[..., None] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 deterministic: bool = False):
        self.memory = memory
        self.nmi = nmi
        self.broadcast = getattr(nmi, "broadcast", True)
        self.clock = clock
        self.retry = NMI_RETRY_S
        if deterministic:
            self.clock = lambda: self.stats.samples
            self.retry = NMI_RETRY_OVERFLOWS
        self.rings: dict[int, SampleRing] = {}
        self.stats = SampleStats()
        self.raise_s: list[float] = []

    def set_buffer(self, vcpu: int, gpa: int, size: int,
                   watermark: int) -> None:
        """SAMPLE_BUF: register (gpa 0: unregister) ``vcpu``'s ring."""
        if gpa == 0:
            self.rings.pop(vcpu, None)
            return
        if size < abi.SAMPLE_BUF_MIN or size > abi.SAMPLE_BUF_MAX or \
                size & (size - 1):
            raise PmuError(errno.EINVAL, f"sample buffer size {size}")
        self.memory.check(gpa, size, align=4096)
        capacity = (size - abi.SAMPLE_BUF.size) // abi.SAMPLE.size
        if not 1 <= watermark <= capacity:
            raise PmuError(errno.EINVAL, f"watermark {watermark} not in "
                           f"1..{capacity}")
        self.memory.write(gpa, bytes(abi.SAMPLE_BUF.size), align=8)
        self.rings[vcpu] = SampleRing(gpa, capacity, watermark)
        # Where the guest put it (tests/vm/test_bigmem.py: beyond 4 GiB).
        log.debug("vcpu %d: sample ring at gpa %#x, %d bytes", vcpu, gpa,
                  size)

    def deliver(self, msg: proto.OverflowMessage, event: PmuEvent) -> None:
        """Steps 1-3 above for one overflow of ``event``."""
        self.stats.samples += 1
        self._bump_overflows(event)
        self._record(msg, event)

    # -- samples the plugin delivered itself (pvperf_proto.h, "Plugin-
    #    written samples") --------------------------------------------------

    def handover(self, vcpu: int) -> proto.Ring | None:
        """``vcpu``'s ring as the plugin must go on writing it (a reply
        to that vCPU's hypercall: every earlier message is accounted)."""
        ring = self.rings.get(vcpu)
        if ring is None:
            return None
        return proto.Ring(ring.gpa, ring.capacity, ring.watermark, ring.head,
                          ring.lost, ring.notified)

    def account(self, msg: proto.OverflowMessage,
                event: PmuEvent | None) -> None:
        """What the plugin did with one sample it delivered: mirror the
        ring's head, lost and notified (the next handover starts there)
        and count; guest_perf_event.overflows, which only the host writes
        and no driver reads in its interrupt, is bumped here, late."""
        ring = self.rings.get(msg.vcpu)
        self.stats.samples += 1
        if event is not None:
            self._bump_overflows(event)
        if msg.flags & proto.LOST:
            self.stats.lost += 1
            if ring is not None:
                ring.lost = (ring.lost + 1) & U32
        elif ring is not None:
            ring.head = (ring.head + 1) & U32
        if msg.flags & proto.RANG and ring is not None:
            ring.notified, ring.notified_at = ring.head, self.clock()
            self.stats.nmis += 1

    def _read_u32(self, gpa: int) -> int:
        return int.from_bytes(self.memory.read(gpa, 4, align=4), "little")

    def _write_u32(self, gpa: int, value: int) -> None:
        self.memory.write(gpa, (value & U32).to_bytes(4, "little"), align=4)

    def _bump(self, event: PmuEvent, offset: int) -> None:
        gpa = event.guest_event_gpa + offset
        self._write_u32(gpa, self._read_u32(gpa) + 1)

    def _bump_overflows(self, event: PmuEvent) -> None:
        self._bump(event, abi.GUEST_EVENT_OFFSET_OVERFLOWS)

    def _lose(self, event: PmuEvent) -> None:
        self.stats.lost += 1
        self._bump(event, abi.GUEST_EVENT_OFFSET_LOST)

    def _record(self, msg: proto.OverflowMessage, event: PmuEvent) -> None:
        ring = self.rings.get(msg.vcpu)
        if ring is None:
            self._lose(event)
            return
        tail = self._read_u32(ring.gpa + abi.SAMPLE_BUF_OFFSET_TAIL)
        used = (ring.head - tail) & U32
        if used >= ring.capacity:      # full, or a tail the guest garbled
            ring.lost += 1
            self._lose(event)
            self._write_u32(ring.gpa + abi.SAMPLE_BUF_OFFSET_LOST, ring.lost)
        else:
            self._write_record(ring, msg, event)
            used += 1
        if event.buffered and used < ring.watermark:
            return
        # A SYNC overflow (callchain events, PmuEvent.callchain) waits for
        # its answer: raise the NMI before giving it (see service).
        self._maybe_nmi(ring, tail, msg.vcpu,
                        wait=bool(msg.flags & proto.SYNC))

    def _write_record(self, ring: SampleRing, msg: proto.OverflowMessage,
                      event: PmuEvent) -> None:
        slot = ring.gpa + abi.SAMPLE_BUF.size + \
            (ring.head % ring.capacity) * abi.SAMPLE.size
        has_regs = bool(msg.flags & proto.REGS)
        self.memory.write(slot, abi.SAMPLE.pack(
            event.event_id, msg.mode, abi.SAMPLE_REGS if has_regs else 0,
            msg.ip, msg.data_addr, event.spec.scale(event.period),
            *(msg.regs if has_regs else (0,) * abi.NR_REGS)), align=8)
        # Record first, then head: the guest reads head, then records.
        ring.head = (ring.head + 1) & U32
        self._write_u32(ring.gpa + abi.SAMPLE_BUF_OFFSET_HEAD, ring.head)

    def _maybe_nmi(self, ring: SampleRing, tail: int, vcpu: int,
                   wait: bool = False) -> None:
        now = self.clock()
        if ring.notified is not None and \
                0 < (ring.notified - tail) & U32 <= ring.capacity and \
                now - ring.notified_at < self.retry:
            # The last NMI has not been answered yet.  A SYNC overflow
            # (the plugin's flow control sends one every few dozen) waits
            # until it is raised at least: the vCPU then takes it before
            # it can overflow the ring.
            if wait and self.nmi is not None:
                self.nmi(wait=True, inject=False, vcpu=vcpu)
            return
        ring.notified, ring.notified_at = ring.head, now
        self.stats.nmis += 1
        # inject-nmi reaches every vCPU: tell each ring's driver one more
        # NMI is ours, before it can arrive (the driver claims one each).
        for r in self.rings.values() if self.broadcast else ():
            gpa = r.gpa + abi.SAMPLE_BUF_OFFSET_NMIS
            self._write_u32(gpa, self._read_u32(gpa) + 1)
        if self.nmi is not None:
            t0 = time.perf_counter()
            self.nmi(wait=wait, vcpu=vcpu)
            if wait and len(self.raise_s) < RAISE_TIMES:
                self.raise_s.append(time.perf_counter() - t0)

    def raise_summary(self) -> str:
        return percentiles(self.raise_s)

    def rering(self) -> None:
        """Raise the interrupt of every ring that holds records (a
        checkpoint restored: an interrupt raised but not yet taken when
        the VM was saved may not have travelled with it)."""
        for vcpu, ring in self.rings.items():
            tail = self._read_u32(ring.gpa + abi.SAMPLE_BUF_OFFSET_TAIL)
            if ring.head != tail and self.nmi is not None:
                self.nmi(vcpu=vcpu)
