"""pvperf report --diff on synthetic sessions whose deltas are known by
construction."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from pyhost import cli
from pyhost.profile import diff, session as prof_session

import sessions


def function_lines(text: str) -> list[list[str]]:
    lines = text.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("# Functions"))
    return [l.split() for l in lines[start + 2:] if l.strip()]


def sides(a: dict, b: dict) -> tuple[diff.Side, diff.Side]:
    return diff.Side.of("A", a), diff.Side.of("B", b)


def test_a_function_made_twice_as_long_is_named_first():
    # hot doubles; everything else does the same work (same samples).
    a, b = sides(sessions.hotcold(hot=800), sessions.hotcold(hot=1600))
    rows = function_lines(diff.text_diff(a, b))
    assert rows[0][-2:] == ["guest-user", "hot"]
    assert float(rows[0][2]) == pytest.approx(1000 * 800 / 4000)
    # The others did not change: zero delta of host time.
    assert all(float(r[2]) == 0.0 for r in rows[1:])


def test_sampling_rates_are_normalized_to_host_time():
    # B sampled at twice A's rate, same host time: no change in ms.
    a, b = sides(sessions.hotcold(hot=800),
                 sessions.session(sessions.hotcold(hot=800)["samples"] * 2,
                                  hz=8000))
    assert all(r.delta_ms == pytest.approx(0.0)
               for r in diff.function_rows(a, b))
    root = diff.diff_tree(a, b)
    assert root["a"] == pytest.approx(root["v"]) and root["d"] == 0


def table(**insns) -> dict:
    """session.json's translation_table (bt_table.py), the fields the
    diff reads: hot in two processes, counted by the plugin."""
    rows = [{"space": "guest-user", "symbol": k, "pid": pid,
             "insns": v // 2} for k, v in insns.items() for pid in (7, 8)]
    return {"counted": True, "insns": sum(insns.values()), "rows": rows}


def test_per_guest_instruction_where_both_count_them():
    a = sessions.hotcold(hot=800)
    b = sessions.hotcold(hot=800)
    a["translation_table"] = table(hot=4_000_000, cold=1_000_000)
    # B runs hot's same instructions in half the host time per
    # instruction (a better translator): hot's ns/gi halves.
    b["translation_table"] = table(hot=8_000_000, cold=1_000_000)
    sa, sb = sides(a, b)
    text = diff.text_diff(sa, sb, how="per-insn")
    assert "5000000 guest instructions" in text
    first = function_lines(text)[0]
    assert first[-2:] == ["guest-user", "hot"]
    ms = 1000 * 800 / 4000
    assert float(first[5]) == pytest.approx(1e6 * ms / 4e6, abs=0.01)
    assert float(first[6]) == pytest.approx(1e6 * ms / 8e6, abs=0.01)
    # Only one profile counts them (the other ran without the plugin's
    # counts): no ns/gi, and the text says why.
    uncounted = sessions.hotcold(hot=800)
    uncounted["translation_table"] = dict(table(hot=1, cold=1),
                                          counted=False)
    text = diff.text_diff(*sides(a, uncounted))
    assert "no (a profile does not count" in text
    assert function_lines(text)[0][5] == "-"


def test_differential_tree_carries_both_profiles():
    a, b = sides(sessions.hotcold(hot=800, cold=200),
                 sessions.hotcold(hot=1600, cold=100))
    root = diff.diff_tree(a, b)
    tcg = next(c for c in root["c"] if c["n"] == "CPU 0/TCG")
    kids = {c["n"]: c for c in tcg["c"]}
    assert (kids["hot"]["a"], kids["hot"]["v"]) == (800 + 150, 1600 + 150)
    assert kids["hot"]["d"] == 800 and kids["cold"]["d"] == -100


def saved(tmp_path, name: str, s: dict):
    d = tmp_path / name
    d.mkdir()
    prof_session.write_session(s, d)
    return d


def test_cli_report_diff_writes_text_and_graph(tmp_path):
    a = saved(tmp_path, "a", sessions.hotcold(hot=800))
    b = saved(tmp_path, "b", sessions.hotcold(hot=1600))
    out = tmp_path / "out"
    r = CliRunner().invoke(cli.cli, ["report", "--diff", str(a), str(b),
                                     "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert function_lines(r.output)[0][-1] == "hot"
    assert (out / "diff.txt").read_text() in r.output
    page = (out / "diff-flamegraph.html").read_text()
    data = page.split('type="application/json">', 1)[1].split("</script>")[0]
    assert json.loads(data)["diff"] == [str(a), str(b)]


@pytest.mark.parametrize("args", [[], ["--diff", "A", "B", "A"]])
def test_cli_report_needs_one_directory_or_diff(tmp_path, args):
    a = saved(tmp_path, "a", sessions.hotcold())
    argv = ["report"] + [str(a) if x == "A" else str(a) if x == "B" else x
                         for x in args]
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == cli.EXIT_USAGE


def test_behalf_view_charges_the_emulators_work_to_the_guest_function():
    # hotcold(): 90 TB lookups and 60 TLB fills on hot's behalf, 30
    # lookups on clear_page_erms's: the domain switch's counts.
    s = sessions.hotcold(hot=800)
    s["translation_table"] = table(hot=4_000_000, cold=1_000_000)
    rows = {r.key: r for r in diff.function_rows(
        diff.Side.of("A", s, "behalf"), diff.Side.of("B", s, "behalf"))}
    assert rows[("guest-user", "hot")].a == 800 + 90 + 60
    assert rows[("guest-kernel", "clear_page_erms")].a == 50 + 30
    assert ("emulator", "helper_ldul_mmu") not in rows
    assert rows[("emulator", "main_loop_wait")].a == 40
    assert rows[("guest-user", "hot")].a_ns_insn == \
        pytest.approx(950 / 4000 * 1e9 / 4_000_000)
    self_rows = {r.key: r for r in diff.function_rows(
        diff.Side.of("A", s), diff.Side.of("B", s))}
    assert self_rows[("guest-user", "hot")].a == 800
    assert self_rows[("emulator", "x86_cpu_tlb_fill")].a == 60
