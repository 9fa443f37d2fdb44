"""perf record / report / annotate / top in the guest, hardware events
through the paravirtual PMU, with exact sample IPs, on every guest
architecture.

References are independent of pvperf: valgrind (callgrind) gives each
function's and each instruction's exact execution count (on the host for
x86_64; in the guest for arm64, the aarch64 image with valgrind added),
``nm`` gives the addresses of the loop under test, and arm64's loop and
regs programs their analytic counts and registers.  One guest boot per
configuration runs every perf command; each test checks its section of
the output.  x86_64 boots at smp 2, and at 1 with PVPERF_SLOW=1 (record,
report, annotate, top, frequency mode).  arm64's and riscv64's boots
are test_sampling_foreign.py's.
"""
from __future__ import annotations

import collections
import math
import re

import pytest

from support import Guest, on, run_guest_script
from sampling_refs import annotate_lines, callgrind_instruction_counts, \
    callgrind_shares, check_top, function_range, report_shares, symbols

pytestmark = pytest.mark.vm

# x86_64 at smp 1 runs with PVPERF_SLOW=1 only: smp 2 runs the same script
# and checks, and SMP besides; sampling at smp 1 stays in the default run
# (test_callgraph, test_sample_regs, test_sample_rate, test_multiprocess).
X86 = (Guest("x86_64", 1, slow=True), Guest("x86_64", 2))
PROGRAMS = X86[0].a.programs

N_HOTCOLD = 2000            # 12 M instructions
PERIOD = 100003
# Prime, not a multiple of the 5-insn loop, and large enough that the
# kernel never throttles (at most 400 samples per 4 ms tick; TCG runs this
# loop at up to ~3e9 instructions/s: <= 120 per tick).
PRECISE_PERIOD = 100003
N_TIGHT = 20000000          # 100 M instructions -> ~1,000 samples
N_FREQ = 400000             # 2.4 G instructions: -F is time-based; about
                            # 2,000 samples keep 3 points > 3 sigma
# perf annotate: precise samples of hotcold at a prime period.  The kernel
# throttles an event at perf_event_max_sample_rate (100,000/s: 400 samples
# per 4 ms tick); TCG runs hot()'s loop at up to ~3e9 instructions per
# second of guest time, so a period of 10007 gets throttled and 100003
# (<= ~33,000 samples/s) does not.  N_ANNOTATE * 4808 / 100003: about 4,800
# samples in hot(), enough that +-2 points on a 33% share is > 3 sigma
# even for random (binomial) sampling; counter-based sampling at a prime
# period is far more even than that.
ANNOTATE_PERIOD = 100003
N_ANNOTATE = 100000         # 600 M instructions
# perf top: system-wide, refreshed every second while hotcold runs in the
# background (killed afterwards).  hotcold has exec'd before perf top
# starts, so perf top finds its maps in /proc at start-up (its own mmap
# record can be dropped as too old while perf top is busy: the samples
# then showed as raw addresses), and the events are :u, so perf top never
# has to load kallsyms under TCG (seen taking over 12 s on a slow host: no
# samples).  With -z each table holds the samples since the last refresh,
# so the tables' hot and cold rows add up to every sample perf top showed
# of them; the guest stops perf top once they reach TOP_SAMPLES (and it
# printed TOP_TABLES tables), whatever the host's speed: a fixed run time
# collected 10,000 and more samples on a quiet host and 1,266 (a decayed
# table, 6.12's perf top) on a loaded one.  TOP_SAFETY_S only ends a run
# that never gets there.  The frequency mode (4000 Hz asked) gets ~1,300
# samples/s on a quiet host; when the driver's SET_PERIOD failed
# (test_frequency_mode_periods_are_accepted) it got none for 5 s, once
# for all of 15 s.
TOP_PERIOD = 100003
# hot() retires 4x cold()'s instructions (hotcold.h): a share p near 0.8,
# whose binomial sigma over n samples is sqrt(p (1 - p) / n).  The fixed
# period's 2-point window is 3 sigma at 3,600 samples; the frequency
# mode's 3 points at 1,600.
HOT_P = 0.8
TOP_TOLERANCE, TOPFREQ_TOLERANCE = 2.0, 3.0
TOP_SAMPLES = math.ceil(HOT_P * (1 - HOT_P) * (3 * 100 / TOP_TOLERANCE) ** 2)
TOPFREQ_SAMPLES = math.ceil(HOT_P * (1 - HOT_P)
                            * (3 * 100 / TOPFREQ_TOLERANCE) ** 2)
TOP_TABLES = 5
TOP_SAFETY_S = 300

SCRIPT = f"""
sec() {{ echo "=== $1"; }}
D=/tmp/s; mkdir -p $D
sec dmesg;   dmesg | grep 'pvperf:'
sec report
perf record -q -e instructions:u -c {PERIOD} -o $D/hc.data ./hotcold {N_HOTCOLD} 2>&1
perf report -i $D/hc.data --stdio --sort sym 2>&1 | grep '%'
sec unbuffered
echo 0 > /sys/module/pvperf/parameters/buffered
perf record -q -e instructions:u -c {PERIOD} -o $D/hc2.data ./hotcold {N_HOTCOLD} 2>&1
perf report -i $D/hc2.data --stdio --sort sym 2>&1 | grep '%'
echo 1 > /sys/module/pvperf/parameters/buffered
sec precise
perf record -q -e instructions:upp -c {PRECISE_PERIOD} -o $D/t.data ./tight {N_TIGHT} 2>&1
perf script -i $D/t.data -F ip 2>&1
sec callchain
perf record -q -g -e instructions:u -c {PERIOD} -o $D/g.data ./hotcold 3000 2>&1
perf script -i $D/g.data -F ip,sym 2>&1 | head -2000
sec freq
perf record -q -e instructions:u -F 4000 -o $D/f.data ./hotcold {N_FREQ} 2>&1
perf report -i $D/f.data --stdio --sort sym 2>&1 | grep -E '%|Samples'
sec freqperiods
perf script -i $D/f.data -F period 2>&1 | sort -u | wc -l
sec pinned
taskset -c $(( $(nproc) - 1 )) perf record -q --sample-cpu -e instructions:u -c {PERIOD} -o $D/c.data ./hotcold 500 2>&1
echo "pinned to $(( $(nproc) - 1 ))"
perf script -i $D/c.data -F cpu 2>&1 | sort | uniq -c
sec annotate
perf record -q -e instructions:upp -c {ANNOTATE_PERIOD} -o $D/a.data ./hotcold {N_ANNOTATE} 2>&1
echo "throttled: $(perf report -D -i $D/a.data 2>&1 | grep -c 'PERF_RECORD_THROTTLE')"
perf annotate -i $D/a.data --stdio hot 2>&1
# perf top reads keys from stdin: on /dev/null (EOF at once) it shows
# its key help over and over; a FIFO we hold open for writing never
# becomes readable.  No tty needed; SIGINT ends it (exit status 0).
# top_until N OPTIONS...: perf top OPTIONS while hotcold runs, until its
# tables' hot and cold rows hold N samples and it printed {TOP_TABLES}
# tables (or {TOP_SAFETY_S} s went by), then SIGINT (exit status 0).
mkfifo $D/nokeys; exec 3<>$D/nokeys
top_until() {{
  need=$1; shift
  ./hotcold 1000000000 & pid=$!
  until readlink /proc/$pid/exe | grep -q '/hotcold$'; do sleep 0.1; done
  perf top --stdio -z -d 1 -E 10 -n "$@" <&3 > $D/top.out 2>&1 & top=$!
  t=0; set -- 0 0
  while [ $t -lt {TOP_SAFETY_S} ] && kill -0 $top 2>/dev/null; do
    sleep 1; t=$((t + 1))
    set -- $(awk '/PerfTop:/ {{ t++ }}
      $4 == "[.]" && ($5 == "hot" || $5 == "cold") {{ n += $2 }}
      END {{ print n + 0, t + 0 }}' $D/top.out)
    [ $1 -ge $need ] && [ $2 -ge {TOP_TABLES} ] && break
  done
  kill -INT $top; wait $top; echo "top exit $?"
  echo "top: $1 samples of hot and cold in $2 tables, $t s"
  cat $D/top.out
  kill $pid; wait $pid
}}
sec top
top_until {TOP_SAMPLES} -e instructions:u -c {TOP_PERIOD}
sec topfreq
top_until {TOPFREQ_SAMPLES} -e instructions:u
exec 3>&-
sec periodfail
dmesg | grep 'SET_PERIOD.*failed' ; true
sec nmi
dmesg | grep -i -E 'unknown reason|dazed|uhhuh' ; true
sec end
"""


@pytest.fixture(scope="module")
def guest(request):
    """The sections of one boot of a support.Guest running SCRIPT."""
    # 900 s for the script, plus the safety nets of the two perf top
    # runs (never reached when perf top gets its samples).
    yield run_guest_script(SCRIPT, request.param.smp,
                           timeout=900 + 2 * TOP_SAFETY_S)


@on(*X86)
def test_driver_samples(guest):
    assert any("sampling with exact IPs" in l for l in guest["dmesg"]), \
        guest["dmesg"]


@pytest.mark.parametrize("section,tolerance", [
    ("report", 1.0), ("unbuffered", 1.0),
    # -F: perf adjusts the period as it goes, from time, so the number of
    # samples depends on TCG's speed; N_FREQ makes about 2,000 of them
    # (sigma of a share about 0.9 points).
    ("freq", 3.0)])
@on(*X86)
def test_function_shares_match_valgrind(guest, section, tolerance):
    ref = callgrind_shares([str(PROGRAMS / "hotcold"), str(N_HOTCOLD)])
    got = report_shares(guest[section])
    for fn in ("hot", "cold"):
        assert abs(got.get(fn, 0.0) - ref[fn]) <= tolerance, (fn, got, ref)


@on(*X86)
def test_frequency_mode_periods_reach_the_host(guest):
    """perf's period adjustments (-F) reach the host: the samples carry
    many different periods, not just the initial one."""
    assert int(guest["freqperiods"][-1].strip()) >= 5, guest["freqperiods"]


@on(*X86)
def test_precise_samples_spread_evenly_over_the_loop(guest):
    syms = {n: a for a, n in symbols(str(PROGRAMS / "tight")).items()}
    lo, hi = syms["tight_loop"], syms["tight_end"]
    ips = [int(l.strip(), 16) for l in guest["precise"]
           if re.fullmatch(r"\s*[0-9a-f]+\s*", l)]
    inside = collections.Counter(ip for ip in ips if lo <= ip < hi)
    assert len(inside) == 5, inside          # add, xor, inc, dec, jnz
    total = sum(inside.values())
    # 100 M instructions / PRECISE_PERIOD: about 1,000, none throttled.
    assert total >= 0.95 * len(ips) and total > 900, (total, len(ips))
    for ip, n in inside.items():
        assert abs(100.0 * n / total - 20.0) <= 2.0, (hex(ip), inside)


@on(*X86)
def test_callchain_names_hot_callers(guest):
    text = "\n".join(guest["callchain"])
    # Each sample: frames "ip sym"; samples in hot() must show main_sp as
    # a caller.  The chain is walked from the registers at the NMI, which
    # the service raises before the overflowing vCPU goes on (synchronous
    # delivery), so it lands at the next TB boundary, in the same frame.
    blocks = [b for b in re.split(r"\n\s*\n", text) if b.strip()]
    hot = [b for b in blocks if re.search(r"^\s*[0-9a-f]+ hot\b", b, re.M)]
    assert hot, text[:2000]
    with_caller = [b for b in hot if re.search(r"\bmain_sp\b", b)]
    assert len(with_caller) >= 0.95 * len(hot), (len(with_caller),
                                                 len(hot), hot[:3])


@on(*X86)
def test_samples_on_the_pinned_cpu(guest):
    lines = guest["pinned"]
    cpu = int(next(l for l in lines if l.startswith("pinned to")).split()[-1])
    rows = [re.fullmatch(r"\s*(\d+)\s+\[(\d+)\]\s*", l) for l in lines]
    rows = [m.groups() for m in rows if m]
    assert rows and all(int(c) == cpu for _, c in rows), lines


@on(*X86)
def test_no_unknown_nmi(guest):
    assert guest["nmi"] == [], guest["nmi"]


@pytest.fixture(scope="module")
def hot_reference():
    """valgrind's per-instruction execution counts of one hot() call,
    with hot()'s address range and the addresses of its inner loop."""
    prog = str(PROGRAMS / "hotcold")
    lo, hi = function_range(prog, "hot")
    calls = 50
    counts = callgrind_instruction_counts([prog, str(calls)])
    per_call = {a: n / calls for a, n in counts.items() if lo <= a < hi}
    # The inner loop, from the counts alone: the instructions run 1600
    # times per call (hotcold.c), everything else in hot() once.
    loop = sorted(a for a, n in per_call.items() if n > 1)
    assert len(loop) == 3 and all(per_call[a] == 1600 for a in loop), per_call
    return lo, hi, per_call, loop


@on(*X86)
def test_annotate_matches_instruction_counts(guest, hot_reference):
    """perf annotate --stdio of hot() (precise samples at a prime period):
    the add/dec/jnz loop gets what valgrind's per-instruction counts
    predict (1600 of hot()'s ~4808 instructions per call each, 33.3%),
    within 2 points; the rest of hot() stays near its ~0.2%."""
    lo, hi, per_call, loop = hot_reference
    lines = guest["annotate"]
    throttled = [l for l in lines if l.startswith("throttled:")]
    assert throttled == ["throttled: 0"], lines[:20]
    samples, rows = annotate_lines(lines)
    # every instruction of hot() that ran is listed, at its address
    assert set(per_call) <= set(rows), (sorted(map(hex, per_call)),
                                         sorted(map(hex, rows)))
    assert all(lo <= a < hi for a in rows), sorted(map(hex, rows))
    assert [rows[a][1].split()[0] for a in loop] == ["add", "dec", "jne"], \
        [rows[a] for a in loop]
    total = sum(per_call.values())
    # precise counter-based samples: one per ANNOTATE_PERIOD instructions
    expected = N_ANNOTATE * total / ANNOTATE_PERIOD
    assert abs(samples - expected) <= 0.02 * expected, (samples, expected)
    for a in loop:
        want = 100.0 * per_call[a] / total
        assert abs(rows[a][0] - want) <= 2.0, (hex(a), rows[a], want, rows)
    others = sum(p for a, (p, _) in rows.items() if a not in loop)
    want_others = 100.0 * sum(n for a, n in per_call.items()
                              if a not in loop) / total
    assert others <= want_others + 1.0, (others, want_others, rows)
    assert abs(sum(p for p, _ in rows.values()) - 100.0) <= 0.5, rows


@pytest.fixture(scope="module")
def hotcold_shares():
    return callgrind_shares([str(PROGRAMS / "hotcold"), str(N_HOTCOLD)])


@on(*X86)
def test_top_shows_hot_first(guest, hotcold_shares):
    """perf top --stdio (system-wide, fixed prime period) while hotcold
    runs: hot is the top user symbol and hot/(hot+cold) matches valgrind's
    share within 2 points, over TOP_SAMPLES samples or more (3 binomial
    sigma).  perf top counts every process, so only the ratio of the two
    is compared, not hot's own percentage.  Runs with a decayed table
    and a fixed run time gave 80.02, 79.94, 79.89 on a quiet host and
    79.8 from 1,266 samples on a loaded one (valgrind 79.9)."""
    check_top(guest["top"], hotcold_shares, TOP_SAMPLES, TOP_TOLERANCE)


@on(*X86)
def test_top_frequency_mode(guest, hotcold_shares):
    """perf top in its default mode (frequency 4000 Hz, system-wide):
    samples keep arriving at the end (the last 3 refreshes), hot leads,
    and hot/(hot+cold) matches valgrind within 3 points over
    TOPFREQ_SAMPLES samples or more (3 binomial sigma; runs on a quiet
    host: 79.7 to 80.6 %)."""
    tables = check_top(guest["topfreq"], hotcold_shares, TOPFREQ_SAMPLES,
                       TOPFREQ_TOLERANCE)
    rates = [irqs for irqs, _rows in tables]
    assert len(rates) >= TOP_TABLES and all(r > 0 for r in rates[-3:]), \
        rates


@on(*X86)
def test_frequency_mode_periods_are_accepted(guest):
    """Every period the driver sends in frequency mode is accepted (dmesg
    after the record -F and both perf top runs).  Seen failing: about ten
    SET_PERIOD calls with periods of 9e18 to 1.1e19 (>= 2^63, refused by
    the host) within 10 ms of the events starting, after which perf top
    showed no samples for 5 s to more than 10 s."""
    assert guest["periodfail"] == [], guest["periodfail"]
