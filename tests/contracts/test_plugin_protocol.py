"""contracts/pvperf_proto.h and pyhost/plugin_protocol.py agree."""
import re
import subprocess

import pytest

from pyhost import abi
from pyhost.pmu import plugin_protocol as proto

from support import REPO, header_values

HEADER = REPO / "contracts" / "pvperf_proto.h"


def defines():
    return {m.group(1): m.group(2) for m in re.finditer(
        r"^#define\s+(PVPERF_\w+)\s+(\S+)", HEADER.read_text(), re.M)}


@pytest.mark.parametrize("macro,attr", [
    ("PVPERF_PROTO_HCALL_MAGIC", "HCALL_MAGIC"),
    ("PVPERF_PROTO_REPLY_MAGIC", "REPLY_MAGIC"),
    ("PVPERF_PROTO_OVERFLOW_MAGIC", "OVERFLOW_MAGIC"),
    ("PVPERF_PROTO_MAX_SLOTS", "MAX_SLOTS"),
    ("PVPERF_CTR_INSN_KERNEL", "CTR_INSN_KERNEL"),
    ("PVPERF_CTR_INSN_USER", "CTR_INSN_USER"),
    ("PVPERF_CTR_BRANCH_KERNEL", "CTR_BRANCH_KERNEL"),
    ("PVPERF_CTR_BRANCH_USER", "CTR_BRANCH_USER"),
    ("PVPERF_NR_COUNTERS", "NR_COUNTERS"),
    ("PVPERF_NR_INLINE_COUNTERS", "NR_INLINE_COUNTERS"),
    ("PVPERF_NR_MODEL_COUNTERS", "NR_MODEL_COUNTERS"),
    ("PVPERF_M_I1_MISS", "M_I1_MISS"), ("PVPERF_M_LL_IMISS", "M_LL_IMISS"),
    ("PVPERF_M_D1_READ", "M_D1_READ"),
    ("PVPERF_M_D1_READ_MISS", "M_D1_READ_MISS"),
    ("PVPERF_M_LL_READ_MISS", "M_LL_READ_MISS"),
    ("PVPERF_M_D1_WRITE", "M_D1_WRITE"),
    ("PVPERF_M_D1_WRITE_MISS", "M_D1_WRITE_MISS"),
    ("PVPERF_M_LL_WRITE_MISS", "M_LL_WRITE_MISS"),
    ("PVPERF_M_COND", "M_COND"), ("PVPERF_M_COND_MISS", "M_COND_MISS"),
    ("PVPERF_M_IND", "M_IND"), ("PVPERF_M_IND_MISS", "M_IND_MISS"),
    ("PVPERF_M_DTLB_READ_MISS", "M_DTLB_READ_MISS"),
    ("PVPERF_M_DTLB_WRITE_MISS", "M_DTLB_WRITE_MISS"),
    ("PVPERF_M_ITLB_MISS", "M_ITLB_MISS"), ("PVPERF_M_STALL", "M_STALL"),
    ("PVPERF_M_TB_TRANSLATED", "M_TB_TRANSLATED"),
    ("PVPERF_M_TB_FLUSH", "M_TB_FLUSH"), ("PVPERF_M_DEVICE", "M_DEVICE"),
    ("PVPERF_M_HOST_NS", "M_HOST_NS"),
    ("PVPERF_PROTO_TIMEOUT_MS", "TIMEOUT_MS"),
])
def test_constants(macro, attr):
    assert int(defines()[macro], 0) == getattr(proto, attr)


@pytest.mark.parametrize("macro,attr", [
    ("PVPERF_REPLY_COUNTING", "REPLY_COUNTING"),
    ("PVPERF_REPLY_SAMPLING", "REPLY_SAMPLING"),
    ("PVPERF_REPLY_REGS", "REPLY_REGS"),
    ("PVPERF_REPLY_BRANCHES", "REPLY_BRANCHES"),
    ("PVPERF_REPLY_FRAME", "REPLY_FRAME"),
    ("PVPERF_REPLY_CACHE", "REPLY_CACHE"),
    ("PVPERF_REPLY_BPRED", "REPLY_BPRED"),
    ("PVPERF_REPLY_MODELS_LIVE", "REPLY_MODELS_LIVE"),
    ("PVPERF_REPLY_MODELS_COLD", "REPLY_MODELS_COLD"),
    ("PVPERF_REPLY_TLB", "REPLY_TLB"),
    ("PVPERF_REPLY_RING", "REPLY_RING"),
    ("PVPERF_REPLY_DEVICE", "REPLY_DEVICE"),
    ("PVPERF_REPLY_HOST_TIME", "REPLY_HOST_TIME"),
    ("PVPERF_REPLY_KNOWN", "REPLY_KNOWN"),
    ("PVPERF_PROTO_SYNC", "SYNC"),
    ("PVPERF_PROTO_REGS", "REGS"),
    ("PVPERF_PROTO_WRITTEN", "WRITTEN"),
    ("PVPERF_PROTO_LOST", "LOST"),
    ("PVPERF_PROTO_RANG", "RANG"),
    ("PVPERF_DELIVER_BUFFERED", "DELIVER_BUFFERED"),
    ("PVPERF_RING_NOTIFIED", "RING_NOTIFIED"),
    ("PVPERF_IRQ_RETRY_US", "IRQ_RETRY_US"),
])
def test_flags(tmp_path, macro, attr):
    assert c_values(tmp_path, macro) == [getattr(proto, attr)]


def c_values(tmp_path, *exprs: str) -> list[int]:
    """The size_t values of C expressions over the header, as gcc sees it."""
    return header_values(tmp_path, HEADER, *exprs)


def test_message_sizes_match_c(tmp_path):
    assert c_values(tmp_path, "sizeof(struct pvperf_proto_hcall)",
                    "sizeof(struct pvperf_proto_reply)",
                    "sizeof(struct pvperf_proto_slot)",
                    "sizeof(struct pvperf_proto_overflow)") == [
        proto.HCALL_MSG.size, proto.REPLY_MSG_SIZE, proto.SLOT.size,
        proto.OVERFLOW_MSG.size]


def test_reply_ring_and_delivery_sit_where_c_puts_them(tmp_path):
    """A hypercall's reply hands the ring over and says, per slot, what
    the plugin writes into its records (pvperf_proto.h)."""
    out = c_values(tmp_path, "sizeof(struct pvperf_proto_ring)",
                   "sizeof(struct pvperf_proto_deliver)",
                   "offsetof(struct pvperf_proto_reply, ring)",
                   "offsetof(struct pvperf_proto_reply, ring.head)",
                   "offsetof(struct pvperf_proto_reply, ring.flags)",
                   "offsetof(struct pvperf_proto_reply, deliver[1].period)",
                   "offsetof(struct pvperf_proto_reply, deliver[1].flags)")
    slots = [proto.Slot(1, 2, 3, 4), proto.Slot(5, 6, 7, 8, 0, 0, 0x2000,
                                                 0xAABBCCDD, 0x5A)]
    ring = proto.Ring(0x123456789A000, 408, 204, 0x11223344, 9, 0x55667788)
    raw = proto.pack_reply(0, slots, ring)
    assert out[:2] == [proto.RING.size, proto.DELIVER.size]
    assert raw.index((0x123456789A000).to_bytes(8, "little")) == out[2]
    assert raw.index((0x11223344).to_bytes(4, "little")) == out[3]
    assert raw[out[4]] == proto.RING_NOTIFIED
    assert raw.index((0xAABBCCDD).to_bytes(8, "little")) == out[5]
    assert raw[out[6]] == 0x5A
    assert proto.unpack_reply(raw) == (0, slots)
    assert proto.unpack_reply_ring(raw) == ring
    assert proto.unpack_reply_ring(proto.pack_reply(0, slots)) is None


def test_roundtrip_and_errors():
    msg = proto.HcallMessage(1, 0x1000, 0xFFFFFFFF81000000,
                             tuple(range(1, proto.NR_COUNTERS + 1)))
    assert proto.HcallMessage.unpack(msg.pack()) == msg
    with pytest.raises(proto.ProtocolError):
        proto.HcallMessage.unpack(b"\0" * 10)
    with pytest.raises(proto.ProtocolError):
        proto.HcallMessage.unpack(b"\0" * proto.HCALL_MSG.size)


def test_reply_and_overflow_roundtrip():
    slots = [proto.Slot(100003, 100003, 7, 1 << proto.CTR_INSN_USER, 4),
             proto.Slot(5, 7, 8, 1, 0, proto.SYNC)]
    assert proto.unpack_reply(proto.pack_reply(3, slots)) == (3, slots)
    for flags in (0, proto.SYNC, proto.SYNC | proto.REGS):
        ov = proto.OverflowMessage(1, 7, 1, 0x401000, 100003, 200006, flags,
                                   tuple(range(100, 100 + abi.NR_REGS)))
        assert proto.unpack_message(ov.pack()) == ov
    with pytest.raises(ValueError):
        proto.pack_reply(0, slots * 9)


def test_flag_fields_offsets_match_c(tmp_path):
    """The flags, the data address and the counter mask sit where both
    sides think they do."""
    assert re.search(r"#define\s+PVPERF_PROTO_SYNC\s+\(1U << 0\)",
                     HEADER.read_text()) and proto.SYNC == 1
    out = c_values(tmp_path, "offsetof(struct pvperf_proto_slot, flags)",
                   "offsetof(struct pvperf_proto_overflow, mode)",
                   "offsetof(struct pvperf_proto_overflow, flags)",
                   "offsetof(struct pvperf_proto_overflow, ip)",
                   "offsetof(struct pvperf_proto_overflow, regs)",
                   "offsetof(struct pvperf_proto_overflow, data_addr)",
                   "offsetof(struct pvperf_proto_slot, ctr_mask)")
    # a mask above 32 bits (the TLB and timing counters are there)
    slot = proto.Slot(0, 0, 0, 0x0B0A0F0E0D0C, 0, 0xA5).pack()
    regs = (0,) * 7 + (0x1122334455667788,) + (0,) * (abi.NR_REGS - 8)  # rsp
    ov = proto.OverflowMessage(0, 0, 0x1234, 0, 0, 0, 0x5678, regs,
                               data_addr=0x99AABBCCDDEEFF00).pack()
    assert slot.index(0xA5) == out[0]
    assert ov.index((0x1234).to_bytes(2, "little")) == out[1]
    assert ov.index((0x5678).to_bytes(2, "little")) == out[2]
    assert proto.OVERFLOW_MSG.size - (4 + abi.NR_REGS) * 8 == out[3]
    assert ov.index((0x1122334455667788).to_bytes(8, "little")) == \
        out[4] + 8 * 7
    assert ov.index((0x99AABBCCDDEEFF00).to_bytes(8, "little")) == out[5]
    assert slot.index((0x0B0A0F0E0D0C).to_bytes(8, "little")) == out[6]


def test_state_layout_matches_c(tmp_path):
    """The checkpoint state file (struct pvperf_state_*): sizes and the
    offsets pvperf reads, as gcc lays them out."""
    out = c_values(tmp_path, "sizeof(struct pvperf_state_header)",
                   "sizeof(struct pvperf_state_held)",
                   "sizeof(struct pvperf_state_vcpu)",
                   "offsetof(struct pvperf_state_vcpu, reply_flags)",
                   "offsetof(struct pvperf_state_vcpu, n_slots)",
                   "offsetof(struct pvperf_state_vcpu, held_mask)",
                   "offsetof(struct pvperf_state_vcpu, slot)",
                   "offsetof(struct pvperf_state_vcpu, held)",
                   "offsetof(struct pvperf_state_held, regs)",
                   "PVPERF_STATE_MAGIC", "PVPERF_STATE_VERSION",
                   "PVPERF_REPLY_KNOWN")
    head = proto.STATE_VCPU_HEAD
    assert out == [proto.STATE_HEADER.size, proto.STATE_HELD.size,
                   proto.STATE_VCPU_SIZE,
                   proto.NR_COUNTERS * 8 + 8, proto.NR_COUNTERS * 8 + 12,
                   proto.NR_COUNTERS * 8 + 16, head.size,
                   head.size + proto.MAX_SLOTS * proto.SLOT.size,
                   proto.STATE_HELD.size - 8 * abi.NR_REGS,
                   proto.STATE_MAGIC, proto.STATE_VERSION,
                   proto.REPLY_KNOWN]


def _state(n_vcpus=1, **vcpu):
    """A plugin state file as the plugin writes it (one armed slot)."""
    import struct
    fields = dict(flags=proto.REPLY_COUNTING | proto.REPLY_SAMPLING,
                  n_slots=1, held=0)
    fields.update(vcpu)
    rec = proto.STATE_VCPU_HEAD.pack(*range(proto.NR_COUNTERS), 7,
                                     fields["flags"], fields["n_slots"],
                                     fields["held"], 0)
    rec += proto.Slot(1000, 100, 3, 1 << proto.CTR_INSN_USER).pack()
    rec += bytes(proto.STATE_VCPU_SIZE - len(rec))
    head = struct.pack("<IIIIII", proto.STATE_MAGIC, proto.STATE_VERSION,
                       n_vcpus, proto.STATE_VCPU_SIZE, fields["flags"], 0)
    return head + rec * n_vcpus


def test_plugin_state_parse_and_refusals():
    flags, vcpus = proto.parse_plugin_state(_state(2), 2)
    assert flags == proto.REPLY_COUNTING | proto.REPLY_SAMPLING
    assert vcpus[1].counters == tuple(range(proto.NR_COUNTERS))
    assert vcpus[0].slots == (proto.Slot(1000, 100, 3,
                                         1 << proto.CTR_INSN_USER),)
    for raw, n, why in [
            (_state(2), 1, "expected 1"),
            (_state(1)[:-1], 1, "truncated"),
            (b"XXXX" + _state(1)[4:], 1, "bad magic"),
            (_state(1, n_slots=9), 1, "slot count"),
            (_state(1, flags=1 << 20), 1, "unknown flags"),
            (_state(1, held=0b10), 1, "held overflow without its slot")]:
        with pytest.raises(proto.ProtocolError, match=why):
            proto.parse_plugin_state(raw, n)
