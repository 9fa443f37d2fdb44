"""The paravirtual perf backend: serves the guest driver's hypercalls.

The guest is untrusted.  For every hypercall this module reads the guest's
structures once into private copies (``abi.*.unpack``), validates every
field with its own errno, acts on the PMU model, and writes back only to
the hypercall block's ``ret`` and to the guest_perf_event the guest
registered at OPEN.  Log lines a guest can trigger are rate-limited per vCPU.

Operations (see guest_kernel_patch/README.md for the table):
  PROBE              ret = ABI version
  OPEN    args[0]    gpa of pvperf_guest_perf_param -> 0 / -errno
  ENABLE  args[0]    event id -> 0 / -errno
  DISABLE args[0]    event id -> 0, guest_perf_event.count synced
  READ    args[0]    event id -> 0, guest_perf_event.count synced
  CLOSE   args[0]    event id -> 0 / -errno
  PMU_DISABLE / PMU_ENABLE   freeze / thaw every event of the calling vCPU
  SET_PERIOD  args   event id, period -> 0 / -errno (countdown restarts)
  SAMPLE_BUF  args   gpa, size, watermark -> 0 / -errno (this vCPU's ring)
  EVENTS      args   gpa, size -> length of the event list written there
                     (the driver's sysfs events/: the table but its
                     hardware-cache names), -ENOSPC if it does not fit

Samples (``overflow``) arrive from the plugin between hypercalls: the PMU
model matches each to its event, and the Sampler (sampling.py, the host
half of sampling) writes the record and requests the NMI, or, for a
sample the plugin delivered itself (a ring handed over: ``ring_for``),
accounts for it.

Log levels: what a well-behaved guest does routinely is DEBUG (perf
probing events the host does not count gets -ENOENT, its documented
fallback); anything else a guest gets refused is a WARNING.  Both are
rate-limited per vCPU.
"""
from __future__ import annotations

import errno
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from .. import abi
from . import plugin_protocol as proto
from .guestmem import GuestMemory, GuestMemoryError
from .events import ACCOUNTING_CPU, sysfs_listing
from .model import Pmu, PmuError, PmuEvent
from .sampling import Sampler

log = logging.getLogger("pvperf.hypercall")


class RateLimiter:
    """At most ``burst`` messages per ``interval`` seconds per key."""

    def __init__(self, burst: int = 10, interval: float = 5.0,
                 clock: Callable[[], float] = time.monotonic):
        self.burst, self.interval, self.clock = burst, interval, clock
        self._window: dict[int, tuple[float, int]] = {}
        self.suppressed = 0

    def allow(self, key: int) -> bool:
        now = self.clock()
        start, n = self._window.get(key, (now, 0))
        if now - start >= self.interval:
            start, n = now, 0
        self._window[key] = (start, n + 1)
        if n < self.burst:
            return True
        self.suppressed += 1
        return False


@dataclass
class BackendStats:
    calls: int = 0
    errors: int = 0
    by_op: dict[str, int] = field(default_factory=dict)


class PerfBackend:
    """Validates and executes hypercalls against a Pmu and guest memory."""

    def __init__(self, memory: GuestMemory, pmu: Pmu | None = None,
                 max_vcpus: int = 64, limiter: RateLimiter | None = None,
                 nmi: Callable[..., None] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 deterministic: bool = False, timing: bool = False,
                 accounting: str = ACCOUNTING_CPU,
                 kernel_half_start: int = abi.X86_64_KERNEL_HALF_START):
        self.memory = memory
        # The guest architecture's kernel half (Arch.kernel_half_start):
        # a marker store below it ran in user mode.
        self.kernel_half_start = kernel_half_start
        # Without a Pmu given, one follows from the run's two settings.
        self.pmu = pmu or Pmu(timing=timing, accounting=accounting,
                              sync_samples=deterministic)
        if deterministic and not self.pmu.sync_samples:
            raise ValueError("a deterministic backend needs a Pmu with "
                             "sync_samples")
        self.max_vcpus = max_vcpus
        self.limiter = limiter or RateLimiter()
        self.stats = BackendStats()
        self.sampler = Sampler(memory, nmi, clock, deterministic)
        # The plugin may write sample records itself (the service, only
        # with a doorbell the plugin holds; never in deterministic runs,
        # where the service writes and the interrupt goes over QMP, or,
        # on a machine without NMIs, is rung by the plugin after it).  PVPERF_SERVICE_WRITES=1 keeps
        # the service writing (bench/bench_overflow_irq.py's "before").
        self.plugin_writes = not deterministic and \
            os.environ.get("PVPERF_SERVICE_WRITES") != "1"
        self.clock = clock
        # clock(): counting ("counting", "branches") on until then
        self._linger_until: dict[str, float] = {}
        # Serialises the PMU model: one thread per vCPU connection calls in.
        self.lock = threading.Lock()

    def handle(self, msg: proto.HcallMessage) -> int:
        """Serve one hypercall; returns the reply flags for the plugin."""
        return self.handle_reply(msg)[0]

    def handle_reply(self, msg: proto.HcallMessage
                     ) -> tuple[int, list[proto.Slot]]:
        """Serve one hypercall: (reply flags, thresholds to arm)."""
        with self.lock:
            ret = self._serve(msg)
            if ret is not None:
                self._write_ret(msg.block_gpa, ret)
            flags = (proto.REPLY_COUNTING
                     if self._linger("counting", self.pmu.counting_needed())
                     else 0)
            timer = self.host_timer()
            if self.pmu.sampling_needed(timer):
                flags |= proto.REPLY_SAMPLING
            if self.pmu.regs_needed(timer):
                flags |= proto.REPLY_REGS
            elif self.pmu.frame_needed(timer):
                flags |= proto.REPLY_FRAME
            if self._linger("branches", self.pmu.branches_needed()):
                flags |= proto.REPLY_BRANCHES
            models = self.pmu.models_needed() | self.pmu.emulator_needed()
            for flag, what in ((proto.REPLY_CACHE, "cache"),
                               (proto.REPLY_BPRED, "bpred"),
                               (proto.REPLY_TLB, "tlb"),
                               (proto.REPLY_DEVICE, "device"),
                               (proto.REPLY_HOST_TIME, "host time")):
                if self._linger(what, bool(models & flag)):
                    flags |= flag
            if msg.vcpu < self.max_vcpus and self.pmu.models_live(msg.vcpu):
                flags |= proto.REPLY_MODELS_LIVE
            if self.pmu.take_models_cold():
                flags |= proto.REPLY_MODELS_COLD
            slots = (self.pmu.slots(msg.vcpu) if msg.vcpu < self.max_vcpus
                     else [])
        return flags, slots

    def doorbell(self):
        """The overflow interrupt if it is a doorbell device, whose
        eventfds the plugin may hold (pmu/doorbell.py), else None."""
        irq = self.sampler.nmi
        return irq if hasattr(irq, "handover") else None

    def host_timer(self) -> bool:
        """Whether host-time sampling goes by the plugin's ticks
        (PVPERF_REPLY_HOST_TIME without _SAMPLING): the plugin writes the
        rings and rings the doorbell itself.  Otherwise the sampling
        countdown paces its clock readings."""
        return self.plugin_writes and self.doorbell() is not None

    def _linger(self, what: str, needed: bool) -> bool:
        """Whether the plugin should count (``what``: "counting",
        "branches", "cache", "bpred", "tlb"): while an event needs it, and for abi.COUNT_LINGER_MS
        after the last one closed (a mode switch retranslates all guest
        code), unless a PROBE ends the linger."""
        now = self.clock()
        if needed:
            self._linger_until[what] = now + abi.COUNT_LINGER_MS / 1000
            return True
        return now < self._linger_until.get(what, 0.0)

    def linger_left(self) -> dict[str, float]:
        """Seconds each lingering mode has left (checkpoints)."""
        now = self.clock()
        return {what: max(0.0, until - now)
                for what, until in self._linger_until.items()}

    def set_linger(self, left: dict[str, float]) -> None:
        """Linger as ``linger_left`` said (a restored checkpoint)."""
        now = self.clock()
        self._linger_until = {what: now + s for what, s in left.items()}

    # -- samples ------------------------------------------------------------

    def overflow(self, msg: proto.OverflowMessage) -> None:
        """An overflow from the plugin (a service thread; no reply)."""
        with self.lock:
            if msg.vcpu >= self.max_vcpus or msg.mode not in (
                    abi.MODE_KERNEL, abi.MODE_USER):
                self._complain(msg.vcpu, "bad overflow message ignored")
                return
            event = self.pmu.overflow(msg.event_id, msg.vcpu, msg.threshold,
                                      msg.next_threshold)
            if msg.flags & (proto.WRITTEN | proto.LOST):
                # The plugin delivered it: account, even a stale one (its
                # record is in the ring: the head moved).
                self.sampler.stats.stale += event is None
                try:
                    self.sampler.account(msg, event)
                except GuestMemoryError as e:
                    self._complain(msg.vcpu, f"overflows not counted: {e}")
                return
            if event is None:
                self.sampler.stats.stale += 1
                log.debug("stale overflow: event %d vcpu %d threshold %d",
                          msg.event_id, msg.vcpu, msg.threshold)
                return
            try:
                self.sampler.deliver(msg, event)
            except GuestMemoryError as e:
                self._complain(msg.vcpu, f"sample not delivered: {e}")

    def ring_for(self, vcpu: int) -> proto.Ring | None:
        """``vcpu``'s ring for the plugin to write (the service hands it
        over with a hypercall's reply, once the plugin holds the vCPU's
        doorbell), or None: the service writes the records."""
        if not self.plugin_writes or vcpu >= self.max_vcpus:
            return None
        with self.lock:
            return self.sampler.handover(vcpu)

    # -- validation ---------------------------------------------------------

    def _serve(self, msg: proto.HcallMessage) -> int | None:
        """Return the value for ->ret, or None if the block is unusable."""
        self.stats.calls += 1
        if msg.insn_vaddr < self.kernel_half_start:
            self._complain(msg.vcpu, "marker store from user mode at "
                           f"{msg.insn_vaddr:#x} ignored")
            return None
        if msg.vcpu >= self.max_vcpus or len(msg.counters) != proto.NR_COUNTERS:
            self._complain(msg.vcpu, "message from unknown vcpu ignored")
            return None
        try:
            block = abi.HcallBlock.unpack(
                self.memory.read(msg.block_gpa, abi.HCALL.size,
                                 align=abi.HCALL_ALIGN))
        except GuestMemoryError as e:
            self._complain(msg.vcpu, f"bad hypercall block: {e}")
            return None
        try:
            return self._dispatch(msg, block)
        except (PmuError, GuestMemoryError) as e:
            err = e.errno if isinstance(e, PmuError) else errno.EFAULT
            reason = e.reason if isinstance(e, PmuError) else str(e)
            self.stats.errors += 1
            # -ENOENT is perf's fallback ("not this PMU's event"): routine.
            level = logging.DEBUG if err == errno.ENOENT else logging.WARNING
            self._complain(msg.vcpu, f"{abi.OP_NAMES.get(block.op, block.op)}"
                           f": {reason} (-{errno.errorcode.get(err, err)})",
                           level)
            return -err

    def _dispatch(self, msg: proto.HcallMessage, block: abi.HcallBlock) -> int:
        if block.nr != abi.HC_PERF_OP:
            raise PmuError(errno.ENOSYS, f"unknown hypercall nr {block.nr}")
        handler = self._ops.get(block.op)
        if handler is None:
            raise PmuError(errno.EINVAL, f"unknown operation {block.op:#x}")
        name = abi.OP_NAMES[block.op]
        self.stats.by_op[name] = self.stats.by_op.get(name, 0) + 1
        return handler(self, msg, block.args)

    def _complain(self, vcpu: int, text: str,
                  level: int = logging.WARNING) -> None:
        # Every out-of-range vCPU index shares one bucket: the limiter's
        # state stays bounded whatever index a message carries.
        bucket = min(vcpu, self.max_vcpus)
        if log.isEnabledFor(level) and self.limiter.allow(bucket):
            log.log(level, "vcpu %d: %s", vcpu, text)

    def _write_ret(self, block_gpa: int, ret: int) -> None:
        self.memory.write(block_gpa + abi.HCALL_OFFSET_RET,
                          ret.to_bytes(8, "little", signed=True), align=8)

    def _sync_count(self, event: PmuEvent, value: int) -> None:
        """Write guest_perf_event.count (overflows: see _bump_overflows).

        Like a hardware counter the value wraps at 64 bits (raw snapshots
        are never trusted to be monotonic)."""
        value &= (1 << 64) - 1
        self.memory.write(event.guest_event_gpa, value.to_bytes(8, "little"),
                          align=8)

    # -- operations ---------------------------------------------------------

    def _probe(self, msg, args) -> int:
        self._linger_until.clear()   # the guest's "linger over" (abi.py)
        return abi.ABI_VERSION

    def _open(self, msg, args) -> int:
        param = abi.GuestPerfParam.unpack(
            self.memory.read(args[0], abi.PARAM.size, align=8))
        attr = abi.GuestPerfAttr.unpack(
            self.memory.read(param.attr_gpa, abi.ATTR.size, align=8))
        self.memory.check(param.guest_event_gpa, abi.GUEST_EVENT.size, 8)
        event = self.pmu.open(param.event_id, attr, param.guest_event_gpa)
        self.memory.write(event.guest_event_gpa,
                          abi.GUEST_EVENT.pack(0, 0, 0), align=8)
        return 0

    def _enable(self, msg, args) -> int:
        self.pmu.enable(args[0], msg.vcpu, msg.counters)
        return 0

    def _disable(self, msg, args) -> int:
        event = self.pmu.disable(args[0], msg.vcpu, msg.counters)
        self._sync_count(event, event.value())
        return 0

    def _read(self, msg, args) -> int:
        event = self.pmu.get(args[0])
        self._sync_count(event, event.value(msg.counters, msg.vcpu))
        return 0

    def _close(self, msg, args) -> int:
        self.pmu.close(args[0], msg.vcpu, msg.counters)
        return 0

    def _pmu_disable(self, msg, args) -> int:
        self.pmu.pmu_disable(msg.vcpu, msg.counters)
        return 0

    def _pmu_enable(self, msg, args) -> int:
        self.pmu.pmu_enable(msg.vcpu, msg.counters)
        return 0

    def _set_period(self, msg, args) -> int:
        self.pmu.set_period(args[0], msg.vcpu, args[1], msg.counters)
        return 0

    def _sample_buf(self, msg, args) -> int:
        self.sampler.set_buffer(msg.vcpu, *args)
        return 0

    def _events(self, msg, args) -> int:
        """The event table as the driver's sysfs events/ spell it, less
        the names perf parses as legacy hardware-cache events
        (events.sysfs_listing)."""
        text = sysfs_listing(self.pmu.event_defs()).encode() + b"\0"
        if not 0 < args[1] <= abi.EVENTS_BUF_MAX:
            raise PmuError(errno.EINVAL, f"events buffer size {args[1]} not "
                           f"in 1..{abi.EVENTS_BUF_MAX}")
        if len(text) > args[1]:
            raise PmuError(errno.ENOSPC, f"event list needs {len(text)} "
                           f"bytes, buffer has {args[1]}")
        self.memory.write(args[0], text)
        return len(text) - 1

    _ops = {abi.OP_PROBE: _probe, abi.OP_OPEN: _open, abi.OP_ENABLE: _enable,
            abi.OP_DISABLE: _disable, abi.OP_READ: _read,
            abi.OP_CLOSE: _close, abi.OP_PMU_DISABLE: _pmu_disable,
            abi.OP_PMU_ENABLE: _pmu_enable, abi.OP_SET_PERIOD: _set_period,
            abi.OP_SAMPLE_BUF: _sample_buf, abi.OP_EVENTS: _events}
