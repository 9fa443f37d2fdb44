"""The second guest kernel: Debian's 6.12 (images/linux-6.12, from
bookworm-backports, with its own perf 6.12), a smoke set in one boot.

The same references as the 6.1 tests, which this module borrows:
valgrind's Ir for exact counts (test_counting.py), callgrind's function
shares and nm's addresses for perf record / report and exact sample IPs
(test_sampling.py), callgrind's inclusive shares for callchains
(test_callgraph.py).  The whole suite runs on 6.12 with
PVPERF_GUEST_KERNEL=6.12 (tests/README.md); this module always does.
"""
from __future__ import annotations

import collections
import re

import pytest

from support import GUEST_KERNEL_IMAGES, PROGRAMS, build_driver, \
    run_guest_script, valgrind_irefs
from test_callgraph import FUNCTIONS, TOLERANCE, callgrind_inclusive, \
    chain_shares
from test_counting import counts
from test_sampling import callgrind_shares, report_shares, symbols

pytestmark = pytest.mark.vm

IMAGE = GUEST_KERNEL_IMAGES["6.12"]
N_LOOP = 100000
K_EXTRA = 12345
N_PAGES = 3000
N_HOTCOLD = 2000            # 12 M instructions, ~120 samples at PERIOD
PERIOD = 100003
N_TIGHT = 20000000          # 100 M instructions, ~1,000 precise samples
N_DWARF = 100000            # calltree: 86 M instructions
N_FP = 3000000              # calltree-fp: 83 M
CHAIN_PERIOD = 20011        # ~4,300 samples per record

SCRIPT = f"""
sec() {{ echo "=== $1"; }}
D=/tmp/k; mkdir -p $D
sec kernel;  uname -r; perf --version
sec dmesg;   dmesg | grep 'pvperf:'
sec loop;    perf stat -x, -e instructions:u,branches:u ./loop {N_LOOP} 2>&1
sec loopk;   perf stat -x, -e instructions:u,branches:u ./loop {N_LOOP + K_EXTRA} 2>&1
sec pages;   perf stat -x, -e instructions:u ./pages {N_PAGES} 2>&1
sec report
perf record -q -e instructions:u -c {PERIOD} -o $D/hc.data ./hotcold {N_HOTCOLD} 2>&1
perf report -i $D/hc.data --stdio --sort sym 2>&1 | grep '%'
sec precise
perf record -q -e instructions:upp -c {PERIOD} -o $D/t.data ./tight {N_TIGHT} 2>&1
perf script -i $D/t.data -F ip 2>&1
sec dwarf
perf record -q -m 4M --call-graph dwarf,2048 -e instructions:u -c {CHAIN_PERIOD} -o $D/dwarf.data ./calltree {N_DWARF} 2>&1
perf script -i $D/dwarf.data -F ip,sym 2>/dev/null
sec fp
perf record -q -g -e instructions:u -c {CHAIN_PERIOD} -o $D/fp.data ./calltree-fp {N_FP} 2>&1
perf script -i $D/fp.data -F ip,sym 2>/dev/null
sec fp-report
perf report -i $D/fp.data --stdio --children > $D/fp.txt 2>&1
echo "report exit $?"
sec nmi;     dmesg | grep -i -E 'unknown reason|dazed|uhhuh' ; true
sec end
"""


@pytest.fixture(scope="module")
def guest():
    build_driver(IMAGE)
    return run_guest_script(SCRIPT, smp=2, timeout=900,
                            options=("--image", IMAGE))


def test_the_guest_runs_612_and_its_perf(guest):
    release, version = guest["kernel"][:2]
    assert release.startswith("6.12."), guest["kernel"]
    assert version.startswith("perf version 6.12."), guest["kernel"]


def test_driver_samples_on_612(guest):
    assert any("sampling with exact IPs" in l for l in guest["dmesg"]), \
        guest["dmesg"]


def test_instructions_u_equals_valgrind(guest):
    (ev, value, _), _ = counts(guest["loop"])
    assert ev == "instructions:u"
    assert value == valgrind_irefs([str(PROGRAMS / "loop"), str(N_LOOP)])


def test_instructions_u_exact_across_page_faults(guest):
    (_, value, _), = counts(guest["pages"])
    assert value == valgrind_irefs([str(PROGRAMS / "pages"), str(N_PAGES)])


def test_branches_grow_by_exactly_the_extra_iterations(guest):
    (_, i0, _), (_, b0, _) = counts(guest["loop"])
    (_, i1, _), (_, b1, _) = counts(guest["loopk"])
    assert b1 - b0 == K_EXTRA      # one branch per iteration (dec; jnz)
    assert i1 - i0 == 2 * K_EXTRA + 9 * (len(str(N_LOOP + K_EXTRA))
                                         - len(str(N_LOOP)))


def test_report_shares_match_callgrind(guest):
    ref = callgrind_shares([str(PROGRAMS / "hotcold"), str(N_HOTCOLD)])
    got = report_shares(guest["report"])
    for fn in ("hot", "cold"):
        assert abs(got.get(fn, 0.0) - ref[fn]) <= 1.0, (fn, got, ref)


def test_precise_sample_ips_are_the_loops_instructions(guest):
    """Every sample IP of tight's 5-instruction loop is one of its
    instructions (nm's addresses), each with a fifth of the samples."""
    syms = {n: a for a, n in symbols(str(PROGRAMS / "tight")).items()}
    lo, hi = syms["tight_loop"], syms["tight_end"]
    ips = [int(l.strip(), 16) for l in guest["precise"]
           if re.fullmatch(r"\s*[0-9a-f]+\s*", l)]
    inside = collections.Counter(ip for ip in ips if lo <= ip < hi)
    assert len(inside) == 5, inside
    total = sum(inside.values())
    assert total >= 0.95 * len(ips) and total > 900, (total, len(ips))
    for ip, n in inside.items():
        assert abs(100.0 * n / total - 20.0) <= 2.0, (hex(ip), inside)


@pytest.mark.parametrize("section,binary,n", [("dwarf", "calltree", N_DWARF),
                                              ("fp", "calltree-fp", N_FP)])
def test_callchain_shares_match_callgrind_inclusive(guest, section, binary, n):
    want = callgrind_inclusive([str(PROGRAMS / binary), str(n)])
    got, samples = chain_shares(guest[section])
    assert samples >= 3000, guest[section][:40]
    off = {f: (got[f], want[f]) for f in FUNCTIONS
           if abs(got[f] - want[f]) > TOLERANCE}
    assert not off, (off, samples)


def test_perf_report_children_exits_0(guest):
    assert "report exit 0" in guest["fp-report"], guest["fp-report"]


def test_no_unknown_nmi(guest):
    assert guest["nmi"] == [], guest["nmi"]
