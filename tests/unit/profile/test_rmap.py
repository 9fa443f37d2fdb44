"""pyhost.rmap: the jitdump and plugin-record parsers, their join, lookups
by time across code-cache flushes, the address-space timeline; and pvperf-rmap.so
with QEMU's -jitdump in a real qemu-system-x86_64 (firmware only, no guest
image)."""
from __future__ import annotations

import re
import shutil
import signal
import struct
import subprocess
import time
from pathlib import Path

import pytest

from pyhost.profile import rmap

REPO = Path(__file__).resolve().parents[3]
PLUGIN = REPO / "qemu_plugin" / "pvperf-rmap.so"
HOST = 0x7F0000000000       # a code-cache address


# -- synthetic files ----------------------------------------------------------

def file_header(flags=0, max_vcpus=1) -> bytes:
    return rmap.FILE_HEADER.pack(rmap.MAGIC, rmap.VERSION, 32, flags,
                                 max_vcpus, 0)


def padded(rtype, t, body) -> bytes:
    size = (rmap.REC_HEADER.size + len(body) + 7) & ~7
    rec = rmap.REC_HEADER.pack(rtype, 0, size, t) + body
    return rec + b"\0" * (size - len(rec))


def tb_record(t, tid, guestpc, sizes, base=0x1000, kernel=False) -> bytes:
    code = bytes(range(sum(sizes)))
    flags = (rmap.TB_KERNEL if kernel else 0) | \
        (rmap.TB_BASE_VALID if base is not None else 0)
    body = rmap.TB_BODY.pack(guestpc, base or 0, tid, len(sizes), len(code),
                             flags) + bytes(sizes) + code
    return padded(rmap.REC_TB, t, body)


def flush_record(t) -> bytes:
    return padded(rmap.REC_FLUSH, t, b"")


def vcpu_record(t, vcpu, tid) -> bytes:
    return padded(rmap.REC_VCPU, t, rmap.VCPU_BODY.pack(vcpu, tid))


def aspace_record(t, vcpu, base, tgid=None, comm=b"") -> bytes:
    body = rmap.ASPACE_BODY.pack(base, 0xFFFFFFFF81000000, vcpu,
                              rmap.NO_PID if tgid is None else tgid, comm)
    return padded(rmap.REC_ASPACE, t, body)


def counts_record(t, first, executions) -> bytes:
    body = rmap.COUNTS_BODY.pack(first, len(executions), 0) + \
        struct.pack(f"<{len(executions)}Q", *executions)
    return padded(rmap.REC_COUNTS, t, body)


def jit_header(pid=4242, flags=0) -> bytes:
    return rmap.JIT_HEADER.pack(rmap.JIT_MAGIC, rmap.JIT_VERSION,
                                rmap.JIT_HEADER.size, 62, 0, pid, 1, flags)


def jit_load(t, tid, start, size, guestpc, name=None) -> bytes:
    name = (name or f"guest-{guestpc:#x}").encode() + b"\0"
    code = b"\xcc" * size
    body = rmap.JIT_CODE_LOAD_BODY.pack(4242, tid, start, start, size, 0) + \
        name + code
    return rmap.JIT_PREFIX.pack(rmap.JIT_CODE_LOAD,
                                rmap.JIT_PREFIX.size + len(body), t) + body


def jit_debug_info(t, start) -> bytes:
    # QEMU's system-mode JIT_CODE_DEBUG_INFO: only the trailing entry
    body = struct.pack("<QQ", start, 1) + struct.pack("<Qii", start, 0, 0) \
        + b"\0"
    return rmap.JIT_PREFIX.pack(2, rmap.JIT_PREFIX.size + len(body), t) + body


def build(jit_records, plugin_records, flags=0):
    return rmap.parse(jit_header() + b"".join(jit_records),
                      file_header(flags) + b"".join(plugin_records))


# -- formats ------------------------------------------------------------------

def test_jitdump_loads_and_names():
    data = jit_header() + jit_debug_info(10, HOST) + \
        jit_load(11, 7, HOST, 0x40, 0xFFFFFFFF81000010) + \
        jit_load(12, 7, HOST + 0x80, 0x20, 0, name="tcg-prologue-buffer")
    j = rmap.parse_jitdump(data)
    assert j.pid == 4242 and not j.truncated
    a, b = j.loads
    assert (a.time_ns, a.tid, a.host_start, a.host_size, a.guestpc) == \
        (11, 7, HOST, 0x40, 0xFFFFFFFF81000010)
    assert b.guestpc is None and b.name == "tcg-prologue-buffer"


def test_jitdump_refuses_arch_timestamps_and_other_magic():
    with pytest.raises(rmap.RmapFormatError):
        rmap.parse_jitdump(jit_header(flags=rmap.JITDUMP_FLAGS_ARCH_TIMESTAMP))
    with pytest.raises(rmap.RmapFormatError):
        rmap.parse_jitdump(b"X" * 64)


def test_truncated_files_keep_whole_records():
    data = jit_header() + jit_load(1, 7, HOST, 0x40, 0x401000)
    j = rmap.parse_jitdump(data + jit_load(2, 7, HOST + 64, 8, 0x402000)[:30])
    assert j.truncated and len(j.loads) == 1
    recs = file_header() + tb_record(1, 7, 0x401000, [1])
    r = rmap.parse_records(recs + tb_record(2, 7, 0x402000, [1])[:20])
    assert r.truncated and len(r.tbs) == 1


def test_other_version_is_refused():
    data = bytearray(file_header())
    data[8:12] = (2).to_bytes(4, "little")
    with pytest.raises(rmap.RmapFormatError):
        rmap.parse_records(bytes(data))


# -- the join -----------------------------------------------------------------

def test_load_pairs_with_its_threads_last_record():
    # threads 7 and 8 translate at the same time; 7 retried 0x401000
    # (tb_gen_code restart: tb_trans ran twice, the last one counts)
    m = build([jit_load(30, 7, HOST, 0x40, 0x401000),
               jit_load(31, 8, HOST + 0x100, 0x40, 0x401000)],
              [tb_record(10, 7, 0x401000, [4, 4]),
               tb_record(20, 7, 0x401000, [4]),
               tb_record(25, 8, 0x401000, [1, 2, 3], base=0x2000)])
    a = m.hostpc_to_translation(HOST, 100)
    b = m.hostpc_to_translation(HOST + 0x100, 100)
    assert a.insn_sizes == [4] and a.page_table_base == 0x1000
    assert b.insn_sizes == [1, 2, 3] and b.page_table_base == 0x2000
    assert m.n_unmatched == 0


def test_load_without_its_record_is_unmatched():
    # the thread's last record is for another vaddr (records lost)
    m = build([jit_load(30, 7, HOST, 0x40, 0x402000)],
              [tb_record(10, 7, 0x401000, [4])])
    tr = m.hostpc_to_translation(HOST, 100)
    assert m.n_unmatched == 1 and not tr.matched and tr.guestpc == 0x402000


def test_extent_runs_to_the_next_tb_and_is_capped():
    m = build([jit_load(1, 7, HOST, 0x40, 0x401000),
               jit_load(2, 7, HOST + 0x100, 0x20, 0x402000)],
              [tb_record(1, 7, 0x401000, [1]),
               tb_record(2, 7, 0x402000, [1])])
    # slow paths after the exact range still belong to the TB
    assert m.hostpc_to_translation(HOST + 0xFF, 9).guestpc == 0x401000
    assert m.hostpc_to_translation(HOST + 0x100, 9).guestpc == 0x402000
    assert m.hostpc_to_translation(HOST - 1, 9) is None
    assert m.hostpc_to_translation(HOST + 0x100 + rmap.MAX_TB_HOST, 9) \
        is None


def test_flush_lets_host_addresses_be_reused():
    m = build([jit_load(10, 7, HOST, 0x40, 0x401000),
               jit_load(30, 7, HOST, 0x40, 0xFFFFFFFF81000000)],
              [tb_record(9, 7, 0x401000, [1]), flush_record(20),
               tb_record(29, 7, 0xFFFFFFFF81000000, [1], kernel=True)])
    assert m.generations == [0, 1]
    assert m.hostpc_to_translation(HOST + 8, 15).guestpc == 0x401000
    assert m.hostpc_to_translation(HOST + 8, 35).kernel
    # after the flush, before the new code: nothing lives there
    assert m.hostpc_to_translation(HOST + 8, 25) is None
    assert m.generation_at(19) == 0 and m.generation_at(20) == 1


def test_discarded_translation_at_the_same_start():
    # tb_gen_code lost the race to link a TB and rolled its allocation
    # back: the next translation reuses the start in the same generation
    m = build([jit_load(10, 7, HOST, 0x40, 0x401000),
               jit_load(20, 7, HOST, 0x30, 0x405000)],
              [tb_record(9, 7, 0x401000, [1]),
               tb_record(19, 7, 0x405000, [1])])
    assert m.hostpc_to_translation(HOST, 15).guestpc == 0x401000
    assert m.hostpc_to_translation(HOST, 25).guestpc == 0x405000


def test_counts_go_to_tb_records_in_file_order():
    data = (file_header(flags=rmap.FILE_COUNTS) +
            tb_record(10, 7, 0x1000, [1, 2]) + flush_record(11) +
            tb_record(12, 8, 0x2000, [3]) + tb_record(13, 7, 0x1000, [1, 2])
            + counts_record(20, 1, [5, 9]) + counts_record(21, 0, [4]))
    recs = rmap.parse_records(data)
    assert recs.counts and not recs.truncated
    assert [r.executions for r in recs.tbs] == [4, 5, 9]
    # a count past the last TB record (a file cut short) is dropped
    recs = rmap.parse_records(file_header() + tb_record(10, 7, 0x1000, [1])
                              + counts_record(20, 0, [3, 8]))
    assert not recs.counts and [r.executions for r in recs.tbs] == [3]


def test_address_space_timeline():
    m = build([], [vcpu_record(1, 0, 100), vcpu_record(1, 1, 101),
                   aspace_record(10, 0, 0x5000, 7, b"big"),
                   aspace_record(20, 1, 0x6000, 8, b"small"),
                   aspace_record(30, 0, 0x6000, 8, b"small"),
                   aspace_record(40, 0, 0x2a10000)], flags=rmap.FILE_TASKS)
    s = m.spaces
    assert s.names_tasks and s.n_events == 4
    assert s.sample_space(100, 9) is None
    assert s.sample_space(100, 25).comm == "big"
    assert s.sample_space(101, 25).tgid == 8
    assert s.sample_space(100, 35).page_table_base == 0x6000
    assert s.sample_space(100, 45).tgid is None
    assert s.sample_space(999, 25) is None          # not a vCPU thread


def test_round_robin_thread_names_no_vcpu():
    m = build([], [vcpu_record(1, 0, 100), vcpu_record(1, 1, 100),
                   aspace_record(10, 0, 0x5000, 7)])
    assert m.spaces.tid_to_vcpu(100) is None


def test_translation_page_table_falls_back_to_the_timeline():
    m = build([jit_load(30, 100, HOST, 0x40, 0x401000)],
              [vcpu_record(1, 0, 100), aspace_record(10, 0, 0x5000, 7),
               tb_record(29, 100, 0x401000, [1], base=None)])
    tr = m.hostpc_to_translation(HOST, 40)
    assert tr.page_table_base is None and m.spaces.translation_page_table(tr) == 0x5000


def test_perfmap_lookup_is_timeless():
    pm = rmap.PerfMap.parse(
        f"{HOST - 0x100:x} 2d tcg-prologue-buffer\n"
        f"{HOST:x} 10 guest-0x401000\n{HOST + 0x10:x} 8 guest-0x401004\n"
        f"{HOST:x} 20 guest-0x999000\n")
    # HOST was written twice (a flush in between): the last line wins
    assert pm.hostpc_to_guestpc(HOST + 4) == 0x999000
    assert pm.hostpc_to_guestpc(HOST + 0x12) == 0x401004
    assert pm.hostpc_to_guestpc(HOST + 0x18) is None
    assert pm.hostpc_to_guestpc(HOST - 0x100) is None


# -- the plugin and -jitdump in a real qemu-system-x86_64 ----------------------

def run_firmware(tmp_path: Path, seconds: float, *opts: str,
                 sig=signal.SIGTERM, accel: str = "tcg"
                 ) -> subprocess.CompletedProcess:
    """Run QEMU's firmware (it loops looking for a boot device) with
    -jitdump (written into tmp_path) and the plugin for `seconds`."""
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("qemu-system-x86_64 missing (run scripts/setup.sh)")
    if not PLUGIN.exists():
        pytest.skip(f"{PLUGIN} not built (make -C qemu_plugin "
                    "pvperf-rmap.so)")
    argv = ["qemu-system-x86_64", "-display", "none", "-nodefaults",
            "-machine", "pc", "-accel", accel, "-m", "128", "-jitdump",
            "-plugin", ",".join([str(PLUGIN), *opts])]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        out_text, err_text = proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.send_signal(sig)
        out_text, err_text = proc.communicate(timeout=30)
    return subprocess.CompletedProcess(argv, proc.returncode, out_text,
                                       err_text)


def test_plugin_and_jitdump_in_real_qemu(tmp_path):
    out = tmp_path / "fw.rmap"
    t0 = time.monotonic_ns()
    r = run_firmware(tmp_path, 2.0, f"out={out}", "verbose=on")
    t1 = time.monotonic_ns()
    assert "0 write errors" in r.stderr, r.stderr
    (jit,) = tmp_path.glob("jit-*.dump")
    m = rmap.read(jit, out)
    trs = m.translations()
    assert len(trs) > 100 and m.n_unmatched == 0 and not m.truncated
    assert m.spaces.vcpu_tids and m.generations == [0]
    # both clocks are CLOCK_MONOTONIC: the run lies inside [t0, t1]
    assert all(t0 < t.time_ns < t1 for t in trs)
    # the plugin sees a TB while it is translated, QEMU reports it after
    # its host code exists: well under a millisecond later
    by_tid = rmap.records_by_tid(rmap.read_records(out).tbs)
    gaps = sorted(load.time_ns - rmap.match_record(load, by_tid).time_ns
                  for load in rmap.parse_jitdump(jit.read_bytes()).loads)
    assert gaps[0] >= 0 and gaps[len(gaps) // 2] < 1_000_000, gaps[-10:]
    # independent reference: the x86 reset vector at 0xfffffff0 holds the
    # firmware's far jump, ljmp $0xf000,$0xe05b (SeaBIOS)
    reset = [t for t in trs if t.guestpc == 0xFFFFFFF0]
    assert reset and reset[0].code == bytes.fromhex("ea5be000f0")
    assert reset[0].insn_sizes == [5] and not reset[0].kernel
    # distinct TBs, distinct host code; real-mode code has page-table base 0
    assert len({t.host_start for t in trs}) == len(trs)
    assert {t.page_table_base for t in trs} == {0}


def test_plugin_counts_tb_executions_in_real_qemu(tmp_path):
    """counts=on: every TB record gets a count, and the firmware's code
    ran: the reset vector's far jump exactly once per reset (one, the
    machine is reset once at start), and the firmware's boot-device loop
    far more often than it was translated."""
    out = tmp_path / "fw.rmap"
    r = run_firmware(tmp_path, 2.0, f"out={out}", "counts=on", "verbose=on")
    assert "0 write errors" in r.stderr, r.stderr
    recs = rmap.read_records(out)
    assert recs.counts
    assert all(t.executions is not None for t in recs.tbs)
    reset = [t for t in recs.tbs if t.guestpc == 0xFFFFFFF0]
    assert [t.executions for t in reset] == [1]
    assert max(t.executions for t in recs.tbs) > 1000
    (jit,) = tmp_path.glob("jit-*.dump")
    m = rmap.read(jit, out)
    assert m.counts and m.unmatched_insns == 0
    assert sum(t.executions for t in m.translations()) == \
        sum(t.executions for t in recs.tbs)


def test_one_insn_per_tb_makes_one_instruction_tbs(tmp_path):
    """QEMU's one-insn-per-tb (what --tcg passes) as the records see it:
    every TB one instruction; without it the firmware's straight-line
    code makes longer TBs.  (How many more TBs a run translates with it:
    tests/vm/test_translation_table.py.)"""
    sizes = {}
    for accel in ("tcg", "tcg,one-insn-per-tb=on"):
        out = tmp_path / f"{len(accel)}.rmap"
        r = run_firmware(tmp_path, 2.0, f"out={out}", accel=accel)
        assert r.returncode in (0, -signal.SIGTERM), r.stderr
        sizes[accel] = [len(t.insn_sizes) for t in
                        rmap.read_records(out).tbs]
    assert max(sizes["tcg"]) > 1
    assert set(sizes["tcg,one-insn-per-tb=on"]) == {1}


@pytest.mark.parametrize("opt, word", [
    ("bogus=1", "bogus"), ("task=1:2:3", "task"),
    ("task=0x1:2:3:4:5:zz", "task"),
    ("task=1/2/3/4/5/6/7/8/9:2:3:4:5:6", "task"),     # path too long
    ("task=1//2:2:3:4:5:6", "task"), ("task=:2:3:4:5:6", "task"),
    ("task=1:2:3:4:5:@", "task"), ("counts=maybe", "counts")])
def test_plugin_rejects_bad_options(tmp_path, opt, word):
    r = run_firmware(tmp_path, 20.0, f"out={tmp_path / 'x'}", opt,
                     sig=signal.SIGKILL)
    assert r.returncode != 0 and word in r.stderr, r.stderr


@pytest.mark.parametrize("task", ["0x31c40:0x54c:0x778:0x4b8:0x38:@0x8f00",
                                  "0xf8/0x130/0x960:0x54c:0x778:0x4b8:0x38:"
                                  "0xfffeffffc0000000"])
def test_plugin_takes_either_way_to_the_task(tmp_path, task):
    """task= as pyhost/arch writes it: a one-step path and the linear
    base's address (x86_64), or a three-step path and the base itself."""
    out = tmp_path / "fw.rmap"
    r = run_firmware(tmp_path, 1.0, f"out={out}", f"task={task}",
                     "verbose=on")
    assert "0 write errors" in r.stderr, r.stderr
    assert rmap.read_records(out).names_tasks
