"""A minimal client of QEMU's gdbstub (the GDB remote serial protocol),
for what QMP cannot do: read and write a vCPU's registers, the control
and status registers QEMU describes to gdb included.

pvperf uses it in one place: the registers a restored checkpoint's vCPUs
get written back before they run (Arch.rewrite_on_restore, the
architecture's file says why), over a socketpair chardev (``-gdb
chardev:gdb``, vm/channels.py) that nobody else can reach.  Registers
are read and written as 64-bit values.

The protocol (GDB manual, "Remote Protocol"): packets ``$data#cs`` with
cs the sum of data's bytes mod 256 in two hex digits, each acknowledged
with ``+``; registers in target byte order as hex.  A feature QEMU
builds at run time (gdbstub.c gdb_feature_builder_append_reg) numbers
its registers base + offset, and its target-description file shows
regnum="base + offset" for each register it lists.
"""
from __future__ import annotations

import asyncio
import re
import socket

from ..arch.base import StubRegister
from ..errors import VMError

TIMEOUT = 10.0


class GdbStub:
    """One session on a connected stream socket to QEMU's gdbstub."""

    def __init__(self, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, sock: socket.socket) -> "GdbStub":
        reader, writer = await asyncio.open_unix_connection(sock=sock)
        return cls(reader, writer)

    async def close(self) -> None:
        self.writer.close()
        try:
            await asyncio.wait_for(self.writer.wait_closed(), 2)
        except (OSError, asyncio.TimeoutError):
            pass

    async def request(self, data: str) -> str:
        """Send one packet, return the stub's answer packet's data."""
        cs = sum(data.encode()) & 0xFF
        self.writer.write(f"${data}#{cs:02x}".encode())
        await self.writer.drain()
        try:
            return await asyncio.wait_for(self._answer(), TIMEOUT)
        except asyncio.TimeoutError:
            raise VMError("talking to QEMU's gdbstub", f"no answer to "
                          f"{data[:20]!r} within {TIMEOUT:g} s",
                          "run again with --debug") from None

    async def _answer(self) -> str:
        while True:
            c = await self.reader.readexactly(1)
            if c in b"+-":          # acks of ours; "-" is not expected on
                continue            # a socket (nothing is lost)
            if c != b"$":
                continue            # e.g. a stop reply's "%" notification
            body = await self.reader.readuntil(b"#")
            await self.reader.readexactly(2)
            self.writer.write(b"+")
            return body[:-1].decode()

    async def select_vcpu(self, index: int) -> None:
        """Later register reads and writes go to vCPU ``index`` (QEMU's
        thread ids are cpu_index + 1)."""
        await self._ok(f"Hg{index + 1:x}")

    async def feature_xml(self, name: str) -> str:
        """The contents of the target description file ``name``
        (qXfer:features:read, read in pieces)."""
        out, offset = [], 0
        while True:
            reply = await self.request(
                f"qXfer:features:read:{name}:{offset:x},ffb")
            if not reply or reply[0] not in "lm":
                raise VMError("talking to QEMU's gdbstub", f"no {name}: "
                              f"{reply!r}", "run again with --debug")
            out.append(reply[1:])
            offset += len(reply) - 1
            if reply[0] == "l":
                return "".join(out)

    async def register_number(self, reg: StubRegister) -> int:
        """The stub's number for ``reg``, from its feature's description
        (the builder writes regnum = base + offset)."""
        xml = await self.feature_xml(reg.feature)
        m = re.search(rf'name="{re.escape(reg.anchor)}"[^>]*regnum="(\d+)"',
                      xml)
        if m is None:
            raise VMError("talking to QEMU's gdbstub", f"{reg.feature} "
                          f"lists no {reg.anchor}", "run again with --debug")
        return int(m.group(1)) - reg.anchor_offset + reg.offset

    async def read_register(self, regnum: int) -> int:
        reply = await self.request(f"p{regnum:x}")
        if not reply or reply.startswith("E"):
            raise VMError("talking to QEMU's gdbstub", f"cannot read "
                          f"register {regnum}: {reply!r}",
                          "run again with --debug")
        return int.from_bytes(bytes.fromhex(reply), "little")

    async def write_register(self, regnum: int, value: int,
                             size: int = 8) -> None:
        await self._ok(f"P{regnum:x}={value.to_bytes(size, 'little').hex()}")

    async def _ok(self, data: str) -> None:
        reply = await self.request(data)
        if reply != "OK":
            raise VMError("talking to QEMU's gdbstub", f"{data[:20]!r} "
                          f"answered {reply!r}", "run again with --debug")


def wanted(config) -> bool:
    """Does ``config`` (a launcher.VMConfig) restore vCPUs that need
    registers written back before they run?"""
    return config.incoming is not None and \
        bool(config.arch.rewrite_on_restore)


async def rewrite_registers(sock: socket.socket,
                            registers: tuple[StubRegister, ...],
                            smp: int) -> None:
    """Write each of ``registers`` back with its own value on each of the
    ``smp`` vCPUs (Arch.rewrite_on_restore), then hang up: a closed
    connection leaves QEMU's run state as it was (no detach packet,
    which would start the vCPUs)."""
    stub = await GdbStub.open(sock)
    try:
        numbers = [await stub.register_number(r) for r in registers]
        for index in range(smp):
            await stub.select_vcpu(index)
            for regnum in numbers:
                await stub.write_register(regnum,
                                          await stub.read_register(regnum))
    finally:
        await stub.close()
