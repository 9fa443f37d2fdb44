"""Coverage-guided fuzzing of the host service (atheris, libFuzzer's engine).

One input is a script a malicious guest (and a garbled plugin) could play:
each step scribbles on guest RAM, issues a hypercall whose block it wrote
itself, sends an overflow message, or hands raw bytes to the protocol
parser.  PerfBackend runs on a GuestMemory over a bytearray, with a fake
clock.  After every step the invariants the ABI promises are checked:

* no exception but the documented ones (ProtocolError from the parser;
  nothing at all from PerfBackend.handle_reply / overflow);
* every ->ret one of the ABI's answers (the version, 0, an EVENTS
  length, or -errno from the documented set); an unusable block (user
  doorbell, unknown vCPU, unaligned or outside RAM) is left untouched;
* a reply the plugin can be sent (known flag bits, pack_reply accepts
  the slots);
* no byte of guest RAM changed outside the registered structures: the
  block's ret, each open event's guest_perf_event, each registered sample
  ring, and the EVENTS output buffer;
* the service's state bounded (events, rings, rate-limiter keys, linger
  keys, per-op statistics).

Run by tests/plugin/test_fuzz.py (short run, regression inputs) and
scripts/fuzz.sh (long run):  python tests/fuzz/hostfuzz.py [libFuzzer args]
"""
from __future__ import annotations

import errno
import logging
import sys

import atheris

with atheris.instrument_imports():
    from pyhost import abi
    from pyhost.pmu import plugin_protocol as proto
    from pyhost.pmu.guestmem import GuestMemory
    from pyhost.pmu.hypercall import PerfBackend, RateLimiter

# Exercise the logging paths (rate limiter included) without printing.
_log = logging.getLogger("pvperf")
_log.addHandler(logging.NullHandler())
_log.propagate = False
_log.setLevel(logging.DEBUG)

RAM = 1 << 16
MAX_VCPUS = 2
MAX_STEPS = 48
KVADDR = 0xFFFFFFFF81000000
ERRNOS = {errno.ENOSYS, errno.EINVAL, errno.ENOENT, errno.EFAULT,
          errno.EEXIST, errno.ENOSPC, errno.EBUSY, errno.EOPNOTSUPP}
REPLY_KNOWN = (1 << 10) - 1
OPS = sorted(abi.OP_NAMES) + [abi.OP_FAULT, 0, 6, 0x108, 0xFFFFFFFF]
# Addresses a guest points at: aligned spots, edges of RAM, beyond it.
GPAS = (0, 0x40, 0x1000, 0x2000, 0x2100, 0x2200, 0x3000, 0x8000,
        RAM - 64, RAM - 8, RAM, RAM + 4096, 1 << 63, (1 << 64) - 8)
IDS = (0, 1, 2, 3, 7, abi.MAX_EVENT_ID - 1, abi.MAX_EVENT_ID, 1 << 32)
SIZES = (0, 1, 64, abi.SAMPLE_BUF_MIN, 8192, abi.SAMPLE_BUF_MAX,
         abi.SAMPLE_BUF_MAX * 2, abi.EVENTS_BUF_MAX, abi.EVENTS_BUF_MAX + 1)


class Fuzz:
    """One run: a fresh backend, guest RAM, and a fake clock."""

    def __init__(self, fdp: atheris.FuzzedDataProvider):
        self.fdp = fdp
        self.ram = bytearray(RAM)
        self.now = 1000.0
        self.nmis = 0
        clock = lambda: self.now                       # noqa: E731
        self.be = PerfBackend(GuestMemory(self.ram), max_vcpus=MAX_VCPUS,
                              limiter=RateLimiter(clock=clock),
                              nmi=self._nmi, clock=clock)

    def _nmi(self, wait: bool = False, inject: bool = True) -> None:
        self.nmis += inject

    # -- what the fuzzer picks ------------------------------------------------

    def pick(self, choices, bits: int = 64) -> int:
        """Mostly a meaningful value, sometimes anything (``bits`` wide)."""
        if self.fdp.ConsumeIntInRange(0, 7):
            return self.fdp.PickValueInList(list(choices)) & ((1 << bits) - 1)
        return self.fdp.ConsumeIntInRange(0, (1 << bits) - 1)

    def gpa(self) -> int:
        return self.pick(GPAS)

    # -- steps --------------------------------------------------------------

    def run(self) -> None:
        for _ in range(self.fdp.ConsumeIntInRange(1, MAX_STEPS)):
            if self.fdp.remaining_bytes() == 0:
                break
            self.now += self.fdp.ConsumeIntInRange(0, 3000) / 1000
            step = self.fdp.ConsumeIntInRange(0, 10)
            if step == 10:
                self.session()
            elif step <= 1:
                self.scribble()
            elif step == 2:
                self.write_struct()
            elif step == 3:
                self.overflow()
            elif step == 4:
                self.parse()
            else:
                self.hcall()
            self.check_bounded()

    def scribble(self) -> None:
        """The guest writes anything anywhere in its RAM."""
        data = self.fdp.ConsumeBytes(self.fdp.ConsumeIntInRange(1, 96))
        at = self.fdp.ConsumeIntInRange(0, RAM - 1)
        self.ram[at:at + len(data)] = data[:RAM - at]

    def write_struct(self) -> None:
        """A plausible attr or param, so OPEN gets past its first checks."""
        if self.fdp.ConsumeBool():
            flags = self.pick((0, abi.ATTR_EXCLUDE_USER, abi.ATTR_FREQ,
                               abi.ATTR_BUFFERED, 3 << abi.ATTR_RANDOM_SHIFT,
                               abi.ATTR_EXCLUDE_KERNEL), 32)
            raw = abi.GuestPerfAttr(
                self.pick((0, 1, 3, 4, 5), 32), self.pick(range(12)),
                self.pick((0, 1, 1000, abi.MIN_PERIOD, abi.MAX_PERIOD)),
                self.pick((0, 1, 3, 0x3F)), 0, flags, 0, 0, 0).pack()
            at = 0x2100
        else:
            raw = abi.GuestPerfParam(self.gpa(), self.gpa(),
                                     self.pick(IDS, 32)).pack()
            at = 0x2000
        self.ram[at:at + len(raw)] = raw

    def parse(self) -> None:
        raw = self.fdp.ConsumeBytes(self.fdp.ConsumeIntInRange(0, 320))
        if self.fdp.ConsumeBool() and len(raw) >= 4:
            magic = self.fdp.PickValueInList([proto.HCALL_MAGIC,
                                              proto.OVERFLOW_MAGIC])
            raw = magic.to_bytes(4, "little") + raw[4:]
        try:
            msg = proto.unpack_message(raw)
        except proto.ProtocolError:
            return
        assert msg.pack() == raw, "a parsed message does not round-trip"

    def overflow(self) -> None:
        """An overflow, often of an open event at its armed threshold."""
        events = self.be.pmu.events
        event_id = self.pick(IDS, 32)
        threshold = self.fdp.ConsumeIntInRange(0, (1 << 64) - 1)
        if events and self.fdp.ConsumeBool():
            event_id = self.fdp.PickValueInList(sorted(events))
            threshold = events[event_id].threshold or 0
        msg = proto.OverflowMessage(
            self.pick(range(MAX_VCPUS + 1), 32), event_id,
            self.pick((abi.MODE_KERNEL, abi.MODE_USER), 16),
            self.fdp.ConsumeIntInRange(0, (1 << 64) - 1), threshold,
            self.pick((proto.DISARMED, threshold + 1000, 0)) & proto.DISARMED,
            self.fdp.ConsumeIntInRange(0, 3), data_addr=0)
        before = bytes(self.ram)
        self.be.overflow(proto.unpack_message(msg.pack()))
        self.check_writes(before, self.allowed())

    def session(self) -> None:
        """What a well-behaved driver does before samples flow (so that
        the fuzzer reaches delivery): OPEN a sampling event, ENABLE it,
        register this vCPU's ring; the fuzzer still picks the values."""
        event_id = self.fdp.ConsumeIntInRange(0, 3)
        raw = abi.GuestPerfAttr(0, self.pick(range(12)), self.pick(
            (abi.MIN_PERIOD, 1000, 1 << 20)), 0, 0, self.pick(
            (0, abi.ATTR_BUFFERED, abi.ATTR_FREQ)), 0, 0, 0).pack()
        self.ram[0x2100:0x2100 + len(raw)] = raw
        raw = abi.GuestPerfParam(0x2100, 0x2200 + 16 * event_id,
                                 event_id).pack()
        self.ram[0x2000:0x2000 + len(raw)] = raw
        self.hcall(abi.OP_OPEN, (0x2000, 0, 0))
        self.hcall(abi.OP_ENABLE, (event_id, 0, 0))
        self.hcall(abi.OP_SAMPLE_BUF, (0x8000, abi.SAMPLE_BUF_MIN,
                                       self.pick((1, 8, 100))))

    def hcall(self, op: int | None = None, args=None) -> None:
        block = self.pick(GPAS) & ~(self.fdp.ConsumeBool() and 63)
        if op is None:
            op = self.pick(OPS, 32)
            args = (self.pick(GPAS + IDS), self.pick(SIZES + IDS + GPAS),
                    self.pick((0, 1, 8, 100)))
        nr = abi.HC_PERF_OP if self.fdp.ConsumeIntInRange(0, 15) else \
            self.fdp.ConsumeIntInRange(0, (1 << 32) - 1)
        if block + abi.HCALL.size <= RAM:
            self.ram[block:block + abi.HCALL.size] = abi.pack_hcall(
                nr, op, args, ret=-errno.ENOSYS)
        vaddr = KVADDR if self.fdp.ConsumeIntInRange(0, 15) else 0x401000
        counters = tuple(self.fdp.ConsumeIntInRange(0, (1 << 64) - 1)
                         if self.fdp.ConsumeBool() else 0
                         for _ in range(proto.NR_COUNTERS))
        msg = proto.HcallMessage(self.pick(range(MAX_VCPUS + 1), 32), block,
                                 vaddr, counters)
        before = bytes(self.ram)
        allowed = self.allowed()
        flags, slots = self.be.handle_reply(proto.unpack_message(msg.pack()))
        assert not flags & ~REPLY_KNOWN, f"reply flags {flags:#x}"
        assert len(proto.pack_reply(flags, slots)) == proto.REPLY_MSG_SIZE
        usable = (vaddr >= abi.X86_64_KERNEL_HALF_START and msg.vcpu < MAX_VCPUS
                  and block % abi.HCALL_ALIGN == 0
                  and block + abi.HCALL.size <= RAM)
        if not usable:
            assert bytes(self.ram) == before, "unusable block: RAM changed"
            return
        at = block + abi.HCALL_OFFSET_RET
        ret = int.from_bytes(self.ram[at:at + 8], "little", signed=True)
        self.check_ret(op, nr, ret, args)
        allowed |= self.allowed() | set(range(at, at + 8))
        if op == abi.OP_EVENTS and ret > 0:
            allowed |= set(range(args[0], args[0] + ret + 1))
        self.check_writes(before, allowed)

    # -- invariants -----------------------------------------------------------

    @staticmethod
    def check_ret(op: int, nr: int, ret: int, args) -> None:
        if ret < 0:
            assert -ret in ERRNOS, f"op {op:#x}: ret {ret} not an ABI errno"
        elif nr == abi.HC_PERF_OP and op == abi.OP_PROBE:
            assert ret == abi.ABI_VERSION
        elif nr == abi.HC_PERF_OP and op == abi.OP_EVENTS:
            assert 0 < ret < min(args[1], abi.EVENTS_BUF_MAX)
        else:
            assert ret == 0 and nr == abi.HC_PERF_OP, \
                f"op {op:#x} nr {nr}: ret {ret}"

    def allowed(self) -> set[int]:
        """Guest RAM the service may write: registered structures."""
        out = set()
        for e in self.be.pmu.events.values():
            out.update(range(e.guest_event_gpa,
                             e.guest_event_gpa + abi.GUEST_EVENT.size))
        for ring in self.be.sampler.rings.values():
            size = abi.SAMPLE_BUF.size + ring.capacity * abi.SAMPLE.size
            out.update(range(ring.gpa, ring.gpa + size))
        return out

    def check_writes(self, before: bytes, allowed: set[int]) -> None:
        if bytes(self.ram) == before:
            return
        changed = {i for i in range(RAM) if self.ram[i] != before[i]}
        stray = sorted(changed - allowed)
        assert not stray, f"wrote outside registered structures: {stray[:8]}"

    def check_bounded(self) -> None:
        be = self.be
        assert len(be.pmu.events) <= be.pmu.max_events
        assert set(be.sampler.rings) <= set(range(MAX_VCPUS))
        assert len(be.limiter._window) <= MAX_VCPUS + 1
        assert len(be._linger_until) <= 5
        assert set(be.stats.by_op) <= set(abi.OP_NAMES.values())


def one_input(data: bytes) -> None:
    Fuzz(atheris.FuzzedDataProvider(data)).run()


def main(argv: list[str]) -> None:
    atheris.Setup(argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
