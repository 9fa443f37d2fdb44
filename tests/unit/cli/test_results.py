"""pyhost/results.py: perf stat output parsed in both of perf's formats,
result files checked, and the regression gate's verdicts and exit codes.
The perf stat texts are perf 6.1's own output from guest runs."""
from __future__ import annotations

import json

import pytest

from pyhost import results

from support import run_pvperf

TABLE = """
 Performance counter stats for './loop 1000000':

           2050784      instructions                                                       
           2000085      instructions:u                                                     
   <not supported>      cycles:k                                                           
              3.04 msec task-clock                       #    0.998 CPUs utilized          

       0.003041171 seconds time elapsed

       0.003235000 seconds user
       0.000000000 seconds sys
"""
CSV = """120621627,,instructions,120629282,100.00,,
120480075,,instructions:u,120629282,100.00,,
<not supported>,,cycles,0,100.00,,
"""


def test_table_format():
    evs = results.parse_perf_stat("program output 123 x\n" + TABLE)
    assert [(e.name, e.value, e.unit) for e in evs] == [
        ("instructions", 2050784, ""), ("instructions:u", 2000085, ""),
        ("cycles:k", None, ""), ("task-clock", 3.04, "msec")]


def test_csv_format_and_repeated_events():
    evs = results.parse_perf_stat(CSV + CSV)
    assert [(e.name, e.value) for e in evs] == [
        ("instructions", 120621627), ("instructions:u", 120480075),
        ("cycles", None), ("instructions#2", 120621627),
        ("instructions:u#2", 120480075), ("cycles#2", None)]


# perf 6.1 in the guest, `perf stat -x, -e
# L1-dcache-loads:u,cache-misses:u,dTLB-loads,branch-loads:k -- true`:
# the hardware-cache events are printed without their modifiers.
CSV_CACHE = """3457,,L1-dcache-loads,145939476,100.00,,
801,,cache-misses:u,6980465,100.00,,
3457,,dTLB-loads,6561883,100.00,,
3454,,branch-loads,79488848,100.00,,
"""
ASKED = ("L1-dcache-loads:u,cache-misses:u", "dTLB-loads", "branch-loads:k")


def test_events_named_as_asked():
    evs = results.parse_perf_stat(CSV_CACHE, ASKED)
    assert [(e.name, e.value) for e in evs] == [
        ("L1-dcache-loads:u", 3457), ("cache-misses:u", 801),
        ("dTLB-loads", 3457), ("branch-loads:k", 3454)]


def test_only_a_one_to_one_match_is_renamed():
    """Two perf stat runs, or a list that is not what perf printed: the
    names stay perf's."""
    evs = results.parse_perf_stat(CSV_CACHE + CSV_CACHE, ASKED)
    assert evs[0].name == "L1-dcache-loads" and \
        evs[4].name == "L1-dcache-loads#2"
    evs = results.parse_perf_stat(CSV_CACHE, ("LLC-loads:u,cache-misses:u,"
                                              "dTLB-loads,branch-loads:k",))
    assert evs[0].name == "L1-dcache-loads"


def test_repeated_asked_names_stay_apart():
    text = "10,,L1-dcache-loads,1,100.00,,\n7,,L1-dcache-loads,1,100.00,,\n"
    evs = results.parse_perf_stat(text, ("L1-dcache-loads,L1-dcache-loads:u",))
    assert [e.name for e in evs] == ["L1-dcache-loads", "L1-dcache-loads:u"]


def test_event_list_split_at_top_level_commas():
    assert results.split_event_list(
        "{instructions,L1-dcache-loads}:u,cpu/event=0xc0,umask=0/u,"
        "sched:sched_switch") == [
        "{instructions,L1-dcache-loads}:u", "cpu/event=0xc0,umask=0/u",
        "sched:sched_switch"]


def test_no_counts_in_plain_text():
    assert results.parse_perf_stat("hello\n12 apples\n") == []


def _result(tmp_path, name, **values):
    data = {"schema": 1, "command": "./loop", "exit_status": 0,
            "events": [{"name": k.replace("_", ":"), "value": v, "unit": ""}
                       for k, v in values.items()]}
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_compare_verdicts(tmp_path):
    base = results.load_result(_result(tmp_path, "b.json", instructions=1000,
                                       branches=100, misses=0))
    new = results.load_result(_result(tmp_path, "n.json", instructions=1004,
                                      branches=99, misses=1, extra=5))
    rows = {r.name: r for r in results.compare(base, new, 0.5)}
    assert rows["instructions"].delta == pytest.approx(0.4)
    assert not rows["instructions"].regressed          # within 0.5%
    assert not rows["branches"].regressed              # fewer is better
    assert rows["misses"].regressed                    # 0 -> 1: infinite
    assert rows["extra"].only_in == "new" and not rows["extra"].regressed
    assert [r.regressed for r in results.compare(base, new, 0)][:1] == [True]


def test_threshold_parsing():
    assert results.parse_threshold("0.5%") == 0.5
    assert results.parse_threshold("2") == 2.0
    for bad in ("-1%", "x", "nan"):
        with pytest.raises(ValueError):
            results.parse_threshold(bad)


def test_compare_cli_exit_codes(tmp_path):
    base = _result(tmp_path, "b.json", instructions=1000)
    same = _result(tmp_path, "s.json", instructions=1000)
    more = _result(tmp_path, "m.json", instructions=1010)
    r = run_pvperf(["compare", str(base), str(same)])
    assert r.returncode == 0, r.stderr
    assert "instructions" in r.stdout and "+0.00%" in r.stdout
    r = run_pvperf(["compare", "--threshold", "0.5%", str(base), str(more)])
    assert r.returncode == 1 and "REGRESSION" in r.stdout
    assert "+1.00%" in r.stdout
    assert run_pvperf(["compare", "--threshold", "2%", str(base),
                       str(more)]).returncode == 0
    bad = tmp_path / "bad.json"
    for content in ("not json", '{"schema": 2, "events": []}',
                    '{"schema": 1, "events": [{"name": 3}]}'):
        bad.write_text(content)
        r = run_pvperf(["compare", str(base), str(bad)])
        assert r.returncode == 2, r.stderr
        assert r.stderr.startswith("pvperf: compare: ")
        assert len(r.stderr.strip().splitlines()) == 1
    r = run_pvperf(["compare", str(base), str(tmp_path / "missing.json")])
    assert r.returncode == 2 and "No such file" in r.stderr
    r = run_pvperf(["compare", "--threshold", "lots", str(base), str(same)])
    assert r.returncode == 2 and "--threshold" in r.stderr
