"""pyhost.pmu.doorbell: the ivshmem server side of the overflow interrupt,
checked against QEMU's protocol (docs/specs/ivshmem-spec.rst: int64
messages, descriptors by SCM_RIGHTS) as QEMU's end of the socketpair
reads it."""
from __future__ import annotations

import os
import socket
import stat
import struct

import pytest

from pyhost.pmu.doorbell import Doorbell

MSG = struct.Struct("<q")


def qemu_reads(door: Doorbell, n: int) -> list[tuple[int, int | None]]:
    """QEMU's side: n messages of 8 bytes, each with its descriptor."""
    theirs = socket.socket(fileno=os.dup(door.pass_fds[0]))
    out = []
    for _ in range(n):
        data, anc, _, _ = socket.recv_fds(theirs, MSG.size, 1)
        assert len(data) == MSG.size
        out.append((MSG.unpack(data)[0], anc[0] if anc else None))
    theirs.close()
    return out


@pytest.fixture
def door():
    d = Doorbell(2)
    yield d
    d.close()


def test_handshake_is_qemus_protocol(door):
    msgs = qemu_reads(door, 5)
    assert [v for v, _ in msgs] == [0, 0, -1, 0, 0]   # version, id, shm, 2 vectors
    assert msgs[0][1] is None and msgs[1][1] is None
    shm = os.fstat(msgs[2][1])
    assert stat.S_ISREG(shm.st_mode) and shm.st_size == 4096
    assert os.readlink(f"/proc/self/fd/{msgs[2][1]}").startswith("/memfd:")
    for _, fd in msgs[3:]:
        assert os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[eventfd]"
    for _, fd in msgs:
        if fd is not None:
            os.close(fd)


def test_raise_writes_the_vcpus_eventfd_and_waits_until_taken(door):
    vec = [fd for _, fd in qemu_reads(door, 5)[3:]]
    door(vcpu=1)
    assert os.eventfd_read(vec[1]) == 1          # QEMU takes it
    door(vcpu=0, wait=True)                      # nobody takes it: bounded
    assert os.eventfd_read(vec[0]) == 1
    door(vcpu=5)                                 # no such vector: ignored
    assert door.sent == 2
    for fd in vec:
        os.close(fd)


def test_handover_once_per_connection_then_sync_answers_ring(door):
    a, b = object(), object()
    fd = door.handover(1, a)
    assert fd is not None and door.handover(1, a) is None
    assert door.handover(1, b) == fd             # a reconnect gets it again
    door(vcpu=1, wait=True)                      # SYNC: the plugin rings
    assert door.sent == 0 and door.take_due(1) and not door.take_due(1)
    door(vcpu=1, wait=True, inject=False)        # only wait: no ring due
    assert not door.take_due(1)
    door(vcpu=0, wait=True)                      # vCPU 0 holds nothing
    assert door.sent == 1


def test_closed_doorbell_raises_nothing(door):
    door.close()
    door(vcpu=0)
    assert door.sent == 0
