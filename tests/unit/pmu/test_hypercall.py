"""The hypercall backend against guest memory it must not trust.

A bytearray stands in for guest RAM here (the VM tests use the real shared
file); the fuzzer checks the backend never crashes and writes nothing
outside the hypercall block's ret and registered guest_perf_events.
"""
import errno
import logging
import random

import pytest

from pyhost import abi
from pyhost.ram import RamLayout
from pyhost.pmu import plugin_protocol as proto
from pyhost.pmu.guestmem import GuestMemory, GuestMemoryError
from pyhost.pmu.hypercall import PerfBackend, RateLimiter
from pyhost.pmu.model import Pmu

RAM = 1 << 20
BLOCK = 0x1000
PARAM, ATTR, EVENT = 0x2000, 0x2100, 0x2200
KVADDR = 0xFFFFFFFF81000000


def setup():
    buf = bytearray(RAM)
    return buf, PerfBackend(GuestMemory(buf), max_vcpus=2)


def call(backend, buf, op, args=(0,), vcpu=0, counters=(0, 0, 0, 0),
         nr=abi.HC_PERF_OP, gpa=BLOCK, vaddr=KVADDR):
    buf[gpa:gpa + 64] = abi.pack_hcall(nr, op, args, ret=-errno.ENOSYS)
    counters = tuple(counters) + (0,) * (proto.NR_COUNTERS - len(counters))
    flags = backend.handle(proto.HcallMessage(vcpu, gpa, vaddr, counters))
    ret = int.from_bytes(buf[gpa + abi.HCALL_OFFSET_RET:gpa + 48], "little",
                         signed=True)
    return ret, flags


def open_event(backend, buf, event_id=1, type_=0, config=1, flags=0):
    buf[ATTR:ATTR + 72] = abi.GuestPerfAttr(type_, config, 0, 0, 0, flags,
                                            0, 0, 0).pack()
    buf[PARAM:PARAM + 24] = abi.GuestPerfParam(ATTR, EVENT, event_id).pack()
    return call(backend, buf, abi.OP_OPEN, (PARAM,))


def count(buf):
    return int.from_bytes(buf[EVENT:EVENT + 8], "little")


def test_probe_returns_version():
    buf, be = setup()
    assert call(be, buf, abi.OP_PROBE) == (abi.ABI_VERSION, 0)


def test_open_enable_disable_read_close():
    buf, be = setup()
    assert open_event(be, buf) == (0, proto.REPLY_COUNTING)
    assert call(be, buf, abi.OP_ENABLE, (1,), counters=(10, 100, 0, 0))[0] == 0
    assert call(be, buf, abi.OP_READ, (1,), counters=(11, 150, 0, 0))[0] == 0
    assert count(buf) == 51
    assert call(be, buf, abi.OP_DISABLE, (1,), counters=(20, 200, 0, 0))[0] == 0
    assert count(buf) == 110
    assert call(be, buf, abi.OP_CLOSE, (1,)) == (0, proto.REPLY_COUNTING)


def test_counting_lingers_after_the_last_close_until_probe_or_timeout():
    """A mode switch retranslates all guest code: the plugin keeps counting
    COUNT_LINGER_MS after the last CLOSE; the guest's PROBE ends it."""
    now = [100.0]
    buf = bytearray(RAM)
    be = PerfBackend(GuestMemory(buf), max_vcpus=2, clock=lambda: now[0])
    linger = abi.COUNT_LINGER_MS / 1000
    assert open_event(be, buf) == (0, proto.REPLY_COUNTING)
    assert call(be, buf, abi.OP_CLOSE, (1,)) == (0, proto.REPLY_COUNTING)
    now[0] += linger * 0.9
    assert call(be, buf, abi.OP_READ, (1,))[1] == proto.REPLY_COUNTING
    now[0] += linger * 0.2
    assert call(be, buf, abi.OP_READ, (1,))[1] == 0
    assert open_event(be, buf) == (0, proto.REPLY_COUNTING)
    assert call(be, buf, abi.OP_CLOSE, (1,)) == (0, proto.REPLY_COUNTING)
    assert call(be, buf, abi.OP_PROBE) == (abi.ABI_VERSION, 0)


@pytest.mark.parametrize("op,args,nr,err", [
    (0x77, (0,), abi.HC_PERF_OP, errno.EINVAL),
    (abi.OP_ENABLE, (99,), abi.HC_PERF_OP, errno.ENOENT),
    (abi.OP_PROBE, (0,), 42, errno.ENOSYS),
    (abi.OP_OPEN, (RAM - 8,), abi.HC_PERF_OP, errno.EFAULT),
    (abi.OP_OPEN, (PARAM + 4,), abi.HC_PERF_OP, errno.EFAULT),
])
def test_bad_calls_get_errnos(op, args, nr, err):
    buf, be = setup()
    assert call(be, buf, op, args, nr=nr)[0] == -err


def test_events_writes_the_listing_or_refuses():
    """EVENTS writes "name=sysfs string" lines and a NUL, nothing past
    them, and returns the length; too small a buffer gets -ENOSPC and
    nothing written; a size beyond the ABI's maximum -EINVAL."""
    buf, be = setup()
    out = 0x3000
    ret, _ = call(be, buf, abi.OP_EVENTS, (out, abi.EVENTS_BUF_MAX))
    text = bytes(buf[out:out + ret]).decode()
    assert ret > 0 and buf[out + ret] == 0 and not any(buf[out + ret:])
    lines = text.splitlines()
    assert len(lines) == len([e for e in be.pmu.event_defs()
                              if e.cache_config is None])
    assert text.endswith("\n")
    assert "instructions=event=0xc0" in lines
    assert not any(l.startswith("branch-loads=") for l in lines)
    buf2, be2 = setup()
    assert call(be2, buf2, abi.OP_EVENTS, (out, ret))[0] == -errno.ENOSPC
    assert not any(buf2[out:out + ret + 1])
    assert call(be2, buf2, abi.OP_EVENTS,
                (out, abi.EVENTS_BUF_MAX + 1))[0] == -errno.EINVAL
    assert call(be2, buf2, abi.OP_EVENTS, (RAM - 16, 4096))[0] == -errno.EFAULT


def test_user_mode_marker_store_never_reaches_the_backend():
    buf, be = setup()
    ret, _ = call(be, buf, abi.OP_PROBE, vaddr=0x401000)
    assert ret == -errno.ENOSYS     # untouched
    assert be.stats.by_op == {}


def test_unaligned_or_outside_block_is_ignored():
    buf, be = setup()
    before = bytes(buf)
    for gpa in (BLOCK + 8, RAM - 32, RAM + 4096):
        be.handle(proto.HcallMessage(0, gpa, KVADDR, (0,) * proto.NR_COUNTERS))
    assert bytes(buf) == before


def test_guest_event_address_is_checked():
    buf, be = setup()
    buf[ATTR:ATTR + 72] = abi.GuestPerfAttr(0, 1, 0, 0, 0, 0, 0, 0, 0).pack()
    for bad in (RAM - 8, EVENT + 4):
        buf[PARAM:PARAM + 24] = abi.GuestPerfParam(ATTR, bad, 1).pack()
        assert call(be, buf, abi.OP_OPEN, (PARAM,))[0] == -errno.EFAULT


def test_fuzz_backend_survives_and_writes_only_its_structures(caplog):
    """Thousands of malformed hypercalls: no exception, writes bounded."""
    rng = random.Random(0x5EED)
    buf, be = setup()
    be.limiter = RateLimiter(burst=5, interval=1e9)
    allowed = set(range(BLOCK + 40, BLOCK + 48))   # ret
    for i in range(4000):
        # A guest filling memory with random structures it points at.
        buf[PARAM:PARAM + 24] = abi.GuestPerfParam(
            rng.choice([ATTR, rng.randrange(0, 2 * RAM)]),
            rng.choice([EVENT, rng.randrange(0, 2 * RAM)]),
            rng.choice([rng.randrange(0, 8), rng.randrange(0, 1 << 32)]),
        ).pack()
        buf[ATTR:ATTR + 72] = rng.randbytes(72) if rng.random() < 0.5 else \
            abi.GuestPerfAttr(rng.randrange(6), rng.randrange(12), 0, 0, 0,
                              rng.choice([0, 1, 2, rng.randrange(1 << 20)]),
                              0, 0, 0).pack()
        snapshot_before = bytes(buf)
        op = rng.choice([1, 2, 3, 4, 5, 0x100, rng.randrange(1 << 32)])
        args = (rng.choice([PARAM, rng.randrange(0, 8),
                            rng.randrange(0, 1 << 64)]),)
        vcpu = rng.randrange(3)
        ctr = tuple(rng.randrange(1 << 40) for _ in range(4))
        call(be, buf, op, args, vcpu=vcpu, counters=ctr)
        changed = {j for j in range(RAM)
                   if buf[j] != snapshot_before[j]} if i % 400 == 0 else set()
        events = {e.guest_event_gpa for e in be.pmu.events.values()}
        ok = allowed | {g + k for g in events for k in range(16)}
        # The block itself was rewritten by call(); only check other bytes.
        changed -= set(range(BLOCK, BLOCK + 64))
        assert changed <= ok, sorted(changed)[:8]
    assert be.stats.calls == 4000
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) <= 5 * 3      # burst per vCPU, 3 vCPU indices


def test_rate_limiter_with_fake_clock():
    now = [0.0]
    rl = RateLimiter(burst=2, interval=10, clock=lambda: now[0])
    assert [rl.allow(0) for _ in range(4)] == [True, True, False, False]
    assert rl.allow(1)
    now[0] = 10.0
    assert rl.allow(0)
    assert rl.suppressed == 2


def test_guest_memory_bounds():
    mem = GuestMemory(bytearray(4096))
    for gpa, size, align in ((4090, 8, 1), (-1, 4, 1), (8, 0, 1), (4, 8, 8)):
        with pytest.raises(GuestMemoryError):
            mem.read(gpa, size, align)
    mem.write(8, b"abcd", align=8)
    assert mem.read(8, 4) == b"abcd"


def test_guest_memory_from_a_ram_base():
    """RAM from gpa 0x40000000 (arm64's virt): the gpa less the base
    indexes the buffer, and gpas below the base are outside RAM."""
    buf = bytearray(4096)
    mem = GuestMemory(buf, RamLayout(0x40000000, len(buf)))
    mem.write(0x40000008, b"abcd", align=8)
    assert buf[8:12] == b"abcd"
    assert mem.read(0x40000008, 4) == b"abcd"
    for gpa, size in ((8, 4), (0x3ffffffc, 8), (0x40000ffc, 8)):
        with pytest.raises(GuestMemoryError):
            mem.read(gpa, size)


def test_guest_memory_around_a_hole():
    """RAM in two ranges (x86's pc beyond 3 GiB; here the hole starts
    after one page): the second range is the file after the first, and
    the hole and a read straddling it are outside RAM."""
    buf = bytearray(8192)
    mem = GuestMemory(buf, RamLayout(0, len(buf), hole=(4096, 1 << 32)))
    mem.write(1 << 32, b"high", align=4)
    assert buf[4096:4100] == b"high"
    mem.write(4092, b"low!", align=4)
    assert buf[4092:4096] == b"low!"
    for gpa, size in ((4096, 4), (4092, 8), ((1 << 32) - 4, 8),
                      ((1 << 32) + 4092, 8)):
        with pytest.raises(GuestMemoryError):
            mem.read(gpa, size)


def test_events_the_host_does_not_count_log_at_debug(caplog):
    """perf in the guest probes events (perf list, fallbacks) and gets
    -ENOENT, its documented fallback: routine, so DEBUG, not WARNING.
    Anything else a guest gets refused stays a WARNING."""
    buf, be = setup()
    caplog.set_level(logging.DEBUG, logger="pvperf")
    assert open_event(be, buf, type_=0, config=7)[0] == -errno.ENOENT
    assert open_event(be, buf, type_=4, config=1 << 20)[0] == -errno.EINVAL
    levels = [(r.levelno, "ENOENT" in r.getMessage())
              for r in caplog.records if r.name == "pvperf.hypercall"]
    assert levels == [(logging.DEBUG, True), (logging.WARNING, False)]


def test_the_backend_derives_its_pmu_from_the_run_settings():
    """The launcher passes --timing and --deterministic; the backend's
    Pmu follows from them (a deterministic run samples synchronously),
    and a Pmu given explicitly must agree."""
    be = PerfBackend(GuestMemory(bytearray(4096)), timing=True,
                     deterministic=True)
    assert be.pmu.timing and be.pmu.sync_samples
    be = PerfBackend(GuestMemory(bytearray(4096)))
    assert not be.pmu.timing and not be.pmu.sync_samples
    with pytest.raises(ValueError):
        PerfBackend(GuestMemory(bytearray(4096)), pmu=Pmu(),
                    deterministic=True)


def test_the_kernel_half_is_the_guest_architectures():
    """A marker store below the Arch's kernel half ran in user mode and is
    ignored (->ret untouched); arm64's half starts lower than x86's."""
    buf = bytearray(RAM)
    be = PerfBackend(GuestMemory(buf),
                     kernel_half_start=abi.AARCH64_KERNEL_HALF_START)
    assert call(be, buf, abi.OP_PROBE,
                vaddr=abi.AARCH64_KERNEL_HALF_START)[0] == abi.ABI_VERSION
    assert call(be, buf, abi.OP_PROBE,
                vaddr=abi.AARCH64_KERNEL_HALF_START - 4)[0] == -errno.ENOSYS
    buf, be = setup()
    assert call(be, buf, abi.OP_PROBE,
                vaddr=abi.AARCH64_KERNEL_HALF_START)[0] == -errno.ENOSYS


class _Doorbell:
    """What the backend asks of a doorbell device: that it has one."""
    def handover(self, vcpu, conn):
        return None


@pytest.mark.parametrize("precise, period, plugin_writes, timer", [
    (0, 1_000_000, True, True), (2, 1_000_000, True, False),
    (0, 1_000_000, False, False), (0, 999_999, True, False)])
def test_host_time_sampling_goes_by_ticks_only_when_it_may_skid(
        precise, period, plugin_writes, timer):
    """emu-host-ns sampled without :p at 1 kHz or slower, with the plugin
    writing the rings: REPLY_HOST_TIME without REPLY_SAMPLING (the
    plugin's ticks, no instrumented check); with :pp, faster, or when the
    service writes the rings, the countdown paces its checks as before
    (REPLY_SAMPLING)."""
    buf, be = setup()
    be.sampler.nmi = _Doorbell()
    be.plugin_writes = plugin_writes
    buf[ATTR:ATTR + 72] = abi.GuestPerfAttr(
        4, 0x08EE, period, 0, 0, precise << abi.ATTR_PRECISE_SHIFT,
        0, 0, 0).pack()
    buf[PARAM:PARAM + 24] = abi.GuestPerfParam(ATTR, EVENT, 1).pack()
    ret, flags = call(be, buf, abi.OP_OPEN, (PARAM,))
    assert ret == 0
    assert flags & proto.REPLY_HOST_TIME
    assert bool(flags & proto.REPLY_SAMPLING) is not timer
