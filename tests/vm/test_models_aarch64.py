"""The cache and branch-predictor models on arm64 against cachegrind in
the same guest.

test_models.py's comparison for an aarch64 guest: `pvperf run
--cachegrind-compat` with cachegrind's geometry strings, the stock arm64
perf on tests/guest_programs/aarch64/memwalk (../memwalk.c on the arm64
runtime: streaming, strided, pointer chasing, random reads, data-
dependent branches, indirect calls), and `valgrind --tool=cachegrind
--vex-guest-chase=no --cache-sim=yes --branch-sim=yes` of the same
binary, run in the same guest (the aarch64 image with valgrind added;
the host cannot run arm64 valgrind), event by event through
docs/events.md's mapping, with test_models.py's tolerances: exact for
instructions, I1 misses, data reads and writes, predicted branches and
their mispredictions; the data and LL misses within 1 % (at least 4
events), the stack lying elsewhere under valgrind.

Register pairs: QEMU makes one access of an ldp/stp of two general
registers (16 bytes for x registers, 8 for w), cachegrind two, one per
register; the plugin counts two (aarch64.c, MEM_PAIR).  Before it did,
memwalk's branchy mode read 12 times where cachegrind read 16 (the
prologue's and epilogue's pairs), and wrote 7 times for 9.

The dynamically linked qs: instructions, reads, writes and predicted
branches within 0.5 % of cachegrind's (valgrind's preload adds ~0.03 %
of instructions: test_aarch64_valgrind.py).
"""
from __future__ import annotations

import subprocess

import pytest

from support import (CACHEGRIND, GEOMETRIES, MODES, PROGRAMS, RUNS,
                     aarch64_image, assert_like_cachegrind, cachegrind_rows,
                     cachegrind_totals, parse_stat, run_guest_script)

pytestmark = pytest.mark.vm

QS = "qs 20000"
ACCESS_EVENTS = ("instructions", "L1-dcache-loads", "L1-dcache-stores",
                 "branch-loads")


def guest_script(geometry: tuple[str, str, str]) -> str:
    i1, d1, ll = geometry
    cg = (f"valgrind --tool=cachegrind --vex-guest-chase=no --cache-sim=yes "
          f"--branch-sim=yes --I1={i1} --D1={d1} --LL={ll} "
          f"--cachegrind-out-file=/tmp/cg.out")
    show = "grep -E '^(events|summary):' /tmp/cg.out"
    lines = ["cd aarch64"]
    for mode in MODES:
        for i, events in enumerate(RUNS):
            evs = ",".join(f"{e}:u" for e in events)
            lines.append(f"echo '=== {mode}.{i}'; perf stat -x, -e {evs} "
                         f"./memwalk {mode} 1 2>&1 >/dev/null")
        lines.append(f"echo '=== {mode}.cg'; {cg} ./memwalk {mode} 1 "
                     f">/dev/null 2>&1; {show}")
    evs = ",".join(f"{e}:u" for e in ACCESS_EVENTS)
    lines += [f"echo '=== qs'; perf stat -x, -e {evs} ./{QS} 2>&1 >/dev/null",
              f"echo '=== qs.cg'; {cg} ./{QS} >/dev/null 2>&1; {show}"]
    return "\n".join(lines + ["echo '=== end'"])


@pytest.fixture(scope="module")
def image():
    return tuple(aarch64_image("test-aarch64-valgrind", "valgrind"))


@pytest.fixture(scope="module", params=list(GEOMETRIES))
def measured(request, image):
    geometry = GEOMETRIES[request.param]
    options = ("--cachegrind-compat", "--I1", geometry[0], "--D1",
               geometry[1], "--LL", geometry[2], *image)
    return request.param, run_guest_script(guest_script(geometry), 1, 900,
                                           options)


@pytest.fixture(scope="module")
def compared(measured):
    """(geometry, mode, event, pvperf, cachegrind) rows."""
    geometry, s = measured
    return cachegrind_rows(geometry, s, {
        mode: cachegrind_totals(s[f"{mode}.cg"]) for mode in MODES})


def test_events_equal_cachegrind(compared):
    """test_models.py's tolerances: the exact events equal, the misses
    within 1 % (at least 4 events)."""
    assert_like_cachegrind(compared, exact=True)
    assert_like_cachegrind(compared, exact=False)


def test_programs_exercise_the_models(compared):
    """Each pattern misses or mispredicts where it should, in cachegrind's
    own counts (so a model that never misses fails above)."""
    ref = {(m, e): c for _g, m, e, _p, c in compared}
    assert ref["stream", "L1-dcache-load-misses"] > 10000
    assert ref["chase", "cache-misses"] > 10000
    assert ref["branchy", "branch-misses"] > 10000
    assert ref["indirect", "branch-misses"] > 10000


def test_program_uses_register_pairs():
    """memwalk saves and restores registers in ldp/stp pairs, so that the
    exact read and write counts above test MEM_PAIR."""
    out = subprocess.run(["aarch64-linux-gnu-objdump", "-d",
                          str(PROGRAMS / "aarch64" / "memwalk")],
                         capture_output=True, text=True, check=True).stdout
    pairs = [line for line in out.splitlines()
             if "\tldp\tx" in line or "\tstp\tx" in line]
    assert len(pairs) >= 4, out[-2000:]


def test_dynamic_program_accesses_match_cachegrind(measured):
    _geometry, s = measured
    ref = cachegrind_totals(s["qs.cg"])
    got = parse_stat(s["qs"], ACCESS_EVENTS)
    for e in ACCESS_EVENTS:
        want = sum(ref[c] for c in CACHEGRIND[e])
        assert abs(got[e] - want) <= 0.005 * want, (e, got[e], want)
