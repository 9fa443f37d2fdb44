"""Python mirror of contracts/pvperf_abi.h (the guest<->host ABI).

The C header is the definition; tests/contracts/test_abi.py parses it and checks every
constant and struct layout here against it.  Hypercall and operation numbers
appear as literals only in the header and in this file.  It sits at pyhost's
bottom layer (it imports nothing of pyhost), so that every layer above,
the architectures' descriptions included, reads the facts from here.

Index spaces (the same names as in the header):
  event id    chosen by the guest, unique per guest, < MAX_EVENT_ID
  vcpu index  QEMU's cpu_index of the vCPU that executed the marker store
  gpa         guest physical address (== offset into the guest RAM file)
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

ABI_VERSION = 6   # 2: sampling (SET_PERIOD, SAMPLE_BUF, sample records)
                  # 3: registers at the overflowing instruction in records
                  # 4: EVENTS (the host's event table for the driver's sysfs)
                  # 5: 32 register slots (an ARM64 set: x0-x30, sp)
                  # 6: TICK and sample_buf.ticks (host-time timer samples;
                  #    the plugin serves TICK, never the service)

MARKER_MAGIC = 0x46505650
X86_64_MARKER_INSN_BYTES = bytes([0xC7, 0x00, 0x50, 0x56, 0x50, 0x46])
# The A64 marker store `stur w16, [x17]`: w16 = MARKER_MAGIC, x17 = the block.
AARCH64_MARKER_INSN = 0xB8000230
AARCH64_MARKER_INSN_LEN = 4
# The RV64 marker store, the 32-bit `sw a0, 0(a1)`: a0 = MARKER_MAGIC,
# a1 = the block.
RISCV64_MARKER_INSN = 0x00A5A023
RISCV64_MARKER_INSN_LEN = 4

HC_PERF_OP = 3
OP_OPEN = 1
OP_CLOSE = 2
OP_ENABLE = 3
OP_DISABLE = 4
OP_READ = 5
OP_PROBE = 0x100
OP_FAULT = 0x101
OP_PMU_DISABLE = 0x102
OP_PMU_ENABLE = 0x103
OP_SET_PERIOD = 0x104
OP_SAMPLE_BUF = 0x105
OP_EVENTS = 0x106
OP_TICK = 0x107

OP_NAMES = {OP_OPEN: "OPEN", OP_CLOSE: "CLOSE", OP_ENABLE: "ENABLE",
            OP_DISABLE: "DISABLE", OP_READ: "READ", OP_PROBE: "PROBE",
            OP_FAULT: "FAULT", OP_PMU_DISABLE: "PMU_DISABLE",
            OP_PMU_ENABLE: "PMU_ENABLE", OP_SET_PERIOD: "SET_PERIOD",
            OP_SAMPLE_BUF: "SAMPLE_BUF", OP_EVENTS: "EVENTS",
            OP_TICK: "TICK"}

MODE_KERNEL = 0
MODE_USER = 1

MAX_EVENTS = 4096
MAX_EVENT_ID = 65536
EVENTS_BUF_MAX = 16384

ATTR_EXCLUDE_USER = 1 << 0
ATTR_EXCLUDE_KERNEL = 1 << 1
ATTR_EXCLUDE_HV = 1 << 2
ATTR_EXCLUDE_IDLE = 1 << 3
ATTR_FREQ = 1 << 4
ATTR_PRECISE_SHIFT = 5
ATTR_PRECISE_MASK = 3 << 5
ATTR_EXCLUDE_GUEST = 1 << 7
ATTR_EXCLUDE_HOST = 1 << 8
ATTR_BUFFERED = 1 << 9
ATTR_RANDOM_SHIFT = 10
ATTR_RANDOM_MASK = 31 << 10
ATTR_KNOWN = (1 << 15) - 1

# Counting stays on this long after the last CLOSE (pvperf_abi.h).
COUNT_LINGER_MS = 2000
# The largest guest RAM pvperf's RAM layouts describe, for every side
# (pvperf_abi.h says why); the host's memory is the usual limit
# (vm.launcher refuses more than it can give, before boot).
MAX_RAM_MB = 512 << 10
MIN_PERIOD = 128
MAX_PERIOD = 1 << 62
SAMPLE_BUF_MIN = 4096
SAMPLE_BUF_MAX = 1 << 20

# pvperf_abi.h's kernel-half start: the marker store must run here, and guest
# code here is kernel code (counting).  Each architecture's module
# (pyhost/arch/) reads its own into its Arch for the rest of pyhost.
X86_64_KERNEL_HALF_START = 0xFFFF800000000000
AARCH64_KERNEL_HALF_START = 0xFFFF000000000000
RISCV64_KERNEL_HALF_START = 0x8000000000000000

HCALL_ALIGN = 64

# struct pvperf_hcall: marker, nr, op, pad, args[3], ret, reserved[2]
HCALL = struct.Struct("<IIII3Qq2Q")
HCALL_OFFSET_OP = 8
HCALL_OFFSET_ARGS = 16
HCALL_OFFSET_RET = 40
# struct pvperf_guest_perf_attr
ATTR = struct.Struct("<IIQQQQQIIQQ")
ATTR_OFFSET_FLAGS = 40
ATTR_OFFSET_BP_ADDR = 56
# struct pvperf_guest_perf_event: count, overflows, lost
GUEST_EVENT = struct.Struct("<QII")
GUEST_EVENT_OFFSET_OVERFLOWS = 8
GUEST_EVENT_OFFSET_LOST = 12
# struct pvperf_guest_perf_param: attr_addr, guest_event_addr, id, pad
PARAM = struct.Struct("<QQII")
PARAM_OFFSET_ID = 16

# struct pvperf_sample: event_id, mode, flags, ip, data_addr, period,
# regs[NR_REGS] (each architecture's order, pvperf_abi.h: X86_64_REG_*
# gdb's x86-64 order, rax rbx rcx rdx rsi rdi rbp rsp r8..r15;
# AARCH64_REG_* x0..x30 sp; RISCV64_REG_* perf's RISC-V order, pc (0: the
# ip) x1..x31)
SAMPLE_REGS = 1 << 0
NR_REGS = 32
(X86_64_REG_AX, X86_64_REG_BX, X86_64_REG_CX, X86_64_REG_DX, X86_64_REG_SI,
 X86_64_REG_DI, X86_64_REG_BP, X86_64_REG_SP, X86_64_REG_R8) = range(9)
AARCH64_REG_X0, AARCH64_REG_FP, AARCH64_REG_LR, AARCH64_REG_SP = 0, 29, 30, 31
RISCV64_REG_PC, RISCV64_REG_RA, RISCV64_REG_SP, RISCV64_REG_FP = 0, 1, 2, 8
SAMPLE = struct.Struct(f"<IHHQQQ{NR_REGS}Q")
SAMPLE_OFFSET_FLAGS = 6
SAMPLE_OFFSET_IP = 8
SAMPLE_OFFSET_REGS = 32
# struct pvperf_sample_buf header: head, tail, lost, nmis, ticks,
# reserved32, reserved[5]
SAMPLE_BUF = struct.Struct("<IIIIII5Q")
SAMPLE_BUF_OFFSET_HEAD = 0
SAMPLE_BUF_OFFSET_TAIL = 4
SAMPLE_BUF_OFFSET_LOST = 8
SAMPLE_BUF_OFFSET_NMIS = 12
SAMPLE_BUF_OFFSET_TICKS = 16

assert HCALL.size == 64
assert ATTR.size == 72
assert GUEST_EVENT.size == 16
assert PARAM.size == 24
assert SAMPLE.size == 32 + 8 * NR_REGS
assert SAMPLE_BUF.size == 64

STRUCT_SIZES = {
    "pvperf_hcall": HCALL.size,
    "pvperf_guest_perf_attr": ATTR.size,
    "pvperf_guest_perf_event": GUEST_EVENT.size,
    "pvperf_guest_perf_param": PARAM.size,
    "pvperf_sample": SAMPLE.size,
    "pvperf_sample_buf": SAMPLE_BUF.size,
}
STRUCT_OFFSETS = {
    ("pvperf_hcall", "op"): HCALL_OFFSET_OP,
    ("pvperf_hcall", "args"): HCALL_OFFSET_ARGS,
    ("pvperf_hcall", "ret"): HCALL_OFFSET_RET,
    ("pvperf_guest_perf_attr", "flags"): ATTR_OFFSET_FLAGS,
    ("pvperf_guest_perf_attr", "bp_addr"): ATTR_OFFSET_BP_ADDR,
    ("pvperf_guest_perf_event", "overflows"): GUEST_EVENT_OFFSET_OVERFLOWS,
    ("pvperf_guest_perf_event", "lost"): GUEST_EVENT_OFFSET_LOST,
    ("pvperf_guest_perf_param", "id"): PARAM_OFFSET_ID,
    ("pvperf_sample", "flags"): SAMPLE_OFFSET_FLAGS,
    ("pvperf_sample", "ip"): SAMPLE_OFFSET_IP,
    ("pvperf_sample", "regs"): SAMPLE_OFFSET_REGS,
    ("pvperf_sample_buf", "tail"): SAMPLE_BUF_OFFSET_TAIL,
    ("pvperf_sample_buf", "lost"): SAMPLE_BUF_OFFSET_LOST,
    ("pvperf_sample_buf", "nmis"): SAMPLE_BUF_OFFSET_NMIS,
    ("pvperf_sample_buf", "ticks"): SAMPLE_BUF_OFFSET_TICKS,
    ("pvperf_sample_buf", "rec"): SAMPLE_BUF.size,
}


@dataclass(frozen=True)
class HcallBlock:
    """A private, already-unpacked copy of one struct pvperf_hcall."""
    marker: int
    nr: int
    op: int
    args: tuple[int, int, int]

    @classmethod
    def unpack(cls, raw: bytes) -> "HcallBlock":
        f = HCALL.unpack(raw)
        return cls(marker=f[0], nr=f[1], op=f[2], args=tuple(f[4:7]))


@dataclass(frozen=True)
class GuestPerfAttr:
    """A private copy of struct pvperf_guest_perf_attr."""
    type: int
    config: int
    sample_period: int
    sample_type: int
    read_format: int
    flags: int
    bp_type: int
    bp_addr: int
    bp_len: int

    @classmethod
    def unpack(cls, raw: bytes) -> "GuestPerfAttr":
        f = ATTR.unpack(raw)
        return cls(type=f[0], config=f[2], sample_period=f[3],
                   sample_type=f[4], read_format=f[5], flags=f[6],
                   bp_type=f[7], bp_addr=f[9], bp_len=f[10])

    def pack(self) -> bytes:
        return ATTR.pack(self.type, 0, self.config, self.sample_period,
                         self.sample_type, self.read_format, self.flags,
                         self.bp_type, 0, self.bp_addr, self.bp_len)


@dataclass(frozen=True)
class GuestPerfParam:
    """A private copy of struct pvperf_guest_perf_param."""
    attr_gpa: int
    guest_event_gpa: int
    event_id: int

    @classmethod
    def unpack(cls, raw: bytes) -> "GuestPerfParam":
        attr_gpa, event_gpa, event_id, _ = PARAM.unpack(raw)
        return cls(attr_gpa=attr_gpa, guest_event_gpa=event_gpa,
                   event_id=event_id)

    def pack(self) -> bytes:
        return PARAM.pack(self.attr_gpa, self.guest_event_gpa,
                          self.event_id, 0)


def pack_hcall(nr: int, op: int, args=(0, 0, 0), ret: int = 0,
               marker: int = MARKER_MAGIC) -> bytes:
    """Build a struct pvperf_hcall image (tests and fuzzers use it)."""
    a = tuple(args) + (0,) * (3 - len(args))
    return HCALL.pack(marker, nr, op, 0, *a, ret, 0, 0)
