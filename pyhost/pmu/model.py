"""The paravirtual PMU's programming model.

The TCG plugin keeps raw, monotonic per-vCPU counters (see
plugin_protocol: CTR_*), exact at every hypercall.  This module turns them
into perf events: which raw counters an event sums (by its encoding and its
exclude_user / exclude_kernel bits, from the event table in events.py) and
each event's state (open, running on a vCPU, accumulated).

Index spaces: *event id* (guest-chosen, see abi), *vcpu index* (QEMU
cpu_index), *raw counter index* (plugin_protocol.CTR_*).

Sampling (ABI v2).  An event opened with a sample period also carries a
*period* and, while it counts on a vCPU, a *threshold*: the absolute raw
sum at which it overflows.  ``slots(vcpu)`` is the table the plugin arms
(plugin_protocol.Slot); the plugin reports each crossing with the exact
instruction and the threshold it re-armed at, and ``overflow()`` turns
that into a sample record (sampling.py writes it).  Stopping or freezing
keeps the distance left (x86's hwc->period_left); starting again re-arms
at now + distance.  In frequency mode the guest adjusts the period and
sends it with SET_PERIOD.
"""
from __future__ import annotations

import errno
from dataclasses import dataclass, field

from .. import abi
from . import plugin_protocol as proto
from .events import (ACCOUNTING_CPU, default_models, NS_PER_S, PERF_TYPE_HARDWARE,
                     PERF_TYPE_HW_CACHE, PERF_TYPE_RAW, RAW_EVENT_MASK,
                     CountingModel, EventDef, check_model)

PERF_SAMPLE_CALLCHAIN = 1 << 5     # include/uapi/linux/perf_event.h
PERF_SAMPLE_REGS_USER = 1 << 12
PERF_SAMPLE_STACK_USER = 1 << 13
PERF_SAMPLE_REGS_INTR = 1 << 18
# Sample types whose records need the registers of the overflowing
# instruction (the plugin captures them) ...
SAMPLE_TYPES_WITH_REGS = (PERF_SAMPLE_CALLCHAIN | PERF_SAMPLE_REGS_USER |
                          PERF_SAMPLE_STACK_USER | PERF_SAMPLE_REGS_INTR)
# ... and those that also read guest memory at delivery (the walked or
# copied stack), so the NMI must land before the vCPU leaves the frame.
SAMPLE_TYPES_WITH_STACK = PERF_SAMPLE_CALLCHAIN | PERF_SAMPLE_STACK_USER
# ... and those for which sp and bp are not enough.
SAMPLE_TYPES_WITH_ALL_REGS = (PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER |
                              PERF_SAMPLE_REGS_INTR)
BRANCH_COUNTERS_MASK = (1 << proto.CTR_BRANCH_KERNEL |
                        1 << proto.CTR_BRANCH_USER)
INLINE_COUNTERS_MASK = (1 << proto.NR_INLINE_COUNTERS) - 1
# The models (reply flags) that count each model counter (PVPERF_M_*):
# the stall cycles come from all of them.
ALL_MODELS = proto.REPLY_CACHE | proto.REPLY_BPRED | proto.REPLY_TLB
MODEL_OF_COUNTER = {
    **{m: proto.REPLY_CACHE
       for m in range(proto.M_I1_MISS, proto.M_LL_WRITE_MISS + 1)},
    **{m: proto.REPLY_BPRED for m in range(proto.M_COND, proto.M_IND_MISS + 1)},
    **{m: proto.REPLY_TLB
       for m in range(proto.M_DTLB_READ_MISS, proto.M_ITLB_MISS + 1)},
    proto.M_STALL: ALL_MODELS,
    # The emulator's own work needs no model (emu.c counts it; device
    # accesses and host-time sampling have reply flags of their own).
    **{m: 0 for m in range(proto.M_TB_TRANSLATED, proto.M_HOST_NS + 1)},
}
assert sorted(MODEL_OF_COUNTER) == list(range(proto.NR_MODEL_COUNTERS))
STALL_COUNTERS_MASK = (1 << proto.ctr_model(proto.M_STALL, 0) |
                       1 << proto.ctr_model(proto.M_STALL, 1))
INSN_COUNTERS_MASK = (1 << proto.CTR_INSN_KERNEL | 1 << proto.CTR_INSN_USER)
DEVICE_COUNTERS_MASK = (1 << proto.ctr_model(proto.M_DEVICE, 0) |
                        1 << proto.ctr_model(proto.M_DEVICE, 1))
HOST_NS_COUNTERS_MASK = (1 << proto.ctr_model(proto.M_HOST_NS, 0) |
                         1 << proto.ctr_model(proto.M_HOST_NS, 1))
# Host-time samples the plugin's ticks pace, at most (host_timed events):
# each costs the guest an interrupt (the MSI, its handler, TICK, an xAPIC
# EOI under TCG: ~50 us of host time, bench/bench_sampling.py's hosttime
# against armedh), charged to the guest's kernel half like any host time
# and sampled where it lands: ~5 % more kernel time at 1 kHz.  Faster,
# that share grows and the countdown's checks (a fixed ~1.26x, buffered:
# no interrupt per sample) distort less.
TICK_MAX_HZ = 1000


def model_flags(counters) -> int:
    """The PVPERF_REPLY_* models raw counters need the plugin to run."""
    flags = 0
    for c in counters:
        if c >= proto.NR_INLINE_COUNTERS:
            flags |= MODEL_OF_COUNTER[(c - proto.NR_INLINE_COUNTERS) // 2]
    return flags


def samplable(mask: int) -> bool:
    """Whether the plugin can sample a sum of these raw counters: inline
    counters only (checked by the chunks' countdown), model counters only
    (checked where the models report an increase), or cycles under the
    timing model, instructions plus stall cycles (qemu_plugin/pvperf/
    sample.c serves all three)."""
    inline = mask & INLINE_COUNTERS_MASK
    model = mask & ~INLINE_COUNTERS_MASK
    return not (inline and model) or (
        not inline & ~INSN_COUNTERS_MASK and not model & ~STALL_COUNTERS_MASK)

COUNTERS_PER_VCPU = 8


class PmuError(Exception):
    """An operation the guest asked for fails with ``-errno``."""

    def __init__(self, err: int, reason: str):
        super().__init__(reason)
        self.errno = err
        self.reason = reason


@dataclass
class PmuEvent:
    """State of one open event."""
    event_id: int
    attr: abi.GuestPerfAttr
    spec: EventDef
    guest_event_gpa: int
    counters: tuple[int, ...]       # raw counter indices summed
    running_on: int | None = None   # vcpu index while enabled
    start: int | None = None        # raw sum when counting (re)started;
                                    # None while stopped or frozen
    total: int = 0                  # raw sum accumulated so far
    # Sampling: raw period (0: counting only), distance left while not
    # counting (None: disarmed, waiting for SET_PERIOD), absolute threshold
    # while counting (None: disarmed).
    period: int = 0
    period_left: int | None = None
    threshold: int | None = None
    overflows: int = 0

    @property
    def sampling(self) -> bool:
        return self.period > 0

    @property
    def callchain(self) -> bool:
        """A callchain (or user stack copy) is read from guest memory when
        the guest delivers the sample, so the NMI must be raised before the
        vCPU leaves the overflowing frame."""
        return bool(self.attr.sample_type & SAMPLE_TYPES_WITH_STACK)

    @property
    def needs_regs(self) -> bool:
        """Samples carry the registers of the overflowing instruction."""
        return bool(self.attr.sample_type & SAMPLE_TYPES_WITH_REGS)

    @property
    def needs_all_regs(self) -> bool:
        """Every register must be exact, not only the frame's (sp, bp):
        sample registers and user stack copies (DWARF unwinding) need them;
        a frame-pointer callchain does not."""
        return bool(self.attr.sample_type & SAMPLE_TYPES_WITH_ALL_REGS)

    @property
    def counts_branches(self) -> bool:
        return bool(self.ctr_mask & BRANCH_COUNTERS_MASK)

    @property
    def slot_flags(self) -> int:
        return ((proto.SYNC if self.callchain else 0) |
                (proto.REGS if self.needs_regs else 0))

    @property
    def freq(self) -> bool:
        return bool(self.attr.flags & abi.ATTR_FREQ)

    @property
    def precise(self) -> int:
        """perf's precise_ip (the :p modifiers): 0 lets a sample's ip skid."""
        return (self.attr.flags & abi.ATTR_PRECISE_MASK) >> \
            abi.ATTR_PRECISE_SHIFT

    @property
    def host_timed(self) -> bool:
        """A sampling event on host CPU time alone that lets its ip skid
        and samples at most TICK_MAX_HZ: the plugin's ticks can pace it
        (no instrumented check), its samples landing where the guest's
        interrupt lands, as with the kernel's cpu-clock.  With :p, :pp or
        :ppp, or faster, the countdown's checks give the instruction the
        time was read at instead."""
        if self.precise or not self.sampling or \
                self.ctr_mask & ~HOST_NS_COUNTERS_MASK:
            return False
        if self.freq:               # attr.sample_freq shares the field
            return self.attr.sample_period <= TICK_MAX_HZ
        return self.period >= NS_PER_S // TICK_MAX_HZ

    @property
    def buffered(self) -> bool:
        return bool(self.attr.flags & abi.ATTR_BUFFERED)

    @property
    def rand_bits(self) -> int:
        return (self.attr.flags & abi.ATTR_RANDOM_MASK) >> abi.ATTR_RANDOM_SHIFT

    @property
    def ctr_mask(self) -> int:
        return sum(1 << c for c in self.counters)

    def raw_sum(self, snapshot: tuple[int, ...]) -> int:
        return sum(snapshot[i] for i in self.counters)

    def settle(self, snapshot: tuple[int, ...]) -> None:
        """Stop accumulating at ``snapshot``."""
        if self.start is not None:
            now = self.raw_sum(snapshot)
            self.total += now - self.start
            self.start = None
            if self.sampling:
                self.period_left = (None if self.threshold is None
                                    else max(self.threshold - now, 1))
                self.threshold = None

    def restart(self, snapshot: tuple[int, ...]) -> None:
        """Start accumulating (and counting the period down) here."""
        self.start = self.raw_sum(snapshot)
        if self.sampling:
            left = self.period_left if self.period_left is not None \
                else self.period
            self.threshold = self.start + left

    def value(self, snapshot: tuple[int, ...] | None = None,
              vcpu: int | None = None) -> int:
        """The event's count; live if it counts on ``vcpu`` (its snapshot)."""
        raw = self.total
        if self.start is not None and vcpu == self.running_on \
                and snapshot is not None:
            raw += self.raw_sum(snapshot) - self.start
        return self.spec.scale(raw)


@dataclass
class Pmu:
    """The PMU core: event table, per-vCPU running sets, model registry."""
    models: list[CountingModel] = field(default_factory=list)
    # cycles from the timing model (instructions + stall cycles)
    timing: bool = False
    # what the clocks count: events.ACCOUNTING_CPU or _DOMAIN
    accounting: str = ACCOUNTING_CPU
    max_events: int = abi.MAX_EVENTS
    counters_per_vcpu: int = COUNTERS_PER_VCPU
    # Deterministic runs: every sampling overflow waits for the service
    # (SYNC), so that an NMI it raises lands at a fixed instruction.
    sync_samples: bool = False

    def __post_init__(self):
        self._by_hw: dict[int, EventDef] = {}
        self._by_raw: dict[int, EventDef] = {}
        self._by_cache: dict[int, EventDef] = {}
        self.events: dict[int, PmuEvent] = {}
        self._running: dict[int, set[int]] = {}
        # vCPUs whose PMU is globally disabled (PMU_DISABLE .. PMU_ENABLE).
        self._frozen: set[int] = set()
        # A session of model events started since the plugin last heard.
        self._models_cold = False
        models = self.models or default_models(self.timing, self.accounting)
        self.models = []
        for m in models:
            self.register(m)

    def register(self, model: CountingModel) -> None:
        check_model(model)
        for ev in model.events():
            if ev.hw_config is not None:
                if ev.hw_config in self._by_hw:
                    raise ValueError(f"duplicate hardware event {ev.name}")
                self._by_hw[ev.hw_config] = ev
            for raw in ev.raw_configs:
                if raw in self._by_raw:
                    raise ValueError(f"duplicate raw encoding {raw:#x}")
                self._by_raw[raw] = ev
            if ev.cache_config is not None:
                if ev.cache_config in self._by_cache:
                    raise ValueError(f"duplicate cache event {ev.name}")
                self._by_cache[ev.cache_config] = ev
        self.models.append(model)

    def event_defs(self) -> list[EventDef]:
        seen = {id(e): e for e in list(self._by_hw.values())
                + list(self._by_raw.values())
                + list(self._by_cache.values())}
        return sorted(seen.values(), key=lambda e: e.name)

    # -- attr decoding -------------------------------------------------------

    def lookup(self, attr: abi.GuestPerfAttr) -> EventDef:
        """The event an attr names, or PmuError(-ENOENT) so perf falls back."""
        if attr.type == PERF_TYPE_HARDWARE:
            ev = self._by_hw.get(attr.config)
        elif attr.type == PERF_TYPE_RAW:
            if attr.config & ~RAW_EVENT_MASK:
                raise PmuError(errno.EINVAL,
                               f"raw config {attr.config:#x} sets bits "
                               "beyond event/umask")
            ev = self._by_raw.get(attr.config)
        elif attr.type == PERF_TYPE_HW_CACHE:
            ev = self._by_cache.get(attr.config)
        else:
            raise PmuError(errno.ENOENT, f"attr type {attr.type} not ours")
        if ev is None:
            raise PmuError(errno.ENOENT, f"event type={attr.type} "
                           f"config={attr.config:#x} not counted")
        return ev

    def counters_of(self, attr: abi.GuestPerfAttr,
                    ev: EventDef) -> tuple[int, ...]:
        """The raw counters an event sums for its attr's modes."""
        if attr.flags & ~abi.ATTR_KNOWN:
            raise PmuError(errno.EINVAL, f"unknown attr flags {attr.flags:#x}")
        if attr.bp_type or attr.bp_addr or attr.bp_len:
            raise PmuError(errno.EINVAL, "breakpoint fields set")
        counters = []
        if not attr.flags & abi.ATTR_EXCLUDE_KERNEL:
            counters += ev.kernel
        if not attr.flags & abi.ATTR_EXCLUDE_USER:
            counters += ev.user
        if not counters:
            raise PmuError(errno.EINVAL, "both user and kernel excluded")
        return tuple(counters)

    # -- operations (one per hypercall) -------------------------------------

    def open(self, event_id: int, attr: abi.GuestPerfAttr,
             guest_event_gpa: int) -> PmuEvent:
        if not 0 <= event_id < abi.MAX_EVENT_ID:
            raise PmuError(errno.EINVAL, f"event id {event_id} out of range")
        if event_id in self.events:
            raise PmuError(errno.EEXIST, f"event id {event_id} already open")
        if len(self.events) >= self.max_events:
            raise PmuError(errno.ENOSPC,
                           f"{self.max_events} events already open")
        ev = self.lookup(attr)
        event = PmuEvent(event_id, attr, ev, guest_event_gpa,
                         self.counters_of(attr, ev))
        if model_flags(event.counters) and not self.models_needed():
            self._models_cold = True
        if attr.sample_period and not samplable(event.ctr_mask):
            # The plugin checks inline and model counters at different
            # points (a chunk's countdown, a model's report): a slot
            # summing both would need both.
            raise PmuError(errno.EOPNOTSUPP, f"{ev.name} mixes inline and "
                           "model counters: cannot sample")
        # perf stat may set freq with a zero period: only a period samples.
        if attr.sample_period:
            event.period = self.raw_period(ev, attr.sample_period)
            event.period_left = event.period
        self.events[event_id] = event
        return event

    @staticmethod
    def raw_period(ev: EventDef, period: int) -> int:
        """A guest period in raw counter units, at least MIN_PERIOD."""
        if not 0 < period <= abi.MAX_PERIOD:
            raise PmuError(errno.EINVAL, f"sample period {period} out of range")
        raw = -(-period * ev.scale_den // ev.scale_num)
        # A scaled event (bus-cycles: x10) could exceed the reply's u64;
        # 2^62 raw counts never elapse anyway (found by tests/fuzz).
        return min(max(raw, abi.MIN_PERIOD), abi.MAX_PERIOD)

    def get(self, event_id: int) -> PmuEvent:
        try:
            return self.events[event_id]
        except KeyError:
            raise PmuError(errno.ENOENT,
                           f"event id {event_id} is not open") from None

    def enable(self, event_id: int, vcpu: int,
               snapshot: tuple[int, ...]) -> PmuEvent:
        event = self.get(event_id)
        if event.running_on is not None:
            raise PmuError(errno.EBUSY, f"event {event_id} already running "
                           f"on vcpu {event.running_on}")
        running = self._running.setdefault(vcpu, set())
        if len(running) >= self.counters_per_vcpu:
            raise PmuError(errno.EBUSY, f"vcpu {vcpu}: all "
                           f"{self.counters_per_vcpu} counters in use")
        event.running_on = vcpu
        if vcpu not in self._frozen:
            event.restart(snapshot)
        running.add(event_id)
        return event

    def disable(self, event_id: int, vcpu: int,
                snapshot: tuple[int, ...]) -> PmuEvent:
        event = self.get(event_id)
        if event.running_on is None:
            return event
        if event.running_on != vcpu:
            raise PmuError(errno.EINVAL, f"event {event_id} runs on vcpu "
                           f"{event.running_on}, not {vcpu}")
        event.settle(snapshot)
        self._running[vcpu].discard(event_id)
        event.running_on = None
        return event

    def close(self, event_id: int, vcpu: int,
              snapshot: tuple[int, ...]) -> None:
        event = self.get(event_id)
        if event.running_on is not None:
            self._running[event.running_on].discard(event_id)
        del self.events[event_id]

    def pmu_disable(self, vcpu: int, snapshot: tuple[int, ...]) -> None:
        """Freeze every event running on ``vcpu`` at this instruction."""
        if vcpu in self._frozen:
            return
        self._frozen.add(vcpu)
        for event_id in self._running.get(vcpu, ()):
            self.events[event_id].settle(snapshot)

    def pmu_enable(self, vcpu: int, snapshot: tuple[int, ...]) -> None:
        """Thaw: every event running on ``vcpu`` restarts here, together."""
        if vcpu not in self._frozen:
            return
        self._frozen.discard(vcpu)
        for event_id in self._running.get(vcpu, ()):
            self.events[event_id].restart(snapshot)

    def set_period(self, event_id: int, vcpu: int, period: int,
                   snapshot: tuple[int, ...]) -> PmuEvent:
        """SET_PERIOD: a new period, counted down from this instruction."""
        event = self.get(event_id)
        if not event.sampling:
            raise PmuError(errno.EINVAL, f"event {event_id} does not sample")
        event.period = self.raw_period(event.spec, period)
        event.period_left = event.period
        if event.start is not None and event.running_on == vcpu:
            event.threshold = event.raw_sum(snapshot) + event.period
        return event

    def overflow(self, event_id: int, vcpu: int, threshold: int,
                 next_threshold: int) -> PmuEvent | None:
        """The plugin saw ``threshold`` reached and re-armed; None if stale."""
        event = self.events.get(event_id)
        if event is None or event.running_on != vcpu or event.start is None \
                or event.threshold != threshold:
            return None
        event.overflows += 1
        event.threshold = (None if next_threshold >= proto.DISARMED
                           or next_threshold <= threshold else next_threshold)
        return event

    def slots(self, vcpu: int) -> list[proto.Slot]:
        """The thresholds the plugin must arm on ``vcpu`` now."""
        out = []
        for event_id in sorted(self._running.get(vcpu, ())):
            e = self.events[event_id]
            if e.sampling and e.threshold is not None:
                # Frequency mode: one-shot (period 0), re-armed by the
                # guest's SET_PERIOD after each sample (pvperf_abi.h).
                # The plugin's sums are u64: a threshold past 2^64 - 1
                # saturates, as the plugin's own re-arm does (sample.c).
                out.append(proto.Slot(min(e.threshold, proto.DISARMED),
                                      0 if e.freq else e.period,
                                      event_id, e.ctr_mask, e.rand_bits,
                                      e.slot_flags | (proto.SYNC if
                                                      self.sync_samples
                                                      else 0),
                                      # what a record the plugin writes
                                      # carries (sampling.py writes the same)
                                      e.guest_event_gpa,
                                      e.spec.scale(e.period),
                                      proto.DELIVER_BUFFERED if e.buffered
                                      else 0))
        return out[:proto.MAX_SLOTS]

    def counting_needed(self) -> bool:
        """Whether the plugin must instrument (any event open)."""
        return bool(self.events)

    def _instrumented_samplers(self, host_timer: bool):
        """The open sampling events the plugin detects overflows of in
        instrumented code: all of them, or with ``host_timer`` (the
        plugin can pace host-time sampling with a CPU-time timer, its
        samples taking the guest's interrupted registers) all but the
        host_timed ones."""
        return (e for e in self.events.values() if e.sampling and not (
            host_timer and e.host_timed))

    def sampling_needed(self, host_timer: bool = False) -> bool:
        """Whether the plugin must instrument for exact overflow
        detection (see _instrumented_samplers)."""
        return any(True for _ in self._instrumented_samplers(host_timer))

    def regs_needed(self, host_timer: bool = False) -> bool:
        """Whether the plugin must be able to capture every register at
        any instruction (a sampling event whose samples carry them open)."""
        return any(e.needs_all_regs
                   for e in self._instrumented_samplers(host_timer))

    def frame_needed(self, host_timer: bool = False) -> bool:
        """Whether the plugin must capture the frame registers (a sampling
        event with a frame-pointer callchain open)."""
        return any(e.needs_regs
                   for e in self._instrumented_samplers(host_timer))

    def models_needed(self) -> int:
        """PVPERF_REPLY_CACHE / _BPRED: the models open events count."""
        flags = 0
        for e in self.events.values():
            flags |= model_flags(e.counters)
        return flags

    def emulator_needed(self) -> int:
        """PVPERF_REPLY_DEVICE / _HOST_TIME: an open event counts device
        accesses; a sampling event is on host CPU time (counting it needs
        nothing: the plugin reads the clock at every hypercall)."""
        flags = 0
        for e in self.events.values():
            if e.ctr_mask & DEVICE_COUNTERS_MASK:
                flags |= proto.REPLY_DEVICE
            if e.sampling and e.ctr_mask & HOST_NS_COUNTERS_MASK:
                flags |= proto.REPLY_HOST_TIME
        return flags

    def models_live(self, vcpu: int) -> bool:
        """Whether an event counting model events runs on ``vcpu``."""
        return any(model_flags(self.events[i].counters)
                   for i in self._running.get(vcpu, ()))

    def take_models_cold(self) -> bool:
        """True once after a session of model events began (the first
        OPEN of one while none was open): the models start cold."""
        cold, self._models_cold = self._models_cold, False
        return cold

    def branches_needed(self) -> bool:
        """Whether the plugin must count branches (an event counting them
        open)."""
        return any(e.counts_branches for e in self.events.values())

    # -- checkpoints (pmu/snapshot.py) --------------------------------------

    @property
    def frozen(self) -> frozenset[int]:
        """vCPUs whose PMU is globally disabled (PMU_DISABLE)."""
        return frozenset(self._frozen)

    @property
    def models_cold_pending(self) -> bool:
        """A cold start of the models not yet told to the plugin."""
        return self._models_cold

    def replace_state(self, events: dict[int, PmuEvent], frozen,
                      models_cold: bool) -> None:
        """A checkpoint's events, frozen vCPUs and pending cold start, in
        place of the current ones, at once; the running sets follow from
        each event's vCPU.  PmuError, and nothing changed, if a vCPU would
        run more events than it has counters."""
        running: dict[int, set[int]] = {}
        for e in events.values():
            if e.running_on is not None:
                running.setdefault(e.running_on, set()).add(e.event_id)
        if any(len(s) > self.counters_per_vcpu for s in running.values()):
            raise PmuError(errno.EBUSY, "more events running on a vCPU "
                           "than it has counters")
        self.events, self._running = dict(events), running
        self._frozen, self._models_cold = set(frozen), models_cold
