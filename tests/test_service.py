"""The plugin service over a real SOCK_SEQPACKET socket, as the plugin uses it."""
import socket
import statistics
import time

from pyhost.pmu import abi
from pyhost.pmu import plugin_protocol as proto
from pyhost.pmu.guestmem import GuestMemory
from pyhost.pmu.hypercall import PerfBackend
from pyhost.pmu.service import PluginService, Runstate

KVADDR = 0xFFFFFFFF81000000


def connect(svc):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect("\0" + svc.name)
    s.settimeout(5)
    return s


def test_probe_roundtrip_and_clean_stop():
    buf = bytearray(1 << 16)
    buf[0x100:0x140] = abi.pack_hcall(abi.HC_PERF_OP, abi.OP_PROBE, ret=-38)
    svc = PluginService(PerfBackend(GuestMemory(buf)))
    svc.start()
    assert svc.runstate is Runstate.RUNNING
    assert svc.plugin_address.startswith("@pvperf-")
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


def test_garbage_message_drops_only_that_connection():
    svc = PluginService(PerfBackend(GuestMemory(bytearray(4096))))
    svc.start()
    try:
        bad = connect(svc)
        bad.send(b"junk")
        assert bad.recv(64) == b""
        good = connect(svc)
        good.send(proto.HcallMessage(0, 0, KVADDR, (0,) * proto.NR_COUNTERS).pack())
        assert len(good.recv(512)) == proto.REPLY_MSG_SIZE
    finally:
        svc.stop()
