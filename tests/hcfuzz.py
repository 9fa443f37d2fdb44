"""Python twin of guest_kernel_patch/hctest/hct_gen.h, and what the host
must answer to each call.

The guest module pvperf_hctest (mode=fuzz) and this file generate the same
sequence of hypercalls from the same seed (xorshift64*, four draws per
call); tests/vm/test_robustness.py checks the two generators against each
other on the host (gcc) and compares the module's per-kind histograms of
->ret, and a hash of every (kind, ret), with ``predict()``.

``predict()`` is written from the ABI (contracts/pvperf_abi.h, each
operation's comment; pyhost/pmu/hypercall.py's docstring) and not from the
backend's code: each call has at most one defect, so its errno does not
depend on the order in which the host checks things.  The only state is
the set of tracked event ids that are open and running, all on one vCPU
(the module pins itself with migrate_disable()).
"""
from __future__ import annotations

import errno
import re
from collections import Counter
from dataclasses import dataclass

from pyhost import abi
from pyhost.pmu.model import COUNTERS_PER_VCPU

MASK64 = (1 << 64) - 1

FUZZ_ID_BASE = 50000
NR_FUZZ_IDS = 16
UNUSED_ID_BASE = 60000

# enum hct_kind, with the module's names; weights and variant counts.
KINDS = ("probe", "badnr", "badop", "fault", "pmu", "id_unknown", "id_fuzz",
         "open_valid", "open_attr", "open_param_addr", "open_attr_addr",
         "open_event_addr", "open_badid", "badblock")
(PROBE, BADNR, BADOP, FAULT, PMU, ID_UNKNOWN, ID_FUZZ, OPEN_VALID, OPEN_ATTR,
 OPEN_PARAM_ADDR, OPEN_ATTR_ADDR, OPEN_EVENT_ADDR, OPEN_BADID,
 BADBLOCK) = range(len(KINDS))
WEIGHTS = (2, 6, 6, 6, 8, 8, 16, 8, 10, 6, 6, 6, 4, 4)
NR_VARIANTS = (1, 2, 2, 2, 2, 3, 1, 3, 10, 6, 5, 5, 1, 4)
WEIGHT_TOTAL = 96
assert sum(WEIGHTS) == WEIGHT_TOTAL

# enum hct_attr_defect -> the errno the ABI gives for it.
ATTR_DEFECT_ERRNO = (
    errno.ENOENT,   # type not HARDWARE/HW_CACHE/RAW: not ours
    errno.ENOENT,   # HW_CACHE: not counted
    errno.ENOENT,   # HARDWARE config >= 16: no such event
    errno.EINVAL,   # RAW config beyond event|umask
    errno.ENOENT,   # RAW 0xffff: no such event
    errno.EINVAL,   # unknown attr flag
    errno.EINVAL,   # bp_type
    errno.EINVAL,   # bp_addr
    errno.EINVAL,   # bp_len
    errno.EINVAL,   # user and kernel both excluded
)

OPS = (abi.OP_OPEN, abi.OP_CLOSE, abi.OP_ENABLE, abi.OP_DISABLE, abi.OP_READ,
       abi.OP_PROBE, abi.OP_FAULT, abi.OP_PMU_DISABLE, abi.OP_PMU_ENABLE)
ID_OPS = (abi.OP_ENABLE, abi.OP_DISABLE, abi.OP_READ, abi.OP_CLOSE)

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3


class XorShift64Star:
    """xorshift64* (shifts 12/25/27, multiplier 0x2545f4914f6cdd1d)."""

    def __init__(self, seed: int):
        self.state = (seed & MASK64) or 0x9E3779B97F4A7C15

    def next(self) -> int:
        x = self.state
        x ^= x >> 12
        x ^= (x << 25) & MASK64
        x ^= x >> 27
        self.state = x
        return (x * 0x2545F4914F6CDD1D) & MASK64


@dataclass(frozen=True)
class Call:
    kind: int
    variant: int
    nr: int
    op: int
    event_id: int
    args: tuple[int, int, int]   # args[0] of OPEN/BADBLOCK: module's gpa
    v: tuple[int, int, int]


def _unused_id(v: int) -> int:
    return UNUSED_ID_BASE + v % (abi.MAX_EVENT_ID - UNUSED_ID_BASE)


def _big_id(v: int) -> int:
    return abi.MAX_EVENT_ID + v % ((1 << 32) - abi.MAX_EVENT_ID)


def next_call(g: XorShift64Star) -> Call:
    """hct_gen_next()."""
    r = g.next()
    pick, k = r % WEIGHT_TOTAL, 0
    while pick >= WEIGHTS[k]:
        pick -= WEIGHTS[k]
        k += 1
    variant = (r >> 32) % NR_VARIANTS[k]
    v = (g.next(), g.next(), g.next())
    nr, op, event_id = abi.HC_PERF_OP, abi.OP_OPEN, 0
    args = list(v)
    if k == PROBE:
        op = abi.OP_PROBE
    elif k == BADNR:
        nr = v[0] & 0xFFFFFFFF
        if nr == abi.HC_PERF_OP:
            nr ^= 0xFFFFFFFF
        op = (v[1] & 0xFFFFFFFF) if variant else OPS[v[1] % len(OPS)]
    elif k == BADOP:                      # 0, 6..0xff, or >= 0x10000
        if variant:
            op = v[0] % 0xFA and v[0] % 0xFA + 5
        else:
            op = (v[0] & 0xFFFFFFFF) | 0x10000
    elif k == FAULT:
        op = abi.OP_FAULT
        if not variant:
            args[1] = v[1] & 1
    elif k == PMU:
        op = abi.OP_PMU_ENABLE if variant else abi.OP_PMU_DISABLE
    elif k == BADBLOCK:
        op = abi.OP_PROBE
        args = [0, 0, 0]
    else:
        args[1], args[2] = v[2], ~v[2] & MASK64
        if k == ID_UNKNOWN:
            op = ID_OPS[v[0] % 4]
            event_id = (_unused_id(v[1]), v[1] | (1 << 32),
                        _big_id(v[1]))[variant]
            args[0] = event_id
        elif k == ID_FUZZ:
            op = ID_OPS[v[0] % 4]
            event_id = FUZZ_ID_BASE + v[1] % NR_FUZZ_IDS
            args[0] = event_id
        elif k == OPEN_VALID:
            event_id = FUZZ_ID_BASE + v[0] % NR_FUZZ_IDS
        elif k == OPEN_BADID:
            event_id = _big_id(v[0])
        else:
            event_id = _unused_id(v[0])
    return Call(k, variant, nr, op, event_id, tuple(args), v)


def generate(seed: int, n: int) -> tuple[list[Call], int]:
    """The first n calls for seed, and the generator's final state."""
    g = XorShift64Star(seed)
    calls = [next_call(g) for _ in range(n)]
    return calls, g.state


class HostModel:
    """What the host must answer, call by call (one vCPU)."""

    def __init__(self):
        self.open: set[int] = set()
        self.running: set[int] = set()

    def predict(self, c: Call) -> int:
        k = c.kind
        if k == BADNR:
            return -errno.ENOSYS          # before anything else, FAULT too
        if k == PROBE:
            return abi.ABI_VERSION
        if k == BADOP:
            return -errno.EINVAL
        if k == FAULT:
            return 0 if c.args[1] in (abi.MODE_KERNEL, abi.MODE_USER) \
                else -errno.EINVAL
        if k == PMU:
            return 0
        if k == ID_UNKNOWN:
            return -errno.ENOENT
        if k == ID_FUZZ:
            return self._id_op(c.op, c.event_id)
        if k == OPEN_VALID:
            if c.event_id in self.open:
                return -errno.EEXIST
            self.open.add(c.event_id)
            return 0
        if k == OPEN_ATTR:
            return -ATTR_DEFECT_ERRNO[c.variant]
        if k in (OPEN_PARAM_ADDR, OPEN_ATTR_ADDR, OPEN_EVENT_ADDR):
            return -errno.EFAULT
        if k == OPEN_BADID:
            return -errno.EINVAL
        if k == BADBLOCK:
            return -errno.ENOSYS          # never served: ->ret untouched
        raise AssertionError(f"kind {k}")

    def _id_op(self, op: int, event_id: int) -> int:
        if event_id not in self.open:
            return -errno.ENOENT
        if op == abi.OP_ENABLE:
            if event_id in self.running or \
                    len(self.running) >= COUNTERS_PER_VCPU:
                return -errno.EBUSY
            self.running.add(event_id)
        elif op == abi.OP_DISABLE:
            self.running.discard(event_id)
        elif op == abi.OP_CLOSE:
            self.open.discard(event_id)
            self.running.discard(event_id)
        return 0


@dataclass
class Expected:
    per_kind: dict[str, Counter]
    all: Counter
    ok: int
    errors: int
    hash: int
    prng: int


def expected(seed: int, n: int) -> Expected:
    calls, prng = generate(seed, n)
    model = HostModel()
    per_kind = {name: Counter() for name in KINDS}
    h = FNV_OFFSET
    for c in calls:
        ret = model.predict(c)
        per_kind[KINDS[c.kind]][ret] += 1
        h = ((h ^ c.kind) * FNV_PRIME) & MASK64
        h = ((h ^ (ret & MASK64)) * FNV_PRIME) & MASK64
    total = sum(per_kind.values(), Counter())
    ok = sum(n for r, n in total.items() if r >= 0)
    return Expected(per_kind, total, ok, n - ok, h, prng)


# -- the module's dmesg lines --------------------------------------------------

KIND_RE = re.compile(r"pvperf_hctest: fuzz kind=(\w+) n=(\d+) rets=(\S*)")
ALL_RE = re.compile(r"pvperf_hctest: fuzz all n=(\d+) rets=(\S*)")
SUMMARY_RE = re.compile(r"pvperf_hctest: fuzz (n=\d+ .*)$")


def _rets(text: str) -> Counter:
    out = Counter()
    for item in filter(None, text.split(",")):
        ret, n = item.rsplit(":", 1)
        out[ret if ret == "other" else int(ret)] += int(n)
    return out


@dataclass
class Observed:
    per_kind: dict[str, Counter]
    all: Counter
    summary: dict[str, int]


def parse(text: str) -> Observed:
    per_kind, total, summary = {}, Counter(), {}
    for line in text.splitlines():
        if m := KIND_RE.search(line):
            per_kind[m.group(1)] = _rets(m.group(3))
        elif m := ALL_RE.search(line):
            total = _rets(m.group(2))
        elif m := SUMMARY_RE.search(line):
            summary = {k: int(v, 0) for k, v in
                       (f.split("=", 1) for f in m.group(1).split())}
    return Observed(per_kind, total, summary)
