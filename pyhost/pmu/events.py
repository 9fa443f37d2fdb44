"""The event table: every event the paravirtual PMU counts, defined once.

Each event is an ``EventDef``: its perf name (the guest driver's sysfs
``events/`` name), its PERF_TYPE_HARDWARE config and x86 raw encodings
(event | umask << 8), the raw plugin counters it sums per mode
(plugin_protocol.CTR_*) and its scale.  Events come from *counting
models*; the PMU core (model.py) reaches them only through
``CountingModel`` and checks each at registration (like KVM's
kvm_pmu_ops), so a model with a missing op fails at start-up.

Everything else is derived from this table and checked against it:
``pvperf events`` prints it, docs/events.md documents it
(tests/test_events.py compares), and the guest driver's sysfs
``events/`` group advertises exactly these names and encodings
(tests/test_events.py reads guest_kernel_patch/pvperf_pmu.c and, in a
booted guest, /sys/bus/event_source/devices/cpu/events).

Cost model (docs/events.md, ``pvperf events``):
  cycles       = 1 cycle per retired instruction (a deterministic in-order
                 core at the declared 1 GHz; later models add penalties)
  ref-cycles   = a virtual reference clock at the same declared 1 GHz
  bus-cycles   = a virtual bus clock at 100 MHz (cycles / 10)
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
HW_BRANCH_INSTRUCTIONS = 4
HW_BUS_CYCLES = 6
HW_REF_CPU_CYCLES = 9

# Bits of a raw x86 encoding we accept: event select and unit mask.
RAW_EVENT_MASK = 0xFFFF

DECLARED_CORE_HZ = 1_000_000_000
DECLARED_BUS_HZ = 100_000_000


@dataclass(frozen=True)
class EventDef:
    """One countable event: its encodings, raw counters and scale."""
    name: str
    hw_config: int | None          # PERF_TYPE_HARDWARE config, if any
    raw_configs: tuple[int, ...]   # x86 event|umask<<8 encodings
    kernel_counter: int            # raw counter index for kernel mode
    user_counter: int              # raw counter index for user mode
    scale_num: int = 1
    scale_den: int = 1
    doc: str = ""

    def scale(self, raw_total: int) -> int:
        return raw_total * self.scale_num // self.scale_den


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
    """Retired instructions and branches, and the clocks derived from them."""

    name = "retirement"

    def events(self) -> Iterable[EventDef]:
        insn = (proto.CTR_INSN_KERNEL, proto.CTR_INSN_USER)
        br = (proto.CTR_BRANCH_KERNEL, proto.CTR_BRANCH_USER)
        return (
            EventDef("instructions", HW_INSTRUCTIONS, (0x00C0,), *insn,
                     doc="retired guest instructions (exact)"),
            EventDef("branch-instructions", HW_BRANCH_INSTRUCTIONS,
                     (0x00C4,), *br,
                     doc="retired branches: jcc, jmp, call, ret, loop, "
                         "int/iret/syscall family"),
            EventDef("cpu-cycles", HW_CPU_CYCLES, (0x003C,), *insn,
                     doc="cost model: 1 cycle per retired instruction at "
                         "a declared 1 GHz"),
            EventDef("ref-cycles", HW_REF_CPU_CYCLES, (0x0300,), *insn,
                     doc="virtual reference clock at 1 GHz"),
            EventDef("bus-cycles", HW_BUS_CYCLES, (0x013C,), *insn,
                     scale_den=DECLARED_CORE_HZ // DECLARED_BUS_HZ,
                     doc="virtual bus clock at 100 MHz"),
        )


MANDATORY_OPS = ("name", "events")

# The models a Pmu registers unless told otherwise.
DEFAULT_MODELS = (RetirementModel,)


def check_model(model: CountingModel) -> None:
    """Fail at registration if a model lacks a mandatory op."""
    for op in MANDATORY_OPS:
        if not getattr(model, op, None):
            raise TypeError(f"counting model {model!r} lacks {op!r}")


def default_events() -> list[EventDef]:
    """The event table of a default Pmu, sorted by name."""
    return sorted((ev for cls in DEFAULT_MODELS for ev in cls().events()),
                  key=lambda e: e.name)
