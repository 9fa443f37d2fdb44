"""`pvperf report --diff` of two real profiles, and the interactive flame
graph of a real profile in headless Chromium.

Two builds of hotcold.c, the second with hot() made twice as long
(-DHOT_LOOPS=3200), each profiled under `pvperf profile` (one boot
each), same command: the diff must name hot first.  References,
independent of pvperf: valgrind callgrind's self Ir of hot and cold in
the two builds (hot's doubles, cold's does not move), and the host time
the diff gives hot in the two profiles is in callgrind's ratio within
30 % (both runs share two cores with other work).  The second
profile's flamegraph.html, loaded in Chromium: its totals are
report.txt's (tests/browser.py).

Samples of hot, at 4000 Hz: `./hotcold 100000` gave 963 (A) and 1669
(B), the diff ranking hot first at +176 ms and the B/A ratio 1.73 against
callgrind's 2.00 (on a machine busy with two other guests and a QEMU
build); 150000 keeps > 1000 in A.
"""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from support import Guest, on, run_pvperf
from test_profile import CFLAGS, callgrind_self_ir

import browser

pytestmark = pytest.mark.vm

X86 = Guest("x86_64", 1)
N = "150000"


@pytest.fixture(scope="module")
def builds(request, tmp_path_factory):
    """Share directories "a" and "b", each with its build as ./hotcold."""
    guest = request.param
    out = {}
    for name, flags in (("a", []), ("b", ["-DHOT_LOOPS=3200"])):
        d = tmp_path_factory.mktemp(f"diff-{name}")
        subprocess.run(["gcc", *CFLAGS, *flags, "-o", str(d / "hotcold"),
                        str(guest.a.programs / "hotcold.c")], check=True)
        out[name] = d
    return guest, out


def callgrind(prog) -> dict[str, int]:
    """Self Ir of hot and cold (placed by nm: no debug info)."""
    if shutil.which("valgrind") is None:
        pytest.skip("valgrind missing (apt-get install valgrind)")
    cg = prog.parent / "cg.out"
    subprocess.run(["valgrind", "--tool=callgrind",
                    f"--callgrind-out-file={cg}", str(prog), N],
                   check=True, capture_output=True)
    ir = callgrind_self_ir(cg.read_text())
    cg.unlink()
    nm = subprocess.run(["nm", str(prog)], capture_output=True, text=True,
                        check=True).stdout
    addr = {p[2]: int(p[0], 16) for p in map(str.split, nm.splitlines())
            if len(p) == 3}
    return {f: ir.get(f, ir.get(f"{addr[f]:#018x}", 0))
            for f in ("hot", "cold")}


def function_rows(text: str) -> list[tuple[float, str, str]]:
    """(delta ms, space, symbol) of the diff's function table."""
    lines = text.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("# Functions"))
    rows = []
    for line in lines[start + 2:]:
        m = re.match(r"\s+\S+%\s+\S+%\s+(\S+)\s+(?:\S+\s+){5}(\S+)\s+(.*)$",
                     line)
        if not m:
            break
        rows.append((float(m[1]), m[2], m[3]))
    return rows


def ms_of(text: str, symbol: str) -> tuple[float, float]:
    """A's and B's host ms of a function in the diff's text."""
    for line in text.splitlines():
        parts = line.split()
        if parts[-2:] == ["guest-user", symbol]:
            return float(parts[3]), float(parts[4])
    raise AssertionError(f"{symbol} not in the diff")


@on(X86, fixture="builds")
def test_diff_names_the_function_made_longer(builds, tmp_path):
    guest, shares = builds
    ref = {k: callgrind(d / "hotcold") for k, d in shares.items()}
    assert ref["b"]["hot"] / ref["a"]["hot"] == pytest.approx(2, rel=0.01)
    assert ref["b"]["cold"] == ref["a"]["cold"]
    for name, d in shares.items():
        r = run_pvperf(["profile", "--output", str(tmp_path / name),
                        "--share", str(d), "--", "./hotcold", N],
                       timeout=400)
        assert r.returncode == 0, r.stderr[-3000:]
    out = tmp_path / "diff"
    r = run_pvperf(["report", "--diff", str(tmp_path / "a"),
                    str(tmp_path / "b"), "--output", str(out)])
    assert r.returncode == 0, r.stderr[-3000:]
    rows = function_rows(r.stdout)
    assert rows[0][1:] == ("guest-user", "hot"), r.stdout[:3000]
    a_ms, b_ms = ms_of(r.stdout, "hot")
    assert a_ms > 1000 * 1000 / 4000, r.stdout[:3000]   # > 1000 samples
    assert b_ms / a_ms == pytest.approx(ref["b"]["hot"] / ref["a"]["hot"],
                                        rel=0.3), r.stdout[:3000]
    assert (out / "diff-flamegraph.html").stat().st_size > 0
    if browser.chromium() is None:
        pytest.skip("no chromium for the flame graph's totals: apt-get "
                    "install chromium")
    with browser.Browser(tmp_path / "b" / "flamegraph.html") as b:
        browser.assert_totals_match_report(
            browser.frames(b), (tmp_path / "b" / "report.txt").read_text())
