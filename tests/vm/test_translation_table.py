"""pvperf profile's translation table (pyhost/profile/bt_table.py) on an
x86_64 guest, against references independent of pvperf.

* guest instructions per function: tests/guest_programs/divadd.c, a
  freestanding static program, profiled; the table's instructions for
  each of its functions (divide, add, main_sp) equal valgrind callgrind's
  self Ir of the same binary and arguments on the host (functions placed
  by `nm`), and the program's rows add up to cachegrind's total.  Callgrind
  loses the block that makes the exit syscall (measured: its total is 6
  below cachegrind's, the six instructions from main_sp+0x48 through the
  syscall), so main_sp's reference is callgrind's plus that difference.
  The table counts per TB (pvperf-rmap.so counts=on), which over-counts
  only where an instruction faults in a TB's middle; divadd's loops touch
  no memory, so the counts are exact;
* host time per guest instruction: divide() and add() run the same
  five-instruction loop the same number of times, one with `div` (a
  helper call in TCG's x86_64 front end: helper_divq_EAX), the other with
  `add` (inline host code); divide() ranks first of the two by ns per
  guest instruction, and first of the program's functions, and its
  host samples include emulator work on its behalf (the helper).
"""
from __future__ import annotations

import json
import shutil
import subprocess
from collections import Counter

import pytest

from support import PROGRAMS, run_pvperf, valgrind_irefs
from test_profile import CFLAGS, callgrind_self_ir

pytestmark = pytest.mark.vm

N = "20000"
FUNCTIONS = ("divide", "add", "main_sp")


@pytest.fixture(scope="module")
def divadd(tmp_path_factory):
    d = tmp_path_factory.mktemp("share-bt")
    subprocess.run(["gcc", *CFLAGS, f"-I{PROGRAMS}", "-o", str(d / "divadd"),
                    str(PROGRAMS / "divadd.c")], check=True)
    return d


def callgrind_by_name(prog, *args: str) -> Counter:
    """Self Ir per function name: callgrind's, placed with nm, plus the
    exit block callgrind does not count (cachegrind's total minus
    callgrind's) in main_sp, which makes the exit syscall."""
    if shutil.which("valgrind") is None:
        pytest.skip("valgrind missing (apt-get install valgrind)")
    out = prog.parent / f"cg.{prog.name}.out"
    subprocess.run(["valgrind", "--tool=callgrind", "--vex-guest-chase=no",
                    f"--callgrind-out-file={out}", str(prog), *args],
                   check=True, capture_output=True)
    ir = callgrind_self_ir(out.read_text())
    out.unlink()
    nm = subprocess.run(["nm", str(prog)], capture_output=True, text=True,
                        check=True).stdout
    addr = {p[2]: int(p[0], 16) for p in (line.split() for line in
                                          nm.splitlines()) if len(p) == 3}
    named = Counter({name: ir.get(name) or ir.get(f"{addr[name]:#018x}", 0)
                     for name in FUNCTIONS})
    lost = valgrind_irefs([str(prog), *args]) - sum(ir.values())
    assert 0 <= lost <= 16, lost        # one block at most
    named["main_sp"] += lost
    return named


def profile(divadd, out, *options: str):
    """`pvperf profile ./divadd N`: its result and divadd's table rows."""
    r = run_pvperf(["profile", "--output", str(out), "--share", str(divadd),
                    *options, "--", "./divadd", N], timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    table = json.loads((out / "session.json").read_text())[
        "translation_table"]
    assert table["counted"]
    return r, {row["symbol"]: row for row in table["rows"]
               if row["space"] == "guest-user" and row["comm"] == "divadd"}


def test_table_counts_and_ranks_against_callgrind(divadd, tmp_path):
    out = tmp_path / "prof"
    r, rows = profile(divadd, out, "--table-sort", "ns_per_insn")
    reference = callgrind_by_name(divadd / "divadd", N)
    assert all(reference.values()), reference
    assert {f: rows[f]["insns"] for f in FUNCTIONS} == \
        {f: reference[f] for f in FUNCTIONS}
    # and every instruction of the program (_start has no function
    # symbol: the table names it divadd+0x1000, as the report does)
    assert sum(row["insns"] for row in rows.values()
               if row["dso"].endswith("/divadd")) == \
        valgrind_irefs([str(divadd / "divadd"), N])
    # same instruction count, and div costs a helper call per iteration
    assert rows["divide"]["insns"] == rows["add"]["insns"]
    ours = [f for f in sorted(rows, key=lambda f: -(rows[f]["ns_per_insn"]
                                                    or 0))
            if rows[f]["host"] >= 20]
    assert ours[0] == "divide", {f: rows[f] for f in ours}
    assert rows["divide"]["ns_per_insn"] > 1.5 * rows["add"]["ns_per_insn"]
    assert rows["divide"]["behalf"] > rows["add"]["behalf"]
    # the report sorts as asked, and `pvperf report` re-sorts it
    assert "sorted by ns_per_insn" in (out / "report.txt").read_text()
    assert symbols_listed(r.stdout).index("divide") < \
        symbols_listed(r.stdout).index("add")
    again = run_pvperf(["report", str(out), "--table-sort", "insns"])
    assert again.returncode == 0 and "sorted by insns" in again.stdout


def symbols_listed(report: str) -> list[str]:
    """divadd's functions in the order the table lists them."""
    section = report[report.index("# Translation table"):]
    return [line.split()[-3] for line in section.splitlines()
            if line.startswith("  ") and "[divadd " in line]



# One instruction per TB is checked where it is cheap: a real QEMU with
# -accel tcg,one-insn-per-tb=on makes only one-instruction TBs
# (tests/unit/profile/test_rmap.py), and the launcher passes --tcg as that
# -accel (tests/unit/vm/test_qemu.py).  A whole guest boot with it did not
# finish in 600 s on this 2-core host (docs/guide.md).
