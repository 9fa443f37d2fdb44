"""pyhost.pmu.sampling and pyhost.pmu.nmi: the host half of sampling, on
a RAM buffer and a fake clock (the guest side is in test_sampling.py)."""
from __future__ import annotations

import asyncio
import errno
import threading

import pytest

from pyhost import abi
from pyhost.pmu import plugin_protocol as proto
from pyhost.pmu.events import PERF_TYPE_HARDWARE, HW_INSTRUCTIONS
from pyhost.pmu.guestmem import GuestMemory
from pyhost.pmu.model import Pmu, PmuError
from pyhost.pmu.nmi import NmiInjector
from pyhost.pmu.sampling import NMI_RETRY_S, Sampler

RING = 0x10000
EVENT_GPA = 0x2000
SIZE = 4096
CAPACITY = (SIZE - abi.SAMPLE_BUF.size) // abi.SAMPLE.size


def u32(mem: GuestMemory, gpa: int) -> int:
    return int.from_bytes(mem.read(gpa, 4), "little")


@pytest.fixture
def setup():
    mem = GuestMemory(bytearray(1 << 20))
    now = [0.0]
    nmis = []
    sampler = Sampler(mem, nmi=lambda wait=False, inject=True, vcpu=0:
                      nmis.append(wait if inject else "settle"),
                      clock=lambda: now[0])
    sampler.set_buffer(0, RING, SIZE, 1)
    attr = abi.GuestPerfAttr(PERF_TYPE_HARDWARE, HW_INSTRUCTIONS, 1000, 0,
                             0, 0, 0, 0, 0)
    event = Pmu().open(7, attr, EVENT_GPA)
    return mem, sampler, event, nmis, now


def overflow(ip: int, flags: int = 0) -> proto.OverflowMessage:
    return proto.OverflowMessage(0, 7, abi.MODE_USER, ip, 1000, 2000, flags)


def test_record_then_head_then_one_nmi(setup):
    mem, sampler, event, nmis, now = setup
    sampler.deliver(overflow(0x401000), event)
    rec = abi.SAMPLE.unpack(mem.read(RING + abi.SAMPLE_BUF.size,
                                     abi.SAMPLE.size))
    assert rec[:6] == (7, abi.MODE_USER, 0, 0x401000, 0, 1000)
    assert u32(mem, RING + abi.SAMPLE_BUF_OFFSET_HEAD) == 1
    assert u32(mem, EVENT_GPA + 8) == 1              # overflows
    assert u32(mem, RING + abi.SAMPLE_BUF_OFFSET_NMIS) == 1
    assert nmis == [False]
    # Not answered (tail still 0): no second NMI until NMI_RETRY_S.
    sampler.deliver(overflow(0x401004), event)
    assert nmis == [False]
    now[0] += NMI_RETRY_S
    sampler.deliver(overflow(0x401008), event)
    assert nmis == [False, False]
    assert sampler.stats.samples == 3 and sampler.stats.nmis == 2


def test_full_ring_counts_lost(setup):
    mem, sampler, event, nmis, now = setup
    for i in range(CAPACITY + 2):
        sampler.deliver(overflow(0x401000 + i), event)
    assert u32(mem, RING + abi.SAMPLE_BUF_OFFSET_HEAD) == CAPACITY
    assert u32(mem, RING + abi.SAMPLE_BUF_OFFSET_LOST) == 2
    # ... and in the event, whose driver reports them to perf.
    assert u32(mem, EVENT_GPA + abi.GUEST_EVENT_OFFSET_LOST) == 2
    assert u32(mem, EVENT_GPA + abi.GUEST_EVENT_OFFSET_OVERFLOWS) == \
        CAPACITY + 2
    assert sampler.stats.lost == 2


def test_sync_overflow_waits_for_its_nmi(setup):
    mem, sampler, event, nmis, now = setup
    sampler.deliver(overflow(0x401000, proto.SYNC), event)
    assert nmis == [True]


def test_sync_overflow_waits_for_the_outstanding_nmi(setup):
    """The plugin's flow control: a SYNC overflow while an NMI is still
    unanswered injects no second one but waits until that one is raised
    (otherwise the vCPU runs on and the ring overflows)."""
    mem, sampler, event, nmis, now = setup
    sampler.deliver(overflow(0x401000), event)
    sampler.deliver(overflow(0x401004, proto.SYNC), event)
    assert nmis == [False, "settle"]
    assert u32(mem, RING + abi.SAMPLE_BUF_OFFSET_NMIS) == 1
    assert sampler.stats.nmis == 1


def test_bad_buffers_are_refused(setup):
    mem, sampler, event, nmis, now = setup
    for gpa, size, watermark in ((RING, 3000, 1), (RING, SIZE, 0),
                                 (RING, SIZE, CAPACITY + 1)):
        with pytest.raises(PmuError) as e:
            sampler.set_buffer(1, gpa, size, watermark)
        assert e.value.errno == errno.EINVAL
    sampler.set_buffer(0, 0, 0, 0)                      # unregister
    sampler.deliver(overflow(0x401000), event)
    assert sampler.stats.lost == 1 and nmis == []


def test_nmi_injector_is_bound_explicitly():
    """Requests before bind and after close are dropped; in between they
    run the inject coroutine on the bound loop (from another thread)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    injected = []

    async def inject():
        injected.append(threading.current_thread())

    try:
        nmi = NmiInjector()
        nmi()
        assert (nmi.sent, nmi.dropped) == (0, 1)
        nmi.bind(loop, inject)
        nmi(wait=True)
        assert injected == [thread] and nmi.sent == 1
        nmi.close()
        nmi()
        assert (nmi.sent, nmi.dropped, nmi.failed) == (1, 2, 0)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def test_plugin_written_samples_are_mirrored_for_the_next_handover(setup):
    """Samples the plugin delivered itself (it holds the doorbell, so it
    writes the records it rings for): the service writes
    nothing into the ring, mirrors head, lost and the raised interrupt,
    and the next handover (or its own writes, once the plugin gives the
    ring back) go on from there."""
    mem, sampler, event, nmis, now = setup
    sampler.deliver(overflow(0x401000), event)        # the service writes
    assert sampler.handover(0) == proto.Ring(RING, CAPACITY, 1, 1, 0, 1)
    written = proto.WRITTEN | proto.RANG
    for flags in (written, proto.WRITTEN, proto.LOST):
        sampler.account(overflow(0x402000, flags), event)
    assert u32(mem, RING + abi.SAMPLE_BUF_OFFSET_HEAD) == 1   # untouched
    assert u32(mem, EVENT_GPA + abi.GUEST_EVENT_OFFSET_OVERFLOWS) == 4
    # lost: the plugin counted it in the event and the ring itself
    assert u32(mem, EVENT_GPA + abi.GUEST_EVENT_OFFSET_LOST) == 0
    assert sampler.handover(0) == proto.Ring(RING, CAPACITY, 1, 3, 1, 2)
    assert nmis == [False] and sampler.stats.nmis == 2
    assert (sampler.stats.samples, sampler.stats.lost) == (4, 1)
    # the service writes again (a reply without the ring): record 3
    mem.write(RING + abi.SAMPLE_BUF_OFFSET_TAIL, (3).to_bytes(4, "little"))
    sampler.deliver(overflow(0x403000), event)
    rec = abi.SAMPLE.unpack(mem.read(RING + abi.SAMPLE_BUF.size +
                                     3 * abi.SAMPLE.size, abi.SAMPLE.size))
    assert rec[3] == 0x403000
    assert u32(mem, RING + abi.SAMPLE_BUF_OFFSET_HEAD) == 4
    assert sampler.handover(1) is None                 # no ring there


def test_slots_tell_the_plugin_what_records_carry():
    attr = abi.GuestPerfAttr(PERF_TYPE_HARDWARE, HW_INSTRUCTIONS, 1000, 0,
                             0, abi.ATTR_BUFFERED, 0, 0, 0)
    pmu = Pmu()
    event = pmu.open(7, attr, EVENT_GPA)
    pmu.enable(7, 0, (0,) * proto.NR_COUNTERS)
    (slot,) = pmu.slots(0)
    assert (slot.event_gpa, slot.sample_period, slot.deliver_flags) == \
        (EVENT_GPA, event.spec.scale(event.period), proto.DELIVER_BUFFERED)
