"""Checkpoints: `pvperf run --checkpoint DIR
--checkpoint-on-output TEXT` saves a guest in the middle of `perf stat`
(and, on x86_64, `perf record`), `pvperf restore DIR` resumes it, and
the counts and samples that come out span both runs exactly.  The
checkpoint waits for the guest to say that its events count (and the
sampling one has overflowed), never for a number of seconds: how far a
guest gets in a second depends on the host.

On every guest architecture (the architecture is part of the checkpoint:
an arm64 guest's RAM starts at 0x40000000, its QEMU is
qemu-system-aarch64) the loop's instruction count across the checkpoint
equals its reference, so nothing was lost or counted twice: valgrind's
count at a small N (as many digits) plus the loop's two instructions per
extra iteration on x86_64 (loop.c), the analytic counts on arm64 and
riscv64 (2N + 8d + 23, 2N + 10d + 24: test_counting.py).  On x86_64 hotcold is recorded across it too, its
per-function shares against callgrind's (its shares do not depend on N:
a constant per iteration).

A restored riscv64 guest gets its timer back (QEMU 10.0 migrates the
value of stimecmp, not the timer behind it: pyhost/arch/riscv64.py):
without that the guest printed the exact count and "=== end", then
idled in wfi for good instead of powering off; the fixture's restore
fails if it does.  test_restore_rewrite_arms_the_timer checks the
rewrite itself against QEMU's own view of the hart (mip).

Corrupted and mismatched checkpoints are refused in one line, before
QEMU starts (no QEMU output, no leftovers); and the plugin refuses a bad
state file on its own too (it must, whoever hands it one).  These take
an x86_64 checkpoint: the refusals are the host's, before any guest runs.
"""
from __future__ import annotations

import asyncio
import io
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import NamedTuple

import pytest

from support import Guest, REPO, guest_arches_wanted, leftovers, on, \
    perf_count, run_pvperf, sections, valgrind_irefs
from pyhost import arch as arches
from pyhost.cli import EXIT_USAGE
from pyhost.pmu import plugin_protocol as proto
from pyhost.vm import channels, gdbstub, qmp
from pyhost.vm.checkpoint import OnOutput
from test_counting import ANALYTIC
from sampling_refs import callgrind_shares, report_shares

# x86_64 at smp 1 with PVPERF_SLOW=1 only: smp 2 takes the same
# checkpoints and checks them alike (arm64 and riscv64 checkpoint at smp 1).
X86 = (Guest("x86_64", 1, slow=True), Guest("x86_64", 2))
ALL = (*X86, Guest("aarch64", 1), Guest("riscv64", 1))

# Every test that takes the checkpoint fixture boots guests; the trigger
# and option tests at the end do not.
vm = pytest.mark.vm

N_LOOP = 4_000_000_000          # 8 G instructions: seconds under TCG
N_HOTCOLD = 1_000_000           # 6 G instructions, ~60,000 samples
PERIOD = 100003
# Turns of a shell loop the recorded task makes before it becomes
# hotcold: busybox sh takes about 12,600 user instructions a turn (and
# 47,500 to start), so ~680,000 instructions, six periods: a sample is
# due before it prints MARK, whatever the host's speed.
N_WARM = 50
MARK = "pvperf-test: both events count, the sampling one has sampled"

# Both workloads at once (two processes), their output after both ended,
# so that every line after MARK comes from the restored guest.  loop's
# counting event is enabled at its exec, before the task takes loop's
# name: once a task is called loop, it counts.
SCRIPT = f"""
perf stat -x, -e instructions:u -o /tmp/stat.txt ./loop {N_LOOP} &
until grep -qsx loop /proc/[0-9]*/comm; do
    kill -0 $! 2>/dev/null || break
    sleep 0.1
done
perf record -q -e instructions:u -c {PERIOD} -o /tmp/hc.data -- sh -c \
    'i=0; while [ $i -lt {N_WARM} ]; do i=$((i+1)); done
     echo "{MARK}"; exec ./hotcold {N_HOTCOLD}' 2> /tmp/rec.txt
wait
echo "=== stat"; cat /tmp/stat.txt
echo "=== record"; cat /tmp/rec.txt
perf report -i /tmp/hc.data --stdio --sort sym 2>&1 | grep '%'
echo "=== end"
"""
# arm64 and riscv64: the loop alone, 2 G instructions (seconds under TCG);
# the trigger is the guest saying it runs (its task has the loop's name).
N_LOOP_ARM64 = 1_000_000_000
MARK_ARM64 = "pvperf-test: the loop counts"
SCRIPT_ARM64 = f"""
perf stat -x, -e instructions:u -o /tmp/stat.txt ./loop {N_LOOP_ARM64} &
until grep -qsx loop /proc/[0-9]*/comm; do sleep 0.1; done
echo "{MARK_ARM64}"
wait
echo "=== stat"; cat /tmp/stat.txt
echo "=== end"
"""
SCRIPTS = {"x86_64": (SCRIPT, MARK), "aarch64": (SCRIPT_ARM64, MARK_ARM64),
           "riscv64": (SCRIPT_ARM64, MARK_ARM64)}


def loop_reference(arch: str) -> int:
    """The loop's instructions:u across the checkpoint."""
    if arch in ANALYTIC:
        return ANALYTIC[arch][0](N_LOOP_ARM64)[0]
    # As many digits (zero-padded): parsing the argument costs per digit.
    programs = Guest(arch).a.programs
    small = str(1000).zfill(len(str(N_LOOP)))
    return valgrind_irefs([str(programs / "loop"), small]) + \
        2 * (N_LOOP - int(small))


class Checkpoint(NamedTuple):
    dir: Path
    taken: subprocess.CompletedProcess
    restored: subprocess.CompletedProcess
    guest: Guest


@pytest.fixture(scope="module")
def checkpoint(request, tmp_path_factory) -> Checkpoint:
    """A checkpoint of a support.Guest, taken and restored."""
    guest = request.param
    programs = guest.a.build()
    script, mark = SCRIPTS[guest.arch]
    d = tmp_path_factory.mktemp(f"ck-{guest}") / "ck"
    taken = run_pvperf(["run", *guest.a.run_options, "--smp",
                        str(guest.smp), "--share", str(programs),
                        "--checkpoint", str(d), "--checkpoint-on-output",
                        mark, "--", "sh", "-c", script], timeout=600)
    assert taken.returncode == 0, taken.stdout[-2000:] + taken.stderr
    assert "=== stat" not in taken.stdout      # stopped mid-loop
    # --timeout: a guest that never reports its exit (a restored riscv64
    # timer that never fires: test_restore_rewrite_arms_the_timer) fails
    # here with the console's tail, not at the subprocess timeout.
    restored = run_pvperf(["restore", "--timeout", "600", str(d)],
                          timeout=900)
    assert restored.returncode == 0, restored.stdout[-2000:] + restored.stderr
    return Checkpoint(d, taken, restored, guest)


@vm
@on(*X86, fixture="checkpoint")
def test_checkpoint_taken_mid_command(checkpoint):
    """The taking run stops with the checkpoint, both perf events open
    and counting (the sampling one already sampled), nothing printed."""
    d, taken = checkpoint.dir, checkpoint.taken
    assert "checkpoint of the guest" in taken.stderr, taken.stderr
    assert MARK in taken.stdout and "=== stat" not in taken.stdout
    manifest = json.loads((d / "manifest.json").read_text())
    assert manifest["trigger"] == {"on_output": MARK}
    state = json.loads((d / "pmu.json").read_text())
    events = state["events"]
    assert any(e["total"] > 0 or e["start"] is not None
               for e in events if not e["period"]), events
    assert any(e["period"] and e["overflows"] > 0 for e in events), events
    assert sorted((d / n).name for n in d.iterdir()) == sorted(
        ["manifest.json", "vmstate", "plugin.state", "pmu.json",
         "initrd-overlay"])


@vm
@on(*ALL, fixture="checkpoint")
def test_count_across_checkpoint_is_exact(checkpoint):
    restored = checkpoint.restored
    s = sections(restored.stdout)
    assert "end" in s, restored.stdout[-2000:] + restored.stderr
    # One perf stat ran, across both QEMUs: one line for the event.
    assert sum(ln.count(",instructions:u,") for ln in s["stat"]) == 1, \
        s["stat"]
    want = loop_reference(checkpoint.guest.arch)
    assert int(perf_count(s["stat"], "instructions:u")) == want, s["stat"]


@vm
@on(*X86, fixture="checkpoint")
def test_sampling_across_checkpoint_matches_callgrind(checkpoint):
    restored = checkpoint.restored
    s = sections(restored.stdout)
    got = report_shares(s["record"])
    want = callgrind_shares([str(Guest("x86_64").a.programs / "hotcold"),
                             "20000"])
    for fn in ("hot", "cold"):
        assert abs(got.get(fn, 0.0) - want[fn]) <= 1.0, (fn, got, want)
    samples = sum(1 for _ in s["record"])
    assert samples, s["record"]


@vm
@on(*ALL, fixture="checkpoint")
def test_no_leftovers_after_restore(checkpoint):
    assert leftovers() == []


async def _mips(client) -> list[int]:
    """Each hart's mip as QEMU's monitor shows it (`info registers -a`)."""
    text = await client.execute("human-monitor-command",
                                {"command-line": "info registers -a"})
    return [int(m, 16)
            for m in re.findall(r"^ mip +([0-9a-f]+)\s*$", text, re.M)]


@vm
def test_restore_rewrite_arms_the_timer():
    """What a riscv64 restore does before the vCPUs run reaches the
    timer of every hart: on harts held at reset (stimecmp 0, time 0, and
    no timer armed, as after a restore: nothing wrote the CSR), the
    rewrite of Arch.rewrite_on_restore makes QEMU raise STIP, as a write
    of stimecmp <= time does (time_helper.c riscv_timer_write_timecmp)."""
    if "riscv64" not in guest_arches_wanted():
        pytest.skip("PVPERF_GUEST_ARCHES leaves riscv64 out")
    rv = arches.get("riscv64")
    if shutil.which(rv.qemu) is None:
        pytest.skip(f"no {rv.qemu} (scripts/setup.sh installs it)")
    pairs = channels.SocketPairs(["qmp", "gdb"])
    qemu = subprocess.Popen(
        [rv.qemu, "-nodefaults", "-display", "none", "-S",
         "-machine", rv.machine, "-cpu", rv.cpu, "-smp", "2",
         *pairs.chardev("qmp"), "-mon", "chardev=qmp,mode=control",
         *pairs.chardev("gdb"), "-gdb", "chardev:gdb"],
        pass_fds=pairs.pass_fds, stderr=subprocess.PIPE, text=True)
    pairs.spawned()

    async def scenario():
        client = await qmp.connect(pairs.ours("qmp"), timeout=30)
        try:
            before = await _mips(client)
            await gdbstub.rewrite_registers(pairs.ours("gdb"),
                                            rv.rewrite_on_restore, 2)
            after = await _mips(client)
            status = await client.execute("query-status")
        finally:
            await qmp.quit(client)
            await qmp.close(client)
        return before, after, status
    try:
        before, after, status = asyncio.run(scenario())
        assert qemu.wait(timeout=30) == 0, qemu.stderr.read()
    finally:
        qemu.kill()
        qemu.wait()
        pairs.close()
    STIP = 1 << 5
    assert len(before) == len(after) == 2, (before, after)
    assert [m & STIP for m in before + after] == [0, 0, STIP, STIP], \
        ([hex(m) for m in before], [hex(m) for m in after])
    # the hang-up is no detach: the vCPUs stay held
    assert status["status"] == "prelaunch", status


# -- refusals: each one line, before QEMU starts ----------------------------

def _copy(checkpoint, tmp_path):
    d = tmp_path / "ck"
    shutil.copytree(checkpoint.dir, d)
    return d


def _refused(d, needle: str) -> None:
    r = run_pvperf(["restore", str(d)], timeout=120)
    assert r.returncode == 125, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], r.stderr
    assert r.stdout == ""           # the guest never ran
    assert leftovers() == []


def _edit_manifest(d, edit) -> None:
    """Rewrite the copy's manifest.json with ``edit`` applied to it."""
    m = json.loads((d / "manifest.json").read_text())
    edit(m)
    (d / "manifest.json").write_text(json.dumps(m))


def _rehash(d, name: str) -> None:
    """Make the manifest vouch for ``name`` as it is now: what a careless
    edit or a bug that wrote a bad state would leave."""
    import hashlib
    digest = hashlib.sha256((d / name).read_bytes()).hexdigest()
    _edit_manifest(d, lambda m: m["sha256"].__setitem__(name, digest))


@vm
@on(*X86, fixture="checkpoint")
@pytest.mark.parametrize("name", ["vmstate", "plugin.state", "pmu.json"])
def test_corrupted_file_refused(checkpoint, tmp_path, name):
    d = _copy(checkpoint, tmp_path)
    raw = bytearray((d / name).read_bytes())
    raw[len(raw) // 2] ^= 0x40
    (d / name).write_bytes(bytes(raw))
    _refused(d, f"{name} does not match its SHA-256")


@vm
@on(*X86, fixture="checkpoint")
def test_unfinished_checkpoint_refused(checkpoint, tmp_path):
    d = _copy(checkpoint, tmp_path)
    (d / "manifest.json").unlink()
    _refused(d, "no manifest.json")


@vm
@on(*X86, fixture="checkpoint")
def test_other_format_version_refused(checkpoint, tmp_path):
    d = _copy(checkpoint, tmp_path)
    _edit_manifest(d, lambda m: m.__setitem__("version", 99))
    _refused(d, "checkpoint format 99")


@vm
@on(*X86, fixture="checkpoint")
def test_other_qemu_refused(checkpoint, tmp_path):
    d = _copy(checkpoint, tmp_path)
    _edit_manifest(d, lambda m: m.__setitem__("qemu",
                                              "QEMU emulator version 9.2.0"))
    _refused(d, "taken under 'QEMU emulator version 9.2.0'")


@vm
@on(*X86, fixture="checkpoint")
def test_bad_plugin_state_refused(checkpoint, tmp_path):
    """A plugin state whose hash matches but whose contents are wrong
    (a slot count of 9) is refused as the plugin would refuse it."""
    d = _copy(checkpoint, tmp_path)
    raw = bytearray((d / "plugin.state").read_bytes())
    off = 24 + proto.NR_COUNTERS * 8 + 8 + 4    # vCPU 0's n_slots
    raw[off:off + 4] = (9).to_bytes(4, "little")
    (d / "plugin.state").write_bytes(bytes(raw))
    _rehash(d, "plugin.state")
    _refused(d, "bad vCPU flags or slot count")


@vm
@on(*X86, fixture="checkpoint")
@pytest.mark.parametrize("edit,needle", [
    (lambda s: s["events"][0].update(running_on=7), "is not an integer"),
    (lambda s: s["events"][0].update(attr="00"), "bad attr"),
    (lambda s: s["events"][0].update(guest_event_gpa=1 << 40), "event 0"),
    (lambda s: s["rings"][0].update(gpa=3), "sample ring"),
    (lambda s: s.update(version=2), "PMU state version 2"),
])
def test_bad_pmu_state_refused(checkpoint, tmp_path, edit, needle):
    d = _copy(checkpoint, tmp_path)
    state = json.loads((d / "pmu.json").read_text())
    edit(state)
    (d / "pmu.json").write_text(json.dumps(state))
    _rehash(d, "pmu.json")
    _refused(d, needle)


@vm
@on(*X86, fixture="checkpoint")
def test_plugin_refuses_bad_state_itself(checkpoint, tmp_path):
    """Whoever hands the plugin a state file: a bad one stops QEMU at
    install with the reason, before any guest code."""
    raw = bytearray((checkpoint.dir / "plugin.state").read_bytes())
    raw[4:8] = (7).to_bytes(4, "little")         # version
    bad = tmp_path / "bad.state"
    bad.write_bytes(bytes(raw))
    plugin = REPO / "qemu_plugin" / "pvperf.so"
    r = subprocess.run(["qemu-system-x86_64", "-nodefaults", "-display",
                        "none", "-machine", "pc,accel=tcg", "-S",
                        "-plugin", f"{plugin},state_in={bad}"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "state version differs" in r.stderr, r.stderr


# -- the trigger: the guest's own word, wherever the host splits it -------

def test_output_trigger_sees_text_split_across_writes():
    async def scenario():
        trigger = OnOutput("sampling has begun")
        sink = io.BytesIO()
        out = trigger.watch(sink)
        waiter = asyncio.ensure_future(trigger.wait())
        for chunk in (b"perf: sampl", b"ing has", b" be"):
            out.write(chunk)
            await asyncio.sleep(0)
            assert not waiter.done()
        out.write(b"gun\nmore\n")
        await asyncio.wait_for(waiter, 1)
        out.write(b"sampling has begun again\n")      # already seen: no-op
        assert sink.getvalue() == (b"perf: sampling has begun\nmore\n"
                                   b"sampling has begun again\n")
    asyncio.run(scenario())


@pytest.mark.parametrize("args", [
    ["--checkpoint", "ck"],
    ["--checkpoint", "ck", "--checkpoint-after", "1",
     "--checkpoint-on-output", "x"],
    ["--checkpoint-on-output", "x"],
    ["--checkpoint-after", "1"],
    ["--checkpoint", "ck", "--checkpoint-on-output", ""],
])
def test_checkpoint_needs_exactly_one_trigger(tmp_path, args):
    r = run_pvperf(["run", *args, "--", "true"], cwd=tmp_path, timeout=60)
    assert r.returncode == EXIT_USAGE, r.stdout + r.stderr
    assert "--checkpoint" in r.stderr and r.stdout == ""
    assert not (tmp_path / "ck").exists()
