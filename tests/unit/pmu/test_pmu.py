"""The PMU programming model, checked against analytic expectations."""
import errno

import pytest

from pyhost import abi
from pyhost.pmu import plugin_protocol as proto
from pyhost.pmu.events import (HW_BRANCH_INSTRUCTIONS, HW_INSTRUCTIONS,
                               PERF_TYPE_HARDWARE, PERF_TYPE_HW_CACHE,
                               PERF_TYPE_RAW, CountingModel, EventDef,
                               RetirementModel)
from pyhost.pmu.model import (PERF_SAMPLE_CALLCHAIN, PERF_SAMPLE_REGS_USER,
                              samplable,
                              PERF_SAMPLE_STACK_USER, Pmu, PmuError)


def attr(type_=PERF_TYPE_HARDWARE, config=1, flags=0, period=0,
         sample_type=0):
    return abi.GuestPerfAttr(type_, config, period, sample_type, 0, flags,
                             0, 0, 0)


def snap(ik=0, iu=0, bk=0, bu=0):
    s = [0] * proto.NR_COUNTERS
    s[proto.CTR_INSN_KERNEL], s[proto.CTR_INSN_USER] = ik, iu
    s[proto.CTR_BRANCH_KERNEL], s[proto.CTR_BRANCH_USER] = bk, bu
    return tuple(s)


@pytest.mark.parametrize("type_,config,name", [
    (PERF_TYPE_HARDWARE, 0, "cpu-cycles"),
    (PERF_TYPE_HARDWARE, 1, "instructions"),
    (PERF_TYPE_HARDWARE, 4, "branch-instructions"),
    (PERF_TYPE_HARDWARE, 6, "bus-cycles"),
    (PERF_TYPE_HARDWARE, 9, "ref-cycles"),
    (PERF_TYPE_RAW, 0x00C0, "instructions"),
    (PERF_TYPE_RAW, 0x00C4, "branch-instructions"),
    (PERF_TYPE_RAW, 0x003C, "cpu-cycles"),
    (PERF_TYPE_RAW, 0x013C, "bus-cycles"),
])
def test_encodings(type_, config, name):
    assert Pmu().lookup(attr(type_, config)).name == name


@pytest.mark.parametrize("type_,config,err", [
    (PERF_TYPE_HARDWARE, 7, errno.ENOENT),      # stalled-cycles-frontend
    (PERF_TYPE_HW_CACHE, 0x10104, errno.ENOENT),    # iTLB store misses
    (PERF_TYPE_HW_CACHE, 0x202, errno.ENOENT),      # LL prefetches
    (PERF_TYPE_RAW, 0x1234, errno.ENOENT),
    (PERF_TYPE_RAW, 0x5300C0, errno.EINVAL),    # usr/os/en bits
    (1, 0, errno.ENOENT),                       # software: not ours
])
def test_unsupported_is_refused(type_, config, err):
    with pytest.raises(PmuError) as e:
        Pmu().open(1, attr(type_, config), 0x1000)
    assert e.value.errno == err


def test_count_between_enable_and_disable_is_the_delta():
    pmu = Pmu()
    pmu.open(1, attr(), 0x1000)
    pmu.enable(1, 0, snap(ik=100, iu=1000))
    ev = pmu.disable(1, 0, snap(ik=150, iu=1700))
    assert ev.value() == 50 + 700
    pmu.enable(1, 0, snap(ik=5000, iu=5000))
    ev = pmu.disable(1, 0, snap(ik=5001, iu=5010))
    assert ev.value() == 750 + 11


@pytest.mark.parametrize("flags,expected", [
    (abi.ATTR_EXCLUDE_KERNEL, 700),
    (abi.ATTR_EXCLUDE_USER, 50),
    (0, 750),
])
def test_exclude_user_kernel_split(flags, expected):
    pmu = Pmu()
    pmu.open(1, attr(flags=flags), 0x1000)
    pmu.enable(1, 0, snap(ik=100, iu=1000))
    assert pmu.disable(1, 0, snap(ik=150, iu=1700)).value() == expected


def test_user_plus_kernel_equals_all():
    pmu = Pmu()
    for i, fl in enumerate((abi.ATTR_EXCLUDE_KERNEL, abi.ATTR_EXCLUDE_USER, 0)):
        pmu.open(i, attr(flags=fl), 0x1000 + 16 * i)
        pmu.enable(i, 0, snap(ik=3, iu=9))
    vals = [pmu.disable(i, 0, snap(ik=30, iu=99)).value() for i in range(3)]
    assert vals[0] + vals[1] == vals[2]


def test_live_read_only_on_the_running_vcpu():
    pmu = Pmu()
    ev = pmu.open(1, attr(), 0x1000)
    pmu.enable(1, 1, snap(iu=10))
    assert ev.value(snap(iu=25), vcpu=1) == 15
    assert ev.value(snap(iu=25), vcpu=0) == 0


def test_cost_model_clocks():
    pmu = Pmu()
    pmu.open(1, attr(config=6), 0x1000)   # bus-cycles
    pmu.open(2, attr(config=0), 0x2000)   # cycles
    for i in (1, 2):
        pmu.enable(i, 0, snap(iu=0))
    assert pmu.disable(1, 0, snap(iu=1005)).value() == 100
    assert pmu.disable(2, 0, snap(iu=1005)).value() == 1005


def test_limits():
    pmu = Pmu(max_events=2, counters_per_vcpu=1)
    pmu.open(1, attr(), 0x1000)
    pmu.open(2, attr(), 0x2000)
    with pytest.raises(PmuError) as e:
        pmu.open(3, attr(), 0x3000)
    assert e.value.errno == errno.ENOSPC
    with pytest.raises(PmuError) as e:
        pmu.open(1, attr(), 0x1000)
    assert e.value.errno == errno.EEXIST
    with pytest.raises(PmuError) as e:
        pmu.open(abi.MAX_EVENT_ID, attr(), 0x1000)
    assert e.value.errno == errno.EINVAL
    pmu.enable(1, 0, snap())
    with pytest.raises(PmuError) as e:
        pmu.enable(2, 0, snap())
    assert e.value.errno == errno.EBUSY
    pmu.enable(2, 1, snap())      # another vCPU has its own counters


@pytest.mark.parametrize("flags,period,err", [
    (abi.ATTR_EXCLUDE_USER | abi.ATTR_EXCLUDE_KERNEL, 0, errno.EINVAL),
    (1 << 40, 0, errno.EINVAL),
    (1 << 20, 0, errno.EINVAL),
    (abi.ATTR_FREQ | abi.ATTR_EXCLUDE_GUEST | abi.ATTR_EXCLUDE_HV, 0, None),
])
def test_bad_attrs(flags, period, err):
    if err is None:     # what perf stat sends by default is accepted
        Pmu().open(1, attr(flags=flags, period=period), 0x1000)
        return
    with pytest.raises(PmuError) as e:
        Pmu().open(1, attr(flags=flags, period=period), 0x1000)
    assert e.value.errno == err


def test_counting_needed_follows_open_events():
    pmu = Pmu()
    assert not pmu.counting_needed()
    pmu.open(1, attr(), 0x1000)
    assert pmu.counting_needed()
    pmu.close(1, 0, snap())
    assert not pmu.counting_needed()


def test_branches_are_counted_only_while_a_branch_event_is_open():
    pmu = Pmu()
    pmu.open(1, attr(config=HW_INSTRUCTIONS), 0x1000)
    assert not pmu.branches_needed()
    pmu.open(2, attr(config=HW_BRANCH_INSTRUCTIONS), 0x2000)
    assert pmu.branches_needed()
    pmu.close(2, 0, snap())
    assert not pmu.branches_needed()


@pytest.mark.parametrize("sample_type,frame,regs", [
    (0, False, False),
    (PERF_SAMPLE_CALLCHAIN, True, False),
    (PERF_SAMPLE_CALLCHAIN | PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER,
     True, True),
])
def test_register_capture_follows_what_samples_carry(sample_type, frame,
                                                      regs):
    """A frame-pointer callchain needs sp and bp; sample registers and
    user stacks (DWARF) need every register."""
    pmu = Pmu()
    pmu.open(1, attr(period=1000, sample_type=sample_type), 0x1000)
    assert (pmu.frame_needed(), pmu.regs_needed()) == (frame, regs)


def test_model_registration_is_checked_at_start_up():
    class Broken(CountingModel):
        name = ""

        def events(self):
            return ()
    with pytest.raises(TypeError):
        Pmu(models=[Broken()])

    class Dup(CountingModel):
        name = "dup"

        def events(self):
            return (EventDef("x", 1, (), (0,), (1,)),)
    with pytest.raises(ValueError):
        Pmu(models=[RetirementModel(), Dup()])


def test_group_started_inside_a_freeze_counts_from_one_instruction():
    """perf_pmu_disable(); add x3; perf_pmu_enable(): like x86's global
    control, all members start and stop at the same instruction."""
    pmu = Pmu()
    flags = (abi.ATTR_EXCLUDE_KERNEL, abi.ATTR_EXCLUDE_USER, 0)
    for i, fl in enumerate(flags):
        pmu.open(i, attr(flags=fl), 0x1000 + 16 * i)
    pmu.pmu_disable(0, snap(ik=100, iu=100))
    for i, k in enumerate((110, 120, 130)):      # kernel runs between adds
        pmu.enable(i, 0, snap(ik=k, iu=100))
    pmu.pmu_enable(0, snap(ik=140, iu=100))
    pmu.pmu_disable(0, snap(ik=200, iu=1100))
    vals = [pmu.disable(i, 0, snap(ik=300 + i, iu=1100)).value()
            for i in range(3)]
    pmu.pmu_enable(0, snap(ik=400, iu=1100))
    assert vals == [1000, 60, 1060]
    assert vals[0] + vals[1] == vals[2]


def test_read_while_frozen_returns_settled_total():
    pmu = Pmu()
    ev = pmu.open(1, attr(), 0x1000)
    pmu.enable(1, 0, snap(iu=10))
    pmu.pmu_disable(0, snap(iu=30))
    assert ev.value(snap(iu=99), vcpu=0) == 20
    pmu.pmu_enable(0, snap(iu=100))
    assert ev.value(snap(iu=105), vcpu=0) == 25


# -- TLB and timing models ---------------------------------------------------

def test_tlb_events_need_the_tlb_model():
    pmu = Pmu()
    ev = pmu.open(1, attr(PERF_TYPE_HW_CACHE, 0x10003), 0x1000)  # dTLB r miss
    assert ev.counters == (proto.ctr_model(proto.M_DTLB_READ_MISS, 0),
                           proto.ctr_model(proto.M_DTLB_READ_MISS, 1))
    assert pmu.models_needed() == proto.REPLY_TLB


def test_cycles_are_instructions_unless_timing():
    plain = Pmu().open(1, attr(PERF_TYPE_HARDWARE, 0), 0x1000)
    assert plain.counters == (proto.CTR_INSN_KERNEL, proto.CTR_INSN_USER)
    pmu = Pmu(timing=True)
    timed = pmu.open(1, attr(PERF_TYPE_HARDWARE, 0), 0x1000)
    assert set(timed.counters) == {
        proto.CTR_INSN_KERNEL, proto.CTR_INSN_USER,
        proto.ctr_model(proto.M_STALL, 0), proto.ctr_model(proto.M_STALL, 1)}
    # the stall cycles come from every model
    assert pmu.models_needed() == (proto.REPLY_CACHE | proto.REPLY_BPRED |
                                   proto.REPLY_TLB)


def test_timing_cycles_sample_but_other_mixes_do_not():
    pmu = Pmu(timing=True)
    ev = pmu.open(1, attr(PERF_TYPE_HARDWARE, 0, period=100003), 0x1000)
    assert ev.period == 100003
    assert samplable(ev.ctr_mask)
    insn_and_miss = (1 << proto.CTR_INSN_USER |
                     1 << proto.ctr_model(proto.M_D1_READ_MISS, 1))
    assert not samplable(insn_and_miss)
