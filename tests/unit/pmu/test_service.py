"""The plugin service over a real SOCK_SEQPACKET socket, as the plugin uses it."""
import logging
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import time

from pathlib import Path

import pytest

from pyhost import abi
from pyhost.pmu import plugin_protocol as proto
from pyhost.pmu.guestmem import GuestMemory
from pyhost.pmu.hypercall import PerfBackend
from pyhost.pmu.service import PluginService, Runstate

from foreign_client import as_nobody

KVADDR = 0xFFFFFFFF81000000
PROBE = proto.HcallMessage(0, 0, KVADDR, (0,) * proto.NR_COUNTERS).pack()


def connect(svc):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(svc.path)
    s.settimeout(5)
    return s


def closed_unserved(s: socket.socket) -> bool:
    """A PROBE on ``s`` gets no answer: the service closed it (before the
    send, a broken pipe; with the message unread, a reset)."""
    try:
        s.send(PROBE)
        return s.recv(512) == b""
    except (BrokenPipeError, ConnectionResetError):
        return True


def service(tmp_path, buf=None, peer=None) -> PluginService:
    """A started service that serves this process (or ``peer``)."""
    svc = PluginService(PerfBackend(GuestMemory(buf or bytearray(4096))),
                        tmp_path / "svc")
    svc.start()
    svc.allow_peer(peer or os.getpid())
    return svc


def test_probe_roundtrip_and_clean_stop(tmp_path):
    buf = bytearray(1 << 16)
    buf[0x100:0x140] = abi.pack_hcall(abi.HC_PERF_OP, abi.OP_PROBE, ret=-38)
    svc = service(tmp_path, buf)
    assert svc.runstate is Runstate.RUNNING
    assert svc.plugin_address == str(tmp_path / "svc")
    s = connect(svc)
    lat = []
    for _ in range(200):
        t0 = time.perf_counter()
        s.send(proto.HcallMessage(0, 0x100, KVADDR, (0,) * proto.NR_COUNTERS).pack())
        reply = s.recv(512)
        lat.append(time.perf_counter() - t0)
    assert proto.unpack_reply(reply) == (0, [])
    assert int.from_bytes(buf[0x128:0x130], "little") == abi.ABI_VERSION
    svc.stop()
    assert svc.runstate is Runstate.IDLE
    assert s.recv(64) == b""          # the service closed the connection
    s.close()
    print(f"service round trip p50 {statistics.median(lat) * 1e6:.1f} us")


def test_garbage_message_drops_only_that_connection(tmp_path):
    svc = service(tmp_path)
    try:
        bad = connect(svc)
        bad.send(b"junk")
        assert bad.recv(64) == b""
        good = connect(svc)
        good.send(PROBE)
        assert len(good.recv(512)) == proto.REPLY_MSG_SIZE
    finally:
        svc.stop()


def test_other_process_is_refused_and_logged_once(tmp_path, caplog):
    """Only the allowed pid (QEMU's, in a run) is served: SO_PEERCRED."""
    svc = service(tmp_path, peer=os.getppid())
    try:
        with caplog.at_level(logging.WARNING, logger="pvperf.service"):
            for _ in range(3):
                s = connect(svc)
                assert closed_unserved(s)
                s.close()
    finally:
        svc.stop()
    assert (svc.accepted, svc.refused) == (0, 3)
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1, warnings
    assert f"from pid {os.getpid()} uid {os.geteuid()}" in warnings[0]


def test_connection_before_allow_peer_waits_for_it(tmp_path):
    svc = PluginService(PerfBackend(GuestMemory(bytearray(4096))),
                        tmp_path / "svc")
    svc.start()
    try:
        s = connect(svc)            # QEMU may connect before spawn returns
        time.sleep(0.2)
        assert svc.accepted == 0
        svc.allow_peer(os.getpid())
        s.send(PROBE)
        assert len(s.recv(512)) == proto.REPLY_MSG_SIZE
        assert svc.accepted == 1
    finally:
        svc.stop()


NOBODY_CLIENT = f"""
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.settimeout(5)
s.connect(sys.argv[1])
try:
    s.send(bytes.fromhex("{PROBE.hex()}"))
    reply = s.recv(512)
    print(f"reply of {{len(reply)}} bytes" if reply else "closed")
except (BrokenPipeError, ConnectionResetError):
    print("closed")
"""


def test_foreign_uid_that_reaches_the_socket_is_refused():
    """The run directory (0700) keeps other users out; should one reach
    the socket anyway, the SO_PEERCRED check refuses it: here the socket is
    in a directory everyone may enter."""
    shared = Path(tempfile.mkdtemp(prefix="svc-peer-"))
    try:
        shared.chmod(0o755)
        svc = service(shared)
        os.chmod(svc.path, 0o777)
        try:
            r = subprocess.run(["/usr/bin/python3", "-I", "-c",
                                NOBODY_CLIENT, svc.path], cwd="/",
                               preexec_fn=as_nobody, capture_output=True,
                               text=True, timeout=30)
        finally:
            svc.stop()
    finally:
        shutil.rmtree(shared)
    # connected (the kernel's doing), then closed unserved
    assert r.stdout == "closed\n", r.stdout + r.stderr
    assert (svc.accepted, svc.refused) == (0, 1)


def test_stop_listening_leaves_nothing_to_connect_to(tmp_path):
    svc = service(tmp_path)
    try:
        s = connect(svc)
        s.send(PROBE)
        assert len(s.recv(512)) == proto.REPLY_MSG_SIZE
        svc.stop_listening()
        assert not (tmp_path / "svc").exists()
        with pytest.raises(FileNotFoundError):
            connect(svc)
        s.send(PROBE)               # the served connection goes on
        assert len(s.recv(512)) == proto.REPLY_MSG_SIZE
    finally:
        svc.stop()


def _hcall_reply(s: socket.socket, gpa: int):
    """A hypercall at block gpa: (reply bytes, descriptors passed)."""
    s.send(proto.HcallMessage(0, gpa, KVADDR, (0,) * proto.NR_COUNTERS).pack())
    raw, fds, _, _ = socket.recv_fds(s, 1024, 1)
    return raw, fds


@pytest.mark.parametrize("service_writes", [False, True])
def test_ring_handed_over_with_the_doorbell(tmp_path, monkeypatch,
                                            service_writes):
    """The plugin delivers the vCPU's samples itself when it rings the
    interrupt: the connection that holds a vCPU's doorbell is handed its
    sample ring on every hypercall reply, with the head of every record
    it reported before (PVPERF_SERVICE_WRITES=1: never)."""
    from pyhost.pmu.doorbell import Doorbell
    if service_writes:
        monkeypatch.setenv("PVPERF_SERVICE_WRITES", "1")
    buf = bytearray(1 << 17)
    ring_gpa = 0x10000
    buf[0x100:0x140] = abi.pack_hcall(abi.HC_PERF_OP, abi.OP_SAMPLE_BUF,
                                      (ring_gpa, 4096, 1))
    buf[0x200:0x240] = abi.pack_hcall(abi.HC_PERF_OP, abi.OP_PROBE)
    door = Doorbell(1)
    svc = PluginService(PerfBackend(GuestMemory(buf), nmi=door),
                        tmp_path / "svc")
    svc.start()
    svc.allow_peer(os.getpid())
    try:
        s = connect(svc)
        raw, fds = _hcall_reply(s, 0x100)
        assert len(fds) == 1                      # the doorbell, once
        os.close(fds[0])
        ring = proto.unpack_reply_ring(raw)
        if service_writes:
            assert ring is None
            return
        assert (ring.gpa, ring.head, ring.notified) == (ring_gpa, 0, None)
        note = proto.OverflowMessage(0, 7, abi.MODE_USER, 0x401000, 1000,
                                     2000, proto.WRITTEN | proto.RANG)
        s.send(note.pack())                       # no answer: no event 7
        raw, fds = _hcall_reply(s, 0x200)
        assert fds == []
        assert proto.unpack_reply_ring(raw).head == 1
        assert proto.unpack_reply_ring(raw).notified == 1
        assert int.from_bytes(buf[ring_gpa:ring_gpa + 4], "little") == 0
        s.close()
    finally:
        svc.stop()
        door.close()
