"""The event table: every event the paravirtual PMU counts, defined once.

Each event is an ``EventDef``: its perf name (the guest driver's sysfs
``events/`` name), its PERF_TYPE_HARDWARE config and x86 raw encodings
(event | umask << 8), the raw plugin counters it sums per mode
(plugin_protocol.CTR_*) and its scale.  Events come from *counting
models*; the PMU core (model.py) reaches them only through
``CountingModel`` and checks each at registration (like KVM's
kvm_pmu_ops), so a model with a missing op fails at start-up.

Everything else is derived from this table: ``pvperf events`` prints it,
docs/events.md documents it (tests/vm/test_events.py compares), and the
guest driver's sysfs ``events/`` group, hence ``perf list`` in the guest,
is what the host answers to PVPERF_OP_EVENTS (``sysfs_listing``: every
event but those perf names as legacy hardware-cache events; the driver
has no event table of its own).

Cost model (docs/events.md, ``pvperf events``):
  cycles       = 1 cycle per retired instruction (a deterministic in-order
                 core at the declared 1 GHz); with the timing model
                 (``pvperf run --timing``) plus the penalty cycles of
                 cache and TLB misses and mispredictions
  ref-cycles   = a virtual reference clock at the same declared 1 GHz
  bus-cycles   = a virtual bus clock at 100 MHz (cycles / 10)
With domain accounting (``pvperf run --accounting domain``, the VEE 2011
paper's "domain switch"; docs/accounting.md) cycles and ref-cycles are the
host CPU time of the vCPU's thread instead, at the same declared 1 GHz
(1 ns = 1 cycle): translation and device emulation on that thread included.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Iterable

from . import plugin_protocol as proto

# perf_event_attr.type values (include/uapi/linux/perf_event.h).
PERF_TYPE_HARDWARE = 0
PERF_TYPE_HW_CACHE = 3
PERF_TYPE_RAW = 4

# PERF_TYPE_HARDWARE configs (include/uapi/linux/perf_event.h).
HW_CPU_CYCLES = 0
HW_INSTRUCTIONS = 1
HW_CACHE_REFERENCES = 2
HW_CACHE_MISSES = 3
HW_BRANCH_INSTRUCTIONS = 4
HW_BRANCH_MISSES = 5
HW_BUS_CYCLES = 6
HW_REF_CPU_CYCLES = 9

# PERF_TYPE_HW_CACHE: config = cache | op << 8 | result << 16.
CACHE_L1D, CACHE_L1I, CACHE_LL, CACHE_DTLB, CACHE_ITLB, CACHE_BPU = range(6)
CACHE_READ, CACHE_WRITE = 0, 1
CACHE_ACCESS, CACHE_MISS = 0, 1


def hw_cache(cache: int, op: int, result: int) -> int:
    return cache | op << 8 | result << 16

# Bits of a raw x86 encoding we accept: event select and unit mask.
RAW_EVENT_MASK = 0xFFFF

DECLARED_CORE_HZ = 1_000_000_000
DECLARED_BUS_HZ = 100_000_000
NS_PER_S = 1_000_000_000

# --accounting: what the clocks count (docs/accounting.md).
ACCOUNTING_CPU = "cpu"          # guest code only: the cost model
ACCOUNTING_DOMAIN = "domain"    # the vCPU thread's host CPU time
ACCOUNTING_MODES = (ACCOUNTING_CPU, ACCOUNTING_DOMAIN)


@dataclass(frozen=True)
class EventDef:
    """One countable event: its encodings, raw counters and scale."""
    name: str
    hw_config: int | None          # PERF_TYPE_HARDWARE config, if any
    raw_configs: tuple[int, ...]   # x86 event|umask<<8 encodings
    kernel: tuple[int, ...]        # raw counters summed for kernel mode
    user: tuple[int, ...]          # raw counters summed for user mode
    scale_num: int = 1
    scale_den: int = 1
    doc: str = ""
    cache_config: int | None = None    # PERF_TYPE_HW_CACHE config, if any

    def scale(self, raw_total: int) -> int:
        return raw_total * self.scale_num // self.scale_den

    def sysfs(self) -> str:
        """The event's sysfs events/ string: its first raw encoding in the
        driver's format/ fields (event: config 0-7, umask: 8-15)."""
        raw = self.raw_configs[0]
        text = f"event={raw & 0xFF:#04x}"
        return text + (f",umask={raw >> 8:#04x}" if raw >> 8 else "")


class CountingModel(ABC):
    """A source of events for the PMU core.

    Mandatory ops: ``name`` and ``events()``.  Optional: ``reset()``.
    """

    name: str = ""

    @abstractmethod
    def events(self) -> Iterable[EventDef]:
        """The events this model counts."""

    def reset(self) -> None:  # optional op
        """Forget model state (a new VM)."""


class RetirementModel(CountingModel):
    """Retired instructions and branches, and the clocks derived from them:
    one cycle per instruction (TimingModel adds the stalls)."""

    name = "retirement"

    def __init__(self, timing: bool = False,
                 accounting: str = ACCOUNTING_CPU):
        self.timing = timing
        self.accounting = accounting

    def events(self) -> Iterable[EventDef]:
        insn = ((proto.CTR_INSN_KERNEL,), (proto.CTR_INSN_USER,))
        br = ((proto.CTR_BRANCH_KERNEL,), (proto.CTR_BRANCH_USER,))
        return (
            EventDef("instructions", HW_INSTRUCTIONS, (0x00C0,), *insn,
                     doc="retired guest instructions (exact)"),
            EventDef("branch-instructions", HW_BRANCH_INSTRUCTIONS,
                     (0x00C4,), *br,
                     doc="retired branches: jcc, jmp, call, ret, loop, "
                         "int/iret/syscall family"),
        ) + clocks(self.timing, self.accounting)


def clocks(timing: bool, accounting: str = ACCOUNTING_CPU
           ) -> tuple[EventDef, ...]:
    """cycles and the clocks that follow it: one per instruction, plus
    the timing model's stall cycles if it is on; or, with domain
    accounting, the host CPU time spent for the vCPU."""
    insn = ((proto.CTR_INSN_KERNEL,), (proto.CTR_INSN_USER,))
    per_raw = 1                     # cycles per raw count
    if accounting == ACCOUNTING_DOMAIN:
        cyc = model_counters(proto.M_HOST_NS)
        per_raw = DECLARED_CORE_HZ // NS_PER_S      # cycles per ns
        what = ("domain accounting: host CPU time of the vCPU's thread "
                "(guest code, translation, device emulation)")
    elif timing:
        stall = model_counters(proto.M_STALL)
        cyc = tuple(i + s for i, s in zip(insn, stall))
        what = ("timing model: 1 cycle per retired instruction plus the "
                "penalties of misses and mispredictions")
    else:
        cyc = insn
        what = "cost model: 1 cycle per retired instruction"
    return (
        EventDef("cpu-cycles", HW_CPU_CYCLES, (0x003C,), *cyc,
                 scale_num=per_raw,
                 doc=f"{what} at a declared 1 GHz"),
        EventDef("ref-cycles", HW_REF_CPU_CYCLES, (0x0300,), *cyc,
                 scale_num=per_raw,
                 doc="virtual reference clock at 1 GHz (= cycles)"),
        EventDef("bus-cycles", HW_BUS_CYCLES, (0x013C,), *cyc,
                 scale_num=per_raw,
                 scale_den=DECLARED_CORE_HZ // DECLARED_BUS_HZ,
                 doc="virtual bus clock at 100 MHz (cycles / 10)"),
    )


def model_counters(*ms: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(kernel, user) raw counters summing model counters ``ms``."""
    return (tuple(proto.ctr_model(m, 0) for m in ms),
            tuple(proto.ctr_model(m, 1) for m in ms))


class CacheModel(CountingModel):
    """L1I, L1D and a shared LL (qemu_plugin/pvperf/cachesim.c), cachegrind's
    rules; the counters are cachegrind's (I1mr, ILmr, Dr, D1mr, ...)."""

    name = "cache"

    def events(self) -> Iterable[EventDef]:
        p = proto
        insn = ((p.CTR_INSN_KERNEL,), (p.CTR_INSN_USER,))
        L1D, L1I, LL = CACHE_L1D, CACHE_L1I, CACHE_LL
        R, W, A, M = CACHE_READ, CACHE_WRITE, CACHE_ACCESS, CACHE_MISS
        return (
            EventDef("cache-references", HW_CACHE_REFERENCES, (0x4F2E,),
                     *model_counters(p.M_I1_MISS, p.M_D1_READ_MISS,
                                     p.M_D1_WRITE_MISS),
                     doc="LL accesses: L1I and L1D misses "
                         "(cachegrind I1mr + D1mr + D1mw)"),
            EventDef("cache-misses", HW_CACHE_MISSES, (0x412E,),
                     *model_counters(p.M_LL_IMISS, p.M_LL_READ_MISS,
                                     p.M_LL_WRITE_MISS),
                     doc="LL misses (ILmr + DLmr + DLmw)"),
            EventDef("L1-dcache-loads", None, (0x81D0,),
                     *model_counters(p.M_D1_READ), cache_config=hw_cache(
                         L1D, R, A), doc="data reads (Dr)"),
            EventDef("L1-dcache-load-misses", None, (0x08D1,),
                     *model_counters(p.M_D1_READ_MISS), cache_config=hw_cache(
                         L1D, R, M), doc="data reads missing L1D (D1mr)"),
            EventDef("L1-dcache-stores", None, (0x82D0,),
                     *model_counters(p.M_D1_WRITE), cache_config=hw_cache(
                         L1D, W, A), doc="data writes (Dw)"),
            EventDef("L1-dcache-store-misses", None, (0x01D2,),
                     *model_counters(p.M_D1_WRITE_MISS),
                     cache_config=hw_cache(L1D, W, M),
                     doc="data writes missing L1D (D1mw)"),
            EventDef("L1-icache-loads", None, (0x0180,), *insn,
                     cache_config=hw_cache(L1I, R, A),
                     doc="instruction fetches: one per instruction (Ir)"),
            EventDef("L1-icache-load-misses", None, (0x0283,),
                     *model_counters(p.M_I1_MISS), cache_config=hw_cache(
                         L1I, R, M), doc="fetches missing L1I (I1mr)"),
            EventDef("LLC-loads", None, (0x01D3,),
                     *model_counters(p.M_I1_MISS, p.M_D1_READ_MISS),
                     cache_config=hw_cache(LL, R, A),
                     doc="LL reads: L1I and L1D read misses (I1mr + D1mr)"),
            EventDef("LLC-load-misses", None, (0x02D3,),
                     *model_counters(p.M_LL_IMISS, p.M_LL_READ_MISS),
                     cache_config=hw_cache(LL, R, M),
                     doc="LL read misses (ILmr + DLmr)"),
            EventDef("LLC-stores", None, (0x04D3,),
                     *model_counters(p.M_D1_WRITE_MISS),
                     cache_config=hw_cache(LL, W, A),
                     doc="LL writes: L1D write misses (D1mw)"),
            EventDef("LLC-store-misses", None, (0x08D3,),
                     *model_counters(p.M_LL_WRITE_MISS),
                     cache_config=hw_cache(LL, W, M),
                     doc="LL write misses (DLmw)"),
        )


class BranchPredictorModel(CountingModel):
    """Conditional and indirect branch prediction (qemu_plugin/pvperf/bpred.c,
    cachegrind's predictor)."""

    name = "bpred"

    def events(self) -> Iterable[EventDef]:
        p = proto
        miss = model_counters(p.M_COND_MISS, p.M_IND_MISS)
        return (
            EventDef("branch-misses", HW_BRANCH_MISSES, (0x00C5,), *miss,
                     doc="mispredicted conditional and indirect branches "
                         "(cachegrind Bcm + Bim)"),
            EventDef("branch-loads", None, (0x01C4,),
                     *model_counters(p.M_COND, p.M_IND),
                     cache_config=hw_cache(CACHE_BPU, CACHE_READ, CACHE_ACCESS),
                     doc="predicted branches: conditional and indirect, "
                         "not returns (Bc + Bi)"),
            EventDef("branch-load-misses", None, (0x01C5,), *miss,
                     cache_config=hw_cache(CACHE_BPU, CACHE_READ, CACHE_MISS),
                     doc="their mispredictions (Bcm + Bim)"),
        )


class TlbModel(CountingModel):
    """iTLB and dTLB (qemu_plugin/pvperf/cachesim.c on pages).  A lookup is an
    access: dTLB-loads/-stores are the data reads/writes, iTLB-loads the
    instruction fetches, as on x86 where every access looks the TLB up."""

    name = "tlb"

    def events(self) -> Iterable[EventDef]:
        p = proto
        insn = ((p.CTR_INSN_KERNEL,), (p.CTR_INSN_USER,))
        R, W, A, M = CACHE_READ, CACHE_WRITE, CACHE_ACCESS, CACHE_MISS
        return (
            EventDef("dTLB-loads", None, (0x8008,),
                     *model_counters(p.M_D1_READ), cache_config=hw_cache(
                         CACHE_DTLB, R, A), doc="data reads (each looks up "
                         "the dTLB; = L1-dcache-loads)"),
            EventDef("dTLB-load-misses", None, (0x0108,),
                     *model_counters(p.M_DTLB_READ_MISS),
                     cache_config=hw_cache(CACHE_DTLB, R, M),
                     doc="data reads missing the dTLB"),
            EventDef("dTLB-stores", None, (0x8049,),
                     *model_counters(p.M_D1_WRITE), cache_config=hw_cache(
                         CACHE_DTLB, W, A), doc="data writes (each looks up "
                         "the dTLB; = L1-dcache-stores)"),
            EventDef("dTLB-store-misses", None, (0x0149,),
                     *model_counters(p.M_DTLB_WRITE_MISS),
                     cache_config=hw_cache(CACHE_DTLB, W, M),
                     doc="data writes missing the dTLB"),
            EventDef("iTLB-loads", None, (0x8085,), *insn,
                     cache_config=hw_cache(CACHE_ITLB, R, A),
                     doc="instruction fetches: one per instruction"),
            EventDef("iTLB-load-misses", None, (0x0185,),
                     *model_counters(p.M_ITLB_MISS),
                     cache_config=hw_cache(CACHE_ITLB, R, M),
                     doc="fetches missing the iTLB"),
        )


class TimingModel(CountingModel):
    """The timing model's own counter: the stall cycles it adds to
    cycles (``pvperf run --timing``)."""

    name = "timing"

    def events(self) -> Iterable[EventDef]:
        return (EventDef("model-stalls", None, (0x01A3,),
                         *model_counters(proto.M_STALL),
                         doc="timing model: penalty cycles of misses and "
                             "mispredictions (cycles - instructions)"),)


class EmulatorModel(CountingModel):
    """The emulator's own work for the guest (qemu_plugin/pvperf/emu.c):
    what the VEE 2011 paper's domain switch charges and its CPU switch
    does not (docs/accounting.md)."""

    name = "emulator"

    def events(self) -> Iterable[EventDef]:
        p = proto
        return (
            EventDef("emu-tb-translated", None, (0x01EE,),
                     *model_counters(p.M_TB_TRANSLATED),
                     doc="blocks the emulator translated (samples: the "
                         "guest pc translated; kernel or user by its half)"),
            EventDef("emu-tb-flushes", None, (0x02EE,),
                     *model_counters(p.M_TB_FLUSH),
                     doc="code-cache flushes, charged to the vCPU whose "
                         "thread flushed (samples: its pc)"),
            EventDef("emu-device-accesses", None, (0x04EE,),
                     *model_counters(p.M_DEVICE),
                     doc="device accesses: loads and stores to I/O memory "
                         "(MMIO) and port I/O instructions"),
            EventDef("emu-host-ns", None, (0x08EE,),
                     *model_counters(p.M_HOST_NS),
                     doc="host CPU time of the vCPU's thread in ns, split "
                         "kernel/user by instructions retired (samples: "
                         "where the guest's interrupt lands, at most 1 kHz "
                         "without :p; else the block running when the "
                         "time was read)"),
        )


MANDATORY_OPS = ("name", "events")


def default_models(timing: bool = False, accounting: str = ACCOUNTING_CPU
                   ) -> list[CountingModel]:
    """The models a Pmu registers unless told otherwise."""
    return [RetirementModel(timing, accounting), CacheModel(),
            BranchPredictorModel(), TlbModel(), TimingModel(),
            EmulatorModel()]


def check_model(model: CountingModel) -> None:
    """Fail at registration if a model lacks a mandatory op."""
    for op in MANDATORY_OPS:
        if not getattr(model, op, None):
            raise TypeError(f"counting model {model!r} lacks {op!r}")


def sysfs_listing(defs: Iterable[EventDef]) -> str:
    """PVPERF_OP_EVENTS' answer: "name=sysfs string" per line, for every
    event but the hardware-cache ones.  Their names (L1-dcache-loads,
    branch-loads, ...) are perf's legacy cache event names, which perf
    reaches through PERF_TYPE_HW_CACHE (``cache_config``): as a sysfs
    alias as well, perf 6.12's parse_events_add_cache() takes the alias
    and then refuses the event (tests/vm/test_events.py).  No hardware
    PMU lists such a name in events/ either."""
    return "".join(f"{ev.name}={ev.sysfs()}\n" for ev in defs
                   if ev.cache_config is None)


def default_events(timing: bool = False, accounting: str = ACCOUNTING_CPU
                   ) -> list[EventDef]:
    """The event table of a default Pmu, sorted by name."""
    return sorted((ev for m in default_models(timing, accounting)
                   for ev in m.events()), key=lambda e: e.name)
