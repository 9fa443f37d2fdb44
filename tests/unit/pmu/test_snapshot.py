"""The service's half of a checkpoint (pyhost/pmu/snapshot.py): what is
saved comes back the same, and a damaged state is refused whole.

The end-to-end path (a guest saved and resumed, counts against valgrind)
is tests/vm/test_checkpoint.py; here the PMU state alone, over the backend
API a hypercall would use, so that thousands of damaged variants run in
seconds.
"""
from __future__ import annotations

import copy
import json
import random

import pytest

from pyhost import abi
from pyhost.pmu import snapshot
from pyhost.pmu import plugin_protocol as proto
from pyhost.pmu.events import HW_BRANCH_INSTRUCTIONS, HW_INSTRUCTIONS, \
    PERF_TYPE_HARDWARE
from pyhost.pmu.guestmem import GuestMemory
from pyhost.pmu.hypercall import PerfBackend

RAM = 16 << 20
RING_GPA = 1 << 20
SMP = 2


def snap(*values: int) -> tuple[int, ...]:
    return tuple(values) + (0,) * (proto.NR_COUNTERS - len(values))


def backend() -> PerfBackend:
    return PerfBackend(GuestMemory(bytearray(RAM)), max_vcpus=SMP)


def busy_backend() -> PerfBackend:
    """Two events on vCPU 1 (one sampling, one counting branches), a
    frozen vCPU 0 and a sample ring: what a guest mid-`perf record` has."""
    b = backend()
    pmu = b.pmu
    sampling = abi.GuestPerfAttr(PERF_TYPE_HARDWARE, HW_INSTRUCTIONS, 100003,
                                 0, 0, abi.ATTR_EXCLUDE_KERNEL, 0, 0, 0)
    counting = abi.GuestPerfAttr(PERF_TYPE_HARDWARE, HW_BRANCH_INSTRUCTIONS,
                                 0, 0, 0, 0, 0, 0, 0)
    pmu.open(3, sampling, 0x1000)
    pmu.open(9, counting, 0x2000)
    pmu.enable(3, 1, snap(10, 500))
    pmu.enable(9, 1, snap(10, 500, 4, 70))
    pmu.overflow(3, 1, 500 + 100003, 500 + 2 * 100003)
    pmu.pmu_disable(0, snap())
    b.sampler.set_buffer(1, RING_GPA, 8192, 2)
    b.set_linger({"counting": 1.0})
    return b


def test_roundtrip_keeps_every_field():
    a = busy_backend()
    state = json.loads(json.dumps(snapshot.save(a)))     # as on disk
    b = backend()
    snapshot.restore(b, state, SMP)
    assert snapshot.save(b)["events"] == state["events"]
    for attr in ("events", "frozen", "models_cold_pending"):
        assert getattr(b.pmu, attr) == getattr(a.pmu, attr), attr
    assert b.sampler.rings.keys() == a.sampler.rings.keys()
    ra, rb = a.sampler.rings[1], b.sampler.rings[1]
    assert (ra.gpa, ra.capacity, ra.watermark, ra.head, ra.lost,
            ra.notified) == (rb.gpa, rb.capacity, rb.watermark, rb.head,
                             rb.lost, rb.notified)
    # the restored PMU arms what the saved one armed
    assert b.pmu.slots(1) == a.pmu.slots(1)
    assert b.handle_reply(proto.HcallMessage(1, 0, 0, snap()))[0] & \
        proto.REPLY_SAMPLING


def _leaves(node, path=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaves(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _leaves(v, path + (i,))
    else:
        yield path


JUNK = [None, -1, 1 << 70, "x", "ff" * 72, [], {}, True, 0.5, 7, 0]


def test_damaged_states_are_refused_whole():
    """10,000 states with one leaf replaced by junk: each is restored or
    refused with StateError, and a refused one changes nothing."""
    good = json.loads(json.dumps(snapshot.save(busy_backend())))
    leaves = list(_leaves(good))
    rng = random.Random(15)
    refused = 0
    for _ in range(10_000):
        state = copy.deepcopy(good)
        path = rng.choice(leaves)
        node = state
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = rng.choice(JUNK)
        b = busy_backend()
        before = snapshot.save(b)
        try:
            snapshot.restore(b, state, SMP)
        except snapshot.StateError:
            refused += 1
            after = snapshot.save(b)
            assert after["events"] == before["events"]
            assert after["rings"] == before["rings"]
    assert refused > 5_000


@pytest.mark.parametrize("edit,why", [
    (lambda s: s.update(format="x"), "not a pvperf PMU state"),
    (lambda s: s.update(version=2), "version 2"),
    (lambda s: s["events"].append(dict(s["events"][0])), "twice"),
    (lambda s: s["events"][0].update(period=5), "period"),
    (lambda s: s["events"][0].update(running_on=None), "on no vCPU"),
    (lambda s: s["rings"][0].update(gpa=RAM), "sample ring"),
    (lambda s: s["linger_s"].update(counting=99), "linger"),
])
def test_specific_refusals(edit, why):
    state = json.loads(json.dumps(snapshot.save(busy_backend())))
    edit(state)
    with pytest.raises(snapshot.StateError, match=why):
        snapshot.restore(backend(), state, SMP)


def test_manifest_fields_checked(tmp_path):
    """A hand-edited manifest cannot smuggle options to QEMU or the plugin
    (the plugin's state_out would write a file) or an impossible RAM size:
    refused before anything is read or started."""
    from pyhost.vm import checkpoint
    vm = {"mode": "run", "command": "true", "smp": 1, "mem_mb": 1024,
          "pmu": True, "timing": False, "deterministic": False,
          "staged": True, "accounting": "cpu", "share": None,
          "kernel_args": [], "devices": ["edu"],
          "plugin_options": {"I1": "32768,8,64"}, "vmlinux": "/x",
          "initramfs": "/y"}
    good = {"format": checkpoint.FORMAT, "version": checkpoint.VERSION,
            "vm": vm, "sha256": {}}
    (tmp_path / "manifest.json").write_text(json.dumps(good))
    assert checkpoint._manifest(tmp_path, "t")["vm"] == vm
    for edit in ({"plugin_options": {"state_out": "/etc/passwd"}},
                 {"mem_mb": 1 << 20}, {"smp": "2"}, {"mode": "shell"},
                 {"kernel_args": [1]}, {"devices": [1]},
                 {"accounting": None}):
        bad = copy.deepcopy(good)
        bad["vm"].update(edit)
        (tmp_path / "manifest.json").write_text(json.dumps(bad))
        with pytest.raises(checkpoint.CheckpointError, match="not a pvperf"):
            checkpoint._manifest(tmp_path, "t")
