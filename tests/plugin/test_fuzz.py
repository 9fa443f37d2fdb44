"""Coverage-guided fuzzing (tests/fuzz/hostfuzz.py, qemu_plugin/fuzz/):
every stored crash reproducer replays clean, and a short run of each
harness finds nothing new.  The long run: scripts/fuzz.sh --long."""
import errno
import os
import re
import subprocess
import sys

import pytest

from support import REPO, make
from pyhost import abi
from pyhost.pmu import plugin_protocol as proto
from pyhost.pmu.guestmem import GuestMemory
from pyhost.pmu.hypercall import PerfBackend

SHORT_S = int(os.environ.get("PVPERF_FUZZ_SECONDS", "10"))
HOST_REGRESSIONS = REPO / "tests" / "fuzz" / "regressions" / "hostfuzz"
C_HARNESSES = ("geom", "classify")
DONE = re.compile(r"^#(\d+)\s+DONE\s+cov: (\d+) ft: (\d+)", re.M)


@pytest.mark.parametrize("path", sorted(HOST_REGRESSIONS.iterdir()),
                         ids=lambda p: p.name)
def test_host_regression_replays_clean(path):
    sys.path.insert(0, str(REPO / "tests" / "fuzz"))
    try:
        import hostfuzz
    finally:
        sys.path.pop(0)
    hostfuzz.one_input(path.read_bytes())


def test_scaled_period_at_the_abi_maximum_still_fits_the_reply():
    """Found by hostfuzz: bus-cycles counts in tenths of a core cycle,
    so a guest period of MAX_PERIOD was a raw period past 2^64 and the
    reply to the plugin could not be packed."""
    ram = bytearray(1 << 16)
    be = PerfBackend(GuestMemory(ram), max_vcpus=1)
    bus_cycles = 6                      # PERF_COUNT_HW_BUS_CYCLES
    ram[0x2100:0x2100 + abi.ATTR.size] = abi.GuestPerfAttr(
        0, bus_cycles, abi.MAX_PERIOD, 0, 0, 0, 0, 0, 0).pack()
    ram[0x2000:0x2000 + abi.PARAM.size] = abi.GuestPerfParam(
        0x2100, 0x2200, 1).pack()
    near_wrap = (1 << 64) - 5
    for op, arg, ctr in ((abi.OP_OPEN, 0x2000, 0),
                         (abi.OP_ENABLE, 1, near_wrap)):
        ram[0x1000:0x1000 + abi.HCALL.size] = abi.pack_hcall(
            abi.HC_PERF_OP, op, (arg,), ret=-errno.ENOSYS)
        flags, slots = be.handle_reply(proto.HcallMessage(
            0, 0x1000, 0xFFFFFFFF81000000, (ctr,) * proto.NR_COUNTERS))
        assert int.from_bytes(ram[0x1028:0x1030], "little") == 0
    assert len(proto.pack_reply(flags, slots)) == proto.REPLY_MSG_SIZE
    assert slots[0].period == abi.MAX_PERIOD
    assert slots[0].threshold == proto.DISARMED


def run_harness(name, cmd, seeds, tmp_path):
    """Run for SHORT_S; new inputs go to the first corpus directory (a
    temporary one: the repository's regressions/ are only read)."""
    corpus, artifacts = tmp_path / "corpus", tmp_path / "crashes"
    corpus.mkdir()
    artifacts.mkdir()
    r = subprocess.run(cmd + [f"-max_total_time={SHORT_S}",
                              f"-artifact_prefix={artifacts}/", str(corpus),
                              str(seeds)],
                       capture_output=True, text=True, timeout=SHORT_S + 120)
    assert r.returncode == 0 and not any(artifacts.iterdir()), r.stderr[-3000:]
    m = DONE.findall(r.stderr)
    assert m, r.stderr[-2000:]
    runs, cov, ft = map(int, m[-1])
    print(f"{name}: {runs} runs, cov {cov}, ft {ft}")
    assert runs > 1000 and cov > 0


def test_host_fuzz_short_run(tmp_path):
    run_harness("hostfuzz", [sys.executable,
                             str(REPO / "tests/fuzz/hostfuzz.py")],
                HOST_REGRESSIONS, tmp_path)


@pytest.fixture(scope="module")
def c_harnesses():
    r = make(REPO / "qemu_plugin", "-s", "fuzz", capture_output=True,
             text=True)
    assert r.returncode == 0, r.stderr[-2000:]


@pytest.mark.parametrize("name", C_HARNESSES)
def test_c_fuzz_short_run(c_harnesses, name, tmp_path):
    plugin = REPO / "qemu_plugin"
    run_harness(name, [str(plugin / "fuzz" / f"fuzz_{name}")],
                plugin / "fuzz" / "regressions" / name, tmp_path)


def test_rate_limiter_state_stays_bounded_whatever_the_vcpu_index(caplog):
    """Found by hostfuzz: the limiter kept a window per vCPU index a
    message carried (a u32), so its state grew without bound."""
    caplog.set_level("WARNING", logger="pvperf")
    be = PerfBackend(GuestMemory(bytearray(1 << 16)), max_vcpus=2)
    for vcpu in range(2, 1000):
        be.handle(proto.HcallMessage(vcpu, 0x1000, 0xFFFFFFFF81000000,
                                     (0,) * proto.NR_COUNTERS))
    assert len(be.limiter._window) == 1
