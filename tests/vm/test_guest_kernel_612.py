"""The second guest kernel: Debian's 6.12 (images/linux-6.12, from
bookworm-backports, with its own perf 6.12), a smoke set in one boot.

The checks are the 6.1 modules' own tests, imported (pytest runs an
imported test function here, with this module's ``guest``): the
script below makes the sections they read, with their modules'
constants.  So the references are theirs: valgrind's Ir and analytic
counts (test_counting.py), callgrind's function shares and nm's
addresses of the sampled loop (test_sampling.py), callgrind's
inclusive shares for callchains (test_callgraph.py).  The whole suite
runs on 6.12 with PVPERF_GUEST_KERNEL=6.12 (tests/README.md); this
module always does.
"""
from __future__ import annotations

import pytest

import test_callgraph as chains
import test_counting as counting
import test_sampling as sampling
from support import GUEST_KERNEL_IMAGES, Guest, build_driver, \
    on, rerun_on, run_guest_script

pytestmark = pytest.mark.vm

IMAGE = GUEST_KERNEL_IMAGES["6.12"]
C, S, G = counting, sampling, chains
# One boot: x86_64 at smp 2 on the 6.12 image.  The 6.1 modules' checks,
# on this boot (they were written for the guests of their modules).
K612 = Guest("x86_64", 2)
for _test in (G.test_callchain_shares_match_callgrind_inclusive,
              G.test_perf_report_children_exits_0,
              C.test_branches_across_page_faults_are_exact,
              C.test_branches_grow_by_exactly_the_extra_iterations,
              C.test_driver_found_the_host,
              C.test_group_user_plus_kernel_equals_all,
              C.test_loop_counts_equal_the_reference,
              C.test_instructions_u_exact_across_page_faults,
              C.test_perf_list_shows_the_pmu_events,
              S.test_callchain_names_hot_callers, S.test_driver_samples,
              S.test_no_unknown_nmi,
              S.test_precise_samples_spread_evenly_over_the_loop):
    globals()[_test.__name__] = rerun_on(_test, K612)

SCRIPT = f"""
sec() {{ echo "=== $1"; }}
D=/tmp/k; mkdir -p $D
sec kernel;  uname -r; perf --version
sec dmesg;   dmesg | grep 'pvperf:'
sec loop;    perf stat -x, -e instructions:u,branches:u ./loop {C.N_LOOP} 2>&1
sec loopk;   perf stat -x, -e instructions:u,branches:u ./loop {C.N_LOOP + C.K_EXTRA} 2>&1
sec pages;   perf stat -x, -e instructions:u ./pages {C.N_PAGES} 2>&1
sec pagesb;  perf stat -x, -e instructions:u,branches:u ./pages {C.N_PAGES} 2>&1
sec pagesb2; perf stat -x, -e instructions:u,branches:u ./pages {2 * C.N_PAGES} 2>&1
sec group;   perf stat -x, -e '{{instructions:u,instructions:k,instructions}}' ./pages 500 2>&1
sec list;    perf list hw 2>&1
sec report
perf record -q -e instructions:u -c {S.PERIOD} -o $D/hc.data ./hotcold {S.N_HOTCOLD} 2>&1
perf report -i $D/hc.data --stdio --sort sym 2>&1 | grep '%'
sec precise
perf record -q -e instructions:upp -c {S.PRECISE_PERIOD} -o $D/t.data ./tight {S.N_TIGHT} 2>&1
perf script -i $D/t.data -F ip 2>&1
sec callchain
perf record -q -g -e instructions:u -c {S.PERIOD} -o $D/g.data ./hotcold 3000 2>&1
perf script -i $D/g.data -F ip,sym 2>&1 | head -2000
{G.CHAINS}
sec nmi;     dmesg | grep -i -E 'unknown reason|dazed|uhhuh' ; true
sec end
"""


@pytest.fixture(scope="module")
def guest(request):
    build_driver(IMAGE)
    s = run_guest_script(SCRIPT, smp=request.param.smp, timeout=900,
                         options=("--image", IMAGE))
    s["guest"] = request.param
    return s


@on(K612)
def test_the_guest_runs_612_and_its_perf(guest):
    release, version = guest["kernel"][:2]
    assert release.startswith("6.12."), guest["kernel"]
    assert version.startswith("perf version 6.12."), guest["kernel"]


@on(K612)
def test_report_shares_match_callgrind(guest):
    """perf record / report of hotcold: test_sampling's report check."""
    sampling.test_function_shares_match_valgrind(guest, "report", 1.0)
