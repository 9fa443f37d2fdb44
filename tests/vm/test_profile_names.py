"""pvperf profile names what it cannot symbolize, and says why.

* Two concurrent runs of tests/guest_programs/qs (a dynamically linked
  PIE sorting with libc's qsort) map libc.so.6 at two ASLR bases.
  Debian's libc has no symbols for its internal functions (msort's
  helpers), so their samples cannot name a function: they must be named
  ``libc.so.6+0xOFFSET``, the same offset from both processes (one row,
  samples of both pids in it), never ``[guest user 0x...]``.  The
  reference for the offset is the process's own /proc/PID/maps snapshot
  (the session's process table) and the library file: the bytes QEMU
  translated are the file's bytes at that offset.
* The report names the emulator files whose samples got no function
  name and why (Debian's qemu-system-x86_64 is stripped: .dynsym only).
"""
from __future__ import annotations

import json
import re
from collections import defaultdict

import pytest

from support import PROGRAMS, run_pvperf

pytestmark = pytest.mark.vm

N = 800000
LIBC_ROW = re.compile(r"^libc\.so\.6\+0x[0-9a-f]+$")


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    out = tmp_path_factory.mktemp("prof")
    r = run_pvperf(["profile", "--output", str(out), "--share",
                    str(PROGRAMS), "--", "sh", "-c",
                    f"./qs {N} & ./qs {N}; wait"], timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads((out / "session.json").read_text()), \
        (out / "report.txt").read_text()


def test_unsymbolized_libc_code_is_one_row_for_both_processes(session):
    s, _ = session
    guest_user = [x for x in s["samples"] if x.get("space") == "guest-user"]
    assert not [x for x in guest_user if x["dso"].endswith("libc.so.6")
                and x["symbol"].startswith("[guest user")]
    pids = defaultdict(set)
    for x in guest_user:
        if LIBC_ROW.match(x["symbol"]):
            pids[x["symbol"]].add(x["pid"])
    assert pids, "no libc code without a symbol was sampled"
    top = max(pids, key=lambda sym: sum(x["symbol"] == sym
                                        for x in guest_user))
    assert len(pids[top]) == 2, (top, pids[top])


def test_dso_offset_is_the_files_offset(session):
    """Each libc+offset sample: the pid's maps put its guestpc at that
    offset of libc.so.6."""
    s, _ = session
    checked = 0
    for x in s["samples"]:
        if not LIBC_ROW.match(x.get("symbol", "")) or x["pid"] is None:
            continue
        offset = int(x["symbol"].split("+")[1], 16)
        maps = s["processes"][str(x["pid"])]["maps"]
        held = [lo + offset - off for lo, hi, off, path in maps
                if path == x["dso"] and lo <= x["guestpc"] < hi]
        assert held == [x["guestpc"]], x
        checked += 1
    assert checked


def test_report_says_why_emulator_code_has_no_names(session):
    _, report = session
    line = [ln for ln in report.splitlines()
            if ln.startswith("# No symbols: ") and "qemu-system" in ln]
    assert line and "stripped" in line[0], report[:3000]
