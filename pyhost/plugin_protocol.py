"""Python mirror of qemu_plugin/pvperf_proto.h (plugin <-> service).

One SOCK_SEQPACKET connection per vCPU.  The plugin sends one
``HcallMessage`` per hypercall, carrying that vCPU's raw counters exact at the
doorbell store, and waits for one reply.  tests/test_plugin_protocol.py
checks this file against the header.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

HCALL_MAGIC = 0x51505650
REPLY_MAGIC = 0x52505650

CTR_INSN_KERNEL = 0
CTR_INSN_USER = 1
CTR_BRANCH_KERNEL = 2
CTR_BRANCH_USER = 3
NR_COUNTERS = 4

REPLY_COUNTING = 1 << 0

TIMEOUT_MS = 5000

HCALL_MSG = struct.Struct("<IIQQ%dQ" % NR_COUNTERS)
REPLY_MSG = struct.Struct("<II")
assert HCALL_MSG.size == 56
assert REPLY_MSG.size == 8


class ProtocolError(ValueError):
    """A malformed message from the plugin."""


@dataclass(frozen=True)
class HcallMessage:
    vcpu: int
    block_gpa: int
    insn_vaddr: int
    counters: tuple[int, ...]

    @classmethod
    def unpack(cls, raw: bytes) -> "HcallMessage":
        if len(raw) != HCALL_MSG.size:
            raise ProtocolError(f"hypercall message of {len(raw)} bytes, "
                                f"expected {HCALL_MSG.size}")
        f = HCALL_MSG.unpack(raw)
        if f[0] != HCALL_MAGIC:
            raise ProtocolError(f"bad magic {f[0]:#x}")
        return cls(vcpu=f[1], block_gpa=f[2], insn_vaddr=f[3],
                   counters=tuple(f[4:]))

    def pack(self) -> bytes:
        return HCALL_MSG.pack(HCALL_MAGIC, self.vcpu, self.block_gpa,
                              self.insn_vaddr, *self.counters)


def pack_reply(flags: int) -> bytes:
    return REPLY_MSG.pack(REPLY_MAGIC, flags)
