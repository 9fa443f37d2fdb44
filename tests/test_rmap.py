"""pyhost.rmap: record parsing and hostpc_to_guestpc by generation; and
pvperf-rmap.so's markers in a real QEMU (firmware only, no guest image)."""
from __future__ import annotations

import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from pyhost import rmap

REPO = Path(__file__).resolve().parent.parent
HEADER = REPO / "qemu_plugin" / "rmap_format.h"
PLUGIN = REPO / "qemu_plugin" / "pvperf-rmap.so"
M = rmap.TB_MARKER_OFFSET      # a TB's marker address past its code start


def file_header(hooks=0, n_vcpus=1) -> bytes:
    return rmap.FILE_HEADER.pack(rmap.MAGIC, rmap.VERSION, 32, hooks,
                                 n_vcpus, 0)


def tb_record(gen, hostpc, guestpc, sizes, kernel=False, gpa=None) -> bytes:
    code = bytes(range(sum(sizes)))
    flags = (rmap.TB_KERNEL if kernel else 0) | \
        (rmap.TB_GPA_VALID if gpa is not None else 0)
    body = rmap.TB_BODY.pack(hostpc, guestpc,
                             rmap.NO_GPA if gpa is None else gpa,
                             len(sizes), len(code), rmap.VCPU_UNKNOWN, flags)
    body += bytes(sizes) + code
    size = (rmap.REC_HEADER.size + len(body) + 7) & ~7
    rec = rmap.REC_HEADER.pack(rmap.REC_TB, 0, size, gen) + body
    return rec + b"\0" * (size - len(rec))


def insn_record(gen, tb_hostpc, index, hostpc) -> bytes:
    return rmap.REC_HEADER.pack(rmap.REC_INSN, 0, 40, gen) + \
        rmap.INSN_BODY.pack(tb_hostpc, hostpc, index, 0)


def flush_record(gen, ns) -> bytes:
    return rmap.REC_HEADER.pack(rmap.REC_FLUSH, 0, 24, gen) + \
        rmap.FLUSH_BODY.pack(ns)


def test_struct_sizes_match_header():
    text = HEADER.read_text()
    sizes = dict(re.findall(r"sizeof\(struct (\w+)\) == (\d+)", text))
    assert int(sizes["rmap_file_header"]) == rmap.FILE_HEADER.size
    assert int(sizes["rmap_rec_header"]) == rmap.REC_HEADER.size
    assert int(sizes["rmap_tb"]) == rmap.TB_BODY.size
    assert int(sizes["rmap_insn"]) == rmap.INSN_BODY.size
    assert int(sizes["rmap_flush"]) == rmap.FLUSH_BODY.size
    consts = dict(re.findall(r"#define (RMAP_\w+)\s+(0x[0-9a-f]+|\d+)\b",
                             text))
    assert int(consts["RMAP_REC_TB"], 0) == rmap.REC_TB
    assert int(consts["RMAP_REC_INSN"], 0) == rmap.REC_INSN
    assert int(consts["RMAP_REC_FLUSH"], 0) == rmap.REC_FLUSH
    assert int(consts["RMAP_VERSION"], 0) == rmap.VERSION


def test_extent_ends_at_next_tb_of_same_generation():
    data = file_header() + \
        tb_record(0, 0x1000 + M, 0x401000, [4, 3, 2]) + \
        tb_record(0, 0x1100 + M, 0x402000, [5])
    m = rmap.parse(data)
    assert m.hostpc_to_guestpc(0x1000, 0).guestpc == 0x401000
    assert m.hostpc_to_guestpc(0x10ff, 0).guestpc == 0x401000
    assert m.hostpc_to_guestpc(0x1100, 0).guestpc == 0x402000
    assert m.hostpc_to_guestpc(0xfff, 0) is None
    assert m.hostpc_to_guestpc(0x1100 + rmap.MAX_TB_HOST, 0) is None


def test_generations_reuse_host_addresses():
    data = file_header() + tb_record(0, 0x1000 + M, 0x401000, [1]) + \
        flush_record(1, 5_000) + tb_record(1, 0x1000 + M, 0xffffffff81000000,
                                           [1], kernel=True)
    m = rmap.parse(data)
    assert m.generations == [0, 1]
    assert m.hostpc_to_guestpc(0x1010, 0).guestpc == 0x401000
    assert m.hostpc_to_guestpc(0x1010, 1).translation.kernel
    assert m.generation_at(4_999) == 0 and m.generation_at(5_000) == 1


def test_overlapping_guest_translations_are_distinct():
    # the same guest code translated twice (e.g. after invalidation), and a
    # TB starting inside another one's guest range: each hostpc keeps its own
    data = file_header() + tb_record(0, 0x2000 + M, 0x401000, [2, 2, 2]) + \
        tb_record(0, 0x2040 + M, 0x401002, [2, 2]) + \
        tb_record(0, 0x2080 + M, 0x401000, [2, 2, 2])
    m = rmap.parse(data)
    assert [m.hostpc_to_guestpc(h, 0).guestpc for h in
            (0x2000, 0x2050, 0x20a0)] == [0x401000, 0x401002, 0x401000]


@pytest.mark.parametrize("hooks", [rmap.HOOK_LAST, rmap.HOOK_ALL])
def test_insn_hooks_give_instruction_resolution(hooks):
    data = file_header(hooks) + tb_record(0, 0x3000 + M, 0x401000, [4, 3, 2])
    data += insn_record(0, 0x3000 + M, 2, 0x3060)
    if hooks == rmap.HOOK_ALL:
        data += insn_record(0, 0x3000 + M, 1, 0x3040)
    m = rmap.parse(data)
    last = m.hostpc_to_guestpc(0x3070, 0)
    assert last.guestpc == 0x401007 and last.precise
    mid = m.hostpc_to_guestpc(0x3050, 0)
    assert mid.guestpc == (0x401004 if hooks == rmap.HOOK_ALL else 0x401000)


def test_tb_prologue_before_the_marker_belongs_to_the_tb():
    # the icount/exit check precedes the TB's marker; the previous TB's
    # extent ends at this TB's 64-byte-aligned code start
    data = file_header() + tb_record(0, 0x4000 + M, 0x401000, [1]) + \
        tb_record(0, 0x4080 + M, 0x402000, [1])
    m = rmap.parse(data)
    assert m.hostpc_to_guestpc(0x4080, 0).guestpc == 0x402000
    assert m.hostpc_to_guestpc(0x4080 + M - 1, 0).guestpc == 0x402000
    assert m.hostpc_to_guestpc(0x407f, 0).guestpc == 0x401000
    assert m.translations()[0].vcpu is None


def test_insn_range_starts_at_its_marker_op():
    # an instruction's host code starts at its movabs, 2 bytes before the
    # marker address (the imm64); the byte before belongs to the previous
    data = file_header(rmap.HOOK_ALL) + \
        tb_record(0, 0x5000 + M, 0x401000, [4, 3]) + \
        insn_record(0, 0x5000 + M, 1, 0x5042)
    m = rmap.parse(data)
    assert m.hostpc_to_guestpc(0x5040, 0).guestpc == 0x401004
    assert m.hostpc_to_guestpc(0x503f, 0).guestpc == 0x401000


def test_other_version_is_refused():
    data = bytearray(file_header())
    data[8:12] = (1).to_bytes(4, "little")
    with pytest.raises(rmap.RmapFormatError):
        rmap.parse(bytes(data))


def test_truncated_file_keeps_whole_records():
    data = file_header() + tb_record(0, 0x1000 + M, 0x401000, [1])
    m = rmap.parse(data + tb_record(0, 0x2000 + M, 0x402000, [1])[:30])
    assert m.truncated and len(m.translations()) == 1


def test_bad_magic():
    with pytest.raises(rmap.RmapFormatError):
        rmap.parse(b"X" * 64)


# -- the plugin in a real qemu-system-x86_64 ----------------------------------

def run_firmware(out: Path, sig: int, seconds: float, *opts: str,
                 accel: str = "tcg") -> subprocess.CompletedProcess:
    """Run QEMU's firmware (it loops looking for a boot device) with the
    plugin for `seconds`, then send `sig`."""
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("qemu-system-x86_64 missing (run scripts/setup.sh)")
    if not PLUGIN.exists():
        pytest.skip(f"{PLUGIN} not built (make -C qemu_plugin)")
    argv = ["qemu-system-x86_64", "-display", "none", "-nodefaults",
            "-machine", "pc", "-accel", accel, "-m", "128", "-plugin",
            ",".join([str(PLUGIN), f"out={out}", *opts])]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        out_text, err_text = proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.send_signal(sig)
        out_text, err_text = proc.communicate(timeout=30)
    return subprocess.CompletedProcess(argv, proc.returncode, out_text,
                                       err_text)


def test_plugin_markers_in_real_qemu(tmp_path):
    out = tmp_path / "fw.rmap"
    r = run_firmware(out, signal.SIGTERM, 2.0, "hooks=all", "verbose=on")
    assert "0 write errors" in r.stderr, r.stderr
    m = rmap.read(out)
    trs = m.translations()
    assert not m.truncated and len(trs) > 100
    # the marker follows the TB's exit check (none with CF_NOIRQ)
    assert {t.hostpc - t.host_start for t in trs} <= {M, 2}
    assert all(t.vcpu is None for t in trs)
    # hooks=all: each later instruction's marker lies inside its TB's
    # extent, in instruction order.  Only the last may have none: QEMU 7.2
    # shows plugins the first bytes of an instruction that crosses into
    # the next page, then drops its code and ends the TB before it.
    multi = [t for t in trs if len(t.insn_sizes) > 2]
    assert multi
    for t in multi:
        marks = [t.insn_hostpc.get(i) for i in range(1, len(t.insn_sizes))]
        if marks[-1] is None:
            marks.pop()
        assert None not in marks, (hex(t.hostpc), t.insn_hostpc)
        assert t.hostpc < marks[0] and marks == sorted(marks)
        assert marks[-1] < t.host_end
    assert sum(len(t.insn_hostpc) == len(t.insn_sizes) - 1
               for t in multi) > 0.9 * len(multi)
    # distinct TBs, distinct host code
    assert len({t.hostpc for t in trs}) == len(trs)


def test_plugin_records_survive_sigkill(tmp_path):
    # the plugin's scanner thread writes a record once two scans, a second
    # apart, saw its marker at the same place
    out = tmp_path / "fw.rmap"
    run_firmware(out, signal.SIGKILL, 4.0)
    assert len(rmap.read(out).translations()) > 100


def test_plugin_refuses_split_wx_loudly(tmp_path):
    # no rwx code buffer: no markers to find, so QEMU must not run on
    r = run_firmware(tmp_path / "fw.rmap", signal.SIGKILL, 20.0,
                     accel="tcg,split-wx=on")
    assert r.returncode == 1 and "split-wx" in r.stderr, r.stderr
