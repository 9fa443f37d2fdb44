"""contracts/rmap_format.h (what pvperf-rmap.so writes) and
pyhost/profile/rmap.py (what pyhost reads) agree: sizes, offsets of the
fields, constants, as gcc sees the header."""
import re

import pytest

from pyhost.profile import rmap

from support import REPO, header_values

HEADER = REPO / "contracts" / "rmap_format.h"


def test_sizes_and_offsets_match_c(tmp_path):
    assert header_values(
        tmp_path, HEADER,
        "sizeof(struct rmap_file_header)", "sizeof(struct rmap_rec_header)",
        "sizeof(struct rmap_tb)", "sizeof(struct rmap_vcpu)",
        "sizeof(struct rmap_aspace)",
        "offsetof(struct rmap_tb, page_table_base)",
        "offsetof(struct rmap_tb, flags)",
        "offsetof(struct rmap_aspace, page_table_base)",
        "offsetof(struct rmap_aspace, tgid)",
        "offsetof(struct rmap_aspace, comm)",
        "sizeof(struct rmap_counts)",
        "offsetof(struct rmap_counts, n_tbs)") == [
        rmap.FILE_HEADER.size, rmap.REC_HEADER.size, rmap.TB_BODY.size,
        rmap.VCPU_BODY.size, rmap.ASPACE_BODY.size,
        # the struct formats' field order: guestpc, page_table_base, tid,
        # n_insns, n_bytes, flags; page_table_base, guestpc, vcpu, tgid,
        # comm
        8, 28, 0, 20, 24,
        # rmap_counts: first_tb, n_tbs
        rmap.COUNTS_BODY.size, 8]


@pytest.mark.parametrize("macro,value", [
    ("RMAP_REC_TB", rmap.REC_TB), ("RMAP_REC_FLUSH", rmap.REC_FLUSH),
    ("RMAP_REC_VCPU", rmap.REC_VCPU), ("RMAP_REC_ASPACE", rmap.REC_ASPACE),
    ("RMAP_REC_COUNTS", rmap.REC_COUNTS),
    ("RMAP_FILE_COUNTS", rmap.FILE_COUNTS),
    ("RMAP_FILE_TASKS", rmap.FILE_TASKS), ("RMAP_TB_KERNEL", rmap.TB_KERNEL),
    ("RMAP_TB_BASE_VALID", rmap.TB_BASE_VALID),
    ("RMAP_COMM_LEN", rmap.COMM_LEN), ("RMAP_VERSION", rmap.VERSION),
    ("RMAP_NO_PID", rmap.NO_PID),
])
def test_constants(tmp_path, macro, value):
    assert header_values(tmp_path, HEADER, macro) == [value]


def test_magic_and_no_architecture_names_in_fields():
    text = HEADER.read_text()
    assert '"PVRMAP\\0\\0"' in text and rmap.MAGIC == b"PVRMAP\0\0"
    # the fields are the contract's names, not one architecture's register
    fields = re.findall(r"^\s+(?:uint\d+_t|char) (\w+)", text, re.M)
    assert "page_table_base" in fields
    assert not {"cr3", "ttbr0", "satp"} & set(fields)
