"""perf script's callchains as pvperf reads them (pyhost/profile/
hostperf.py), on perf 6.1's own output: a sample of a QEMU built with
symbols (scripts/build-qemu.sh), where perf names what the compiler
inlined as frames of their own."""
from __future__ import annotations

from pyhost.profile.hostperf import parse_lost, parse_perf_script

QEMU = "/q/build/qemu-system-aarch64"
# `perf script -F comm,tid,time,ip,sym,dso` of `pvperf profile --qemu`'s
# perf.data (2026-11-29), the binary's path shortened: an inlined function
# is printed at its caller's ip with "(inlined)" for the dso, before the
# frame of the function (of the ELF symbol table) it was inlined into.
PERF_SCRIPT = f"""\
CPU 0/TCG 17222 25565.176360: 
\t          c8c78e seqlock_read_begin (inlined)
\t          c8c78e qht_lookup_custom ({QEMU})
\t          a8f137 tb_htable_lookup ({QEMU})
\t          a902a0 tb_lookup (inlined)
\t          a902a0 helper_lookup_tb_ptr ({QEMU})
\t    7f9460e6651e [unknown] (/tmp/perf-17219.map)

CPU 0/TCG 17222 25565.176609: 
\t          c8c78e seqlock_read_begin (inlined)
\t          c8c78e qht_lookup_custom+0x4e ({QEMU})
"""


def test_inlined_frames_are_left_to_the_function_they_are_in():
    first, second = parse_perf_script(PERF_SCRIPT)
    assert (first.comm, first.tid) == ("CPU 0/TCG", 17222)
    assert [(f.ip, f.sym, f.dso) for f in first.frames] == [
        (0xc8c78e, "qht_lookup_custom", QEMU),
        (0xa8f137, "tb_htable_lookup", QEMU),
        (0xa902a0, "helper_lookup_tb_ptr", QEMU),
        (0x7f9460e6651e, "[unknown]", "/tmp/perf-17219.map")]
    assert [(f.sym, f.dso) for f in second.frames] == [
        ("qht_lookup_custom", QEMU)]


# `perf report --stats` of a `pvperf profile` at smp 2 (2026-11-29): its
# perf.data held ten PERF_RECORD_LOST records (lost 263, 95, 1, 4, 5, 22,
# 2, 2, 41, 383: `perf report -D`), 818 samples, and perf record's four
# closing LOST_SAMPLES records, one per event and buffer.
STATS = """
Aggregated stats:
           TOTAL events:       9864
            LOST events:         10  ( 0.1%)
          SAMPLE events:       9408  (95.4%)
    LOST_SAMPLES events:          4  ( 0.0%)
  FINISHED_ROUND events:         68  ( 0.7%)
cpu-clock stats:
          SAMPLE events:       9408
    LOST_SAMPLES events:        799
dummy:HG stats:
    LOST_SAMPLES events:         19
"""


def test_lost_samples_are_the_per_event_sums_not_the_record_count():
    assert parse_lost(STATS) == 263 + 95 + 1 + 4 + 5 + 22 + 2 + 2 + 41 + 383
    assert parse_lost(STATS.split("cpu-clock stats:")[0]) == 0
