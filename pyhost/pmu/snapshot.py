"""The service's half of a checkpoint: the PMU state as versioned JSON.

A checkpoint (vm/checkpoint.py) holds three parts that must agree: the
VM (QEMU's migration stream), the plugin's per-vCPU counters and armed
thresholds (plugin_protocol.parse_plugin_state), and this: every open
event (its attr as the guest gave it, where it syncs its count, which vCPU
runs it, its accumulated total and the raw sum it started at, its period
and threshold), the frozen vCPUs, the sample rings and what the service
still lingers on.  The plugin's counters continue exactly where they
stopped, so every raw sum here stays valid as it is: nothing is rebased.

``restore`` trusts nothing: the file may be corrupted or hand-edited, and
its guest addresses were chosen by a guest.  Every field is checked as
the hypercall it came from was (the attr decoded and looked up again, the
guest addresses checked against guest RAM, counts within u64), into new
objects that replace the backend's only when everything passed: a state
that fails is never applied half (StateError says where it failed).

Derived, not saved: an event's raw counters (from its attr), the per-vCPU
running sets (from each event's vCPU), a ring's capacity (from its size).
"""
from __future__ import annotations

import struct

from .. import abi
from .hypercall import PerfBackend
from .guestmem import GuestMemoryError
from .model import PmuError, PmuEvent
from .sampling import SampleRing, SampleStats

FORMAT = "pvperf-pmu-state"
VERSION = 1
U32 = (1 << 32) - 1
U64 = (1 << 64) - 1
LINGERS = ("counting", "branches", "cache", "bpred", "tlb")


class StateError(ValueError):
    """A PMU state that cannot be restored, and why."""


# -- save -------------------------------------------------------------------

def save(backend: PerfBackend) -> dict:
    """The backend's state (hold backend.lock, or stop every vCPU first)."""
    pmu, sampler = backend.pmu, backend.sampler
    return {
        "format": FORMAT, "version": VERSION,
        "events": [_event(e) for e in pmu.events.values()],
        "frozen": sorted(pmu.frozen),
        "models_cold": pmu.models_cold_pending,
        "linger_s": backend.linger_left(),
        "rings": [_ring(vcpu, r, sampler.clock())
                  for vcpu, r in sorted(sampler.rings.items())],
        "sample_stats": vars(sampler.stats).copy(),
    }


def _event(e: PmuEvent) -> dict:
    return {"id": e.event_id, "attr": e.attr.pack().hex(),
            "guest_event_gpa": e.guest_event_gpa, "running_on": e.running_on,
            "start": e.start, "total": e.total, "period": e.period,
            "period_left": e.period_left, "threshold": e.threshold,
            "overflows": e.overflows}


def _ring(vcpu: int, r: SampleRing, now: float) -> dict:
    return {"vcpu": vcpu, "gpa": r.gpa, "capacity": r.capacity,
            "watermark": r.watermark, "head": r.head, "lost": r.lost,
            "notified": r.notified,
            # the sampler's clock: seconds, or overflows (deterministic)
            "notified_age": 0 if r.notified is None
            else max(0, now - r.notified_at)}


# -- restore ----------------------------------------------------------------

def restore(backend: PerfBackend, state: object, n_vcpus: int) -> None:
    """Replace the backend's PMU state with ``state``, or raise StateError
    and change nothing."""
    try:
        _restore(backend, state, n_vcpus)
    except (TypeError, KeyError, AttributeError, struct.error) as e:
        # a shape no check above foresaw: still a refusal, not a crash
        raise StateError(f"malformed ({type(e).__name__}: {e})") from None


def _restore(backend: PerfBackend, state: object, n_vcpus: int) -> None:
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise StateError("not a pvperf PMU state")
    if state.get("version") != VERSION:
        raise StateError(f"PMU state version {state.get('version')!r}, this "
                         f"pvperf reads {VERSION}")
    pmu = backend.pmu
    events = {}
    for raw in _list(state, "events"):
        event = _restore_event(backend, raw, n_vcpus)
        if event.event_id in events:
            raise StateError(f"event {event.event_id} twice")
        events[event.event_id] = event
    if len(events) > pmu.max_events:
        raise StateError(f"{len(events)} events, at most {pmu.max_events}")
    frozen = {_int(v, "frozen vCPU", n_vcpus - 1) for v in
              _list(state, "frozen")}
    models_cold = _bool(state.get("models_cold"), "models_cold")
    linger = _linger(state.get("linger_s"))
    rings = {}
    for raw in _list(state, "rings"):
        vcpu, ring = _restore_ring(backend, raw, n_vcpus)
        if vcpu in rings:
            raise StateError(f"two sample rings for vCPU {vcpu}")
        rings[vcpu] = ring
    stats = _stats(state.get("sample_stats"))
    # Everything checked: apply it all at once (the PMU checks its
    # running sets first and changes nothing if they do not fit).
    try:
        pmu.replace_state(events, frozen, models_cold)
    except PmuError as e:
        raise StateError(e.reason) from None
    backend.set_linger(linger)
    backend.sampler.rings, backend.sampler.stats = rings, stats
    clock = backend.sampler.clock()
    for ring in rings.values():
        ring.notified_at += clock


def _restore_event(backend: PerfBackend, raw: object,
                   n_vcpus: int) -> PmuEvent:
    d = _dict(raw, "event")
    event_id = _int(d.get("id"), "event id", abi.MAX_EVENT_ID - 1)
    where = f"event {event_id}"
    try:
        attr = abi.GuestPerfAttr.unpack(bytes.fromhex(str(d.get("attr"))))
    except (ValueError, TypeError, struct.error) as e:
        raise StateError(f"{where}: bad attr ({e})") from None
    pmu = backend.pmu
    try:
        spec = pmu.lookup(attr)
        counters = pmu.counters_of(attr, spec)
    except PmuError as e:
        raise StateError(f"{where}: {e.reason}") from None
    gpa = _int(d.get("guest_event_gpa"), f"{where}: guest_event_gpa", U64)
    try:
        backend.memory.check(gpa, abi.GUEST_EVENT.size, 8)
    except GuestMemoryError as e:
        raise StateError(f"{where}: {e}") from None
    event = PmuEvent(event_id, attr, spec, gpa, counters)
    event.running_on = _opt_int(d.get("running_on"), f"{where}: vCPU",
                                n_vcpus - 1)
    event.start = _opt_int(d.get("start"), f"{where}: start", U64 * 64)
    event.total = _int(d.get("total"), f"{where}: total", U64 * 64)
    event.overflows = _int(d.get("overflows"), f"{where}: overflows", U64)
    event.period = _int(d.get("period"), f"{where}: period", abi.MAX_PERIOD)
    if bool(event.period) != bool(attr.sample_period) or \
            0 < event.period < abi.MIN_PERIOD:
        raise StateError(f"{where}: period {event.period} does not fit "
                         "its attr")
    event.period_left = _opt_int(d.get("period_left"), f"{where}: period "
                                 "left", abi.MAX_PERIOD)
    event.threshold = _opt_int(d.get("threshold"), f"{where}: threshold",
                               U64 * 64)
    if event.start is not None and event.running_on is None:
        raise StateError(f"{where}: counting but on no vCPU")
    return event


def _restore_ring(backend: PerfBackend, raw: object,
                  n_vcpus: int) -> tuple[int, SampleRing]:
    d = _dict(raw, "sample ring")
    vcpu = _int(d.get("vcpu"), "sample ring vCPU", n_vcpus - 1)
    where = f"vCPU {vcpu}'s sample ring"
    capacity = _int(d.get("capacity"), f"{where}: capacity",
                    abi.SAMPLE_BUF_MAX // abi.SAMPLE.size)
    gpa = _int(d.get("gpa"), f"{where}: gpa", U64)
    size = abi.SAMPLE_BUF.size + capacity * abi.SAMPLE.size
    try:
        backend.memory.check(gpa, size, align=4096)
    except GuestMemoryError as e:
        raise StateError(f"{where}: {e}") from None
    watermark = _int(d.get("watermark"), f"{where}: watermark", capacity)
    if not capacity or not watermark:
        raise StateError(f"{where}: empty")
    ring = SampleRing(gpa, capacity, watermark,
                      head=_int(d.get("head"), f"{where}: head", U32),
                      lost=_int(d.get("lost"), f"{where}: lost", U32),
                      notified=_opt_int(d.get("notified"),
                                        f"{where}: notified", U32))
    age = d.get("notified_age")
    if isinstance(age, bool) or not isinstance(age, (int, float)) or age < 0:
        raise StateError(f"{where}: bad notified_age {age!r}")
    ring.notified_at = -float(age)      # rebased on the new clock below
    return vcpu, ring


def _linger(raw: object) -> dict[str, float]:
    d = _dict(raw, "linger_s")
    out = {}
    for what, s in d.items():
        if what not in LINGERS or isinstance(s, bool) or \
                not isinstance(s, (int, float)) or \
                not 0 <= s <= abi.COUNT_LINGER_MS / 1000:
            raise StateError(f"bad linger {what!r}: {s!r}")
        out[what] = float(s)
    return out


def _stats(raw: object) -> SampleStats:
    d = _dict(raw, "sample_stats")
    fields = SampleStats.__dataclass_fields__
    if set(d) != set(fields):
        raise StateError("sample_stats: unexpected fields")
    return SampleStats(**{k: _int(v, f"sample_stats {k}", U64)
                          for k, v in d.items()})


# -- field checks -----------------------------------------------------------

def _dict(raw: object, what: str) -> dict:
    if not isinstance(raw, dict):
        raise StateError(f"{what}: not an object")
    return raw


def _list(state: dict, key: str) -> list:
    value = state.get(key)
    if not isinstance(value, list):
        raise StateError(f"{key}: not a list")
    return value


def _bool(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise StateError(f"{what}: not true or false")
    return value


def _int(value: object, what: str, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or \
            not 0 <= value <= hi:
        raise StateError(f"{what}: {value!r} is not an integer in 0..{hi}")
    return value


def _opt_int(value: object, what: str, hi: int) -> int | None:
    return None if value is None else _int(value, what, hi)
