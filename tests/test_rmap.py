"""pyhost.rmap: record parsing and hostpc_to_guestpc by generation."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from pyhost import rmap

HEADER = Path(__file__).resolve().parent.parent / "qemu_plugin" / \
    "rmap_format.h"


def file_header(hooks=0, n_vcpus=1) -> bytes:
    return rmap.FILE_HEADER.pack(rmap.MAGIC, rmap.VERSION, 32, hooks,
                                 n_vcpus, 0)


def tb_record(gen, hostpc, guestpc, sizes, kernel=False, gpa=None) -> bytes:
    code = bytes(range(sum(sizes)))
    flags = (rmap.TB_KERNEL if kernel else 0) | \
        (rmap.TB_GPA_VALID if gpa is not None else 0)
    body = rmap.TB_BODY.pack(hostpc, guestpc,
                             rmap.NO_GPA if gpa is None else gpa,
                             len(sizes), len(code), 0, flags)
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
        tb_record(0, 0x1000 + 29, 0x401000, [4, 3, 2]) + \
        tb_record(0, 0x1100 + 29, 0x402000, [5])
    m = rmap.parse(data)
    assert m.hostpc_to_guestpc(0x1000, 0).guestpc == 0x401000
    assert m.hostpc_to_guestpc(0x10ff, 0).guestpc == 0x401000
    assert m.hostpc_to_guestpc(0x1100, 0).guestpc == 0x402000
    assert m.hostpc_to_guestpc(0xfff, 0) is None
    assert m.hostpc_to_guestpc(0x1100 + rmap.MAX_TB_HOST, 0) is None


def test_generations_reuse_host_addresses():
    data = file_header() + tb_record(0, 0x1000 + 29, 0x401000, [1]) + \
        flush_record(1, 5_000) + tb_record(1, 0x1000 + 29, 0xffffffff81000000,
                                           [1], kernel=True)
    m = rmap.parse(data)
    assert m.generations == [0, 1]
    assert m.hostpc_to_guestpc(0x1010, 0).guestpc == 0x401000
    assert m.hostpc_to_guestpc(0x1010, 1).translation.kernel
    assert m.generation_at(4_999) == 0 and m.generation_at(5_000) == 1


def test_overlapping_guest_translations_are_distinct():
    # the same guest code translated twice (e.g. after invalidation), and a
    # TB starting inside another one's guest range: each hostpc keeps its own
    data = file_header() + tb_record(0, 0x2000 + 29, 0x401000, [2, 2, 2]) + \
        tb_record(0, 0x2040 + 29, 0x401002, [2, 2]) + \
        tb_record(0, 0x2080 + 29, 0x401000, [2, 2, 2])
    m = rmap.parse(data)
    assert [m.hostpc_to_guestpc(h, 0).guestpc for h in
            (0x2000, 0x2050, 0x20a0)] == [0x401000, 0x401002, 0x401000]


@pytest.mark.parametrize("hooks", [rmap.HOOK_LAST, rmap.HOOK_ALL])
def test_insn_hooks_give_instruction_resolution(hooks):
    data = file_header(hooks) + tb_record(0, 0x3000 + 29, 0x401000, [4, 3, 2])
    data += insn_record(0, 0x3000 + 29, 2, 0x3060)
    if hooks == rmap.HOOK_ALL:
        data += insn_record(0, 0x3000 + 29, 1, 0x3040)
    m = rmap.parse(data)
    last = m.hostpc_to_guestpc(0x3070, 0)
    assert last.guestpc == 0x401007 and last.precise
    mid = m.hostpc_to_guestpc(0x3050, 0)
    assert mid.guestpc == (0x401004 if hooks == rmap.HOOK_ALL else 0x401000)


def test_truncated_file_keeps_whole_records():
    data = file_header() + tb_record(0, 0x1000 + 29, 0x401000, [1])
    m = rmap.parse(data + tb_record(0, 0x2000 + 29, 0x402000, [1])[:30])
    assert m.truncated and len(m.translations()) == 1


def test_bad_magic():
    with pytest.raises(rmap.RmapFormatError):
        rmap.parse(b"X" * 64)
