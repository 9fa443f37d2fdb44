"""The interactive flame graph in a real browser: headless Chromium
(Debian's chromium package) loads flamegraph.html and the test drives it
with real input events over the DevTools protocol (tests/browser.py),
then reads the DOM (and the page's network requests: none but its own
file): frames' widths against the samples under each stack
counted here from the session (sessions.expected_stacks), search
highlights and the matched share, zoom re-laying the frames, tooltips,
the totals against the text report, the differential graph's colours.
"""
from __future__ import annotations

import re

import pytest

from pyhost.profile import diff, flamegraph_html, report

import browser
import sessions

pytestmark = pytest.mark.skipif(
    browser.chromium() is None,
    reason="no chromium: apt-get install chromium (scripts/setup.sh "
    "--tier test installs it)")

WIDTH_JS = "document.getElementById('fg').getBoundingClientRect().width"


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    s = sessions.hotcold()
    path = tmp_path_factory.mktemp("fg") / "flamegraph.html"
    path.write_text(flamegraph_html.flamegraph_html(s))
    with browser.Browser(path) as b:
        yield b, s


@pytest.fixture
def fresh(page):
    b, s = page
    b.evaluate("document.getElementById('reset').click()")
    b.evaluate("(() => { const i = document.getElementById('search');"
               " i.value = ''; i.dispatchEvent(new Event('input')); })()")
    return b, s


def assert_laid_out(got: dict, top: tuple, width: float, x0: float,
                    expected: dict) -> None:
    """``top``'s subtree spans ``width`` px in proportion to the samples
    under each stack; frames outside it and its ancestors are hidden."""
    for p, f in got.items():
        inside = p[:len(top)] == top
        ancestor = top[:len(p)] == p
        if ancestor:
            assert f["shown"] and f["w"] == pytest.approx(width, abs=0.05)
        elif inside:
            want = width * expected[p] / expected[top] if top else \
                width * expected[p] / expected[()]
            if want >= 0.5:
                assert f["shown"], p
                assert f["w"] == pytest.approx(want, abs=0.05), p
        else:
            assert not f["shown"], p


def test_the_page_fetches_nothing(page):
    b, _ = page
    assert b.requests == [b.evaluate("location.href")]


def test_frames_are_as_wide_as_their_samples(fresh):
    b, s = fresh
    expected = sessions.prefix_counts(sessions.expected_stacks(s["samples"]))
    expected[()] = len(s["samples"])
    got = browser.frames(b)
    assert set(got) == set(expected)
    width = b.evaluate(WIDTH_JS)
    assert_laid_out(got, (), width, 0, expected)
    # Flame order: a child sits on its parent, one row (17 px) up.
    tcg = (("CPU 0/TCG", "emulator"),)
    hot = tcg + (("hot", "guest-user"),)
    assert got[tcg]["y"] - got[hot]["y"] == pytest.approx(17)


def test_search_highlights_the_matches_and_their_share(fresh):
    b, s = fresh
    b.type_into("#search", "helper_")
    got = browser.frames(b)
    assert {p for p, f in got.items() if f["match"]} == \
        {p for p in got if p and "helper_" in p[-1][0]}
    # Matched share: samples with a matching frame in their stack, once.
    stacks = sessions.expected_stacks(s["samples"])
    n = sum(c for st, c in stacks.items()
            if any("helper_" in name for name, _ in st))
    assert n == 90 + 60 + 30
    text = b.evaluate("document.getElementById('matched').textContent")
    assert f"Matched: {n} of {len(s['samples'])} samples " \
        f"({100 * n / len(s['samples']):.2f}%)" == text
    # A regular expression; a match inside a match counts once
    # (qht_lookup_custom above helper_lookup_tb_ptr).
    for pattern, names, n in (("^(hot|cold)$", {"hot", "cold"}, 950 + 200),
                              ("lookup", {"helper_lookup_tb_ptr",
                                          "qht_lookup_custom"}, 90 + 30)):
        b.evaluate("(() => { const i = document.getElementById('search');"
                   f" i.value = {pattern!r};"
                   " i.dispatchEvent(new Event('input')); })()")
        assert {p[-1][0] for p, f in browser.frames(b).items()
                if f["match"]} == names
        assert b.evaluate("+document.getElementById('matched')"
                          ".dataset.samples") == n


def test_click_zooms_and_relays_the_frames(fresh):
    b, s = fresh
    expected = sessions.prefix_counts(sessions.expected_stacks(s["samples"]))
    expected[()] = len(s["samples"])
    width = b.evaluate(WIDTH_JS)
    hot = (("CPU 0/TCG", "emulator"), ("hot", "guest-user"))
    before = browser.frames(b)
    f = before[hot]
    assert f["w"] < 0.8 * width
    b.click(f["x"] + f["w"] / 2, f["y"] + f["h"] / 2)
    after = browser.frames(b)
    assert_laid_out(after, hot, width, 0, expected)
    helper = hot + (("helper_lookup_tb_ptr", "emulator"),)
    assert after[helper]["w"] / before[helper]["w"] == \
        pytest.approx(expected[()] / expected[hot], rel=1e-3)
    assert not after[(hot[0], ("cold", "guest-user"))]["shown"]
    # Reset: the first layout again.
    b.evaluate("document.getElementById('reset').click()")
    assert_laid_out(browser.frames(b), (), width, 0, expected)


def test_tooltip_names_space_and_share(fresh):
    b, s = fresh
    f = browser.frames(b)[(("CPU 0/TCG", "emulator"), ("hot", "guest-user"))]
    b.mouse("mouseMoved", f["x"] + 5, f["y"] + 5)
    tip = b.evaluate("document.getElementById('tip').textContent")
    share = 100 * 950 / len(s["samples"])
    assert tip.splitlines() == ["hot", "space: guest user",
                                f"950 samples, {share:.2f}% of all"]
    g = browser.frames(b)[(("qemu-system-x86", "emulator"), ("main", "emulator"),
                   ("main_loop_wait", "emulator"),
                   ("do_sys_poll", "host-kernel"))]
    b.mouse("mouseMoved", g["x"] + g["w"] / 2, g["y"] + 5)
    tip = b.evaluate("document.getElementById('tip').textContent")
    assert "space: host kernel" in tip


def test_totals_equal_the_text_reports(fresh):
    b, s = fresh
    browser.assert_totals_match_report(browser.frames(b), report.text_report(s, n=1000))


def test_differential_graph_is_coloured_by_delta(tmp_path):
    a = diff.Side.of("A", sessions.hotcold(hot=800, cold=200))
    bb = diff.Side.of("B", sessions.hotcold(hot=1600, cold=100))
    path = tmp_path / "diff.html"
    path.write_text(flamegraph_html.diff_html(diff.diff_tree(a, bb),
                                              ("A", "B"), 4000))
    with browser.Browser(path) as b:
        got = browser.frames(b)
        tcg = (("CPU 0/TCG", "emulator"),)

        def rgb(p):
            return [int(x) for x in re.findall(r"\d+", got[p]["bg"])[:3]]
        r, _, bl = rgb(tcg + (("hot", "guest-user"),))
        assert r > bl + 60                     # grew: red
        r, _, bl = rgb(tcg + (("cold", "guest-user"),))
        assert bl > r + 20                     # shrank: blue
        f = got[tcg + (("hot", "guest-user"),)]
        b.mouse("mouseMoved", f["x"] + 5, f["y"] + 5)
        tip = b.evaluate("document.getElementById('tip').textContent")
        assert "delta: +800.0 samples (+200.0 ms)" in tip
