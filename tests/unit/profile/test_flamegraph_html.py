"""flamegraph_html: the frame tree and the page, without a browser (the
browser's side: test_flamegraph_browser.py)."""
from __future__ import annotations

import json
from collections import Counter
from html.parser import HTMLParser

from pyhost.profile import flamegraph_html, report

import sessions


def flatten(node, path=()):
    path = path + ((node["n"], node["s"]),)
    yield path, node
    for child in node["c"]:
        yield from flatten(child, path)


def test_tree_widths_are_the_samples_under_each_stack():
    s = sessions.hotcold()
    root = flamegraph_html.tree(s["samples"])
    expected = sessions.prefix_counts(sessions.expected_stacks(s["samples"]))
    got = {path[1:]: node["v"] for path, node in flatten(root)
           if len(path) > 1}
    assert got == dict(expected)
    assert root["v"] == len(s["samples"])


def test_translated_code_is_the_guest_function_with_its_helpers_above():
    root = flamegraph_html.tree(sessions.hotcold()["samples"])
    names = {path[1:]: node for path, node in flatten(root)}
    tcg = ("CPU 0/TCG", "emulator")
    hot = names[(tcg, ("hot", "guest-user"))]
    # hot's own code (800) plus the lookups (90) and TLB fills (60) done
    # for it; no [code cache] frame: unresolved code-cache samples are
    # named as the report names them.
    assert hot["v"] == 800 + 90 + 60
    assert {(c["n"], c["s"]) for c in hot["c"]} == {
        ("helper_lookup_tb_ptr", "emulator"), ("helper_ldul_mmu", "emulator")}
    assert not [p for p in names if p and p[-1][0] == "[code cache]"]
    assert names[(tcg, ("[code cache, unresolved]", "emulator"))]["v"] == 5
    poll = [p for p in names if p and p[-1][0] == "do_sys_poll"]
    assert poll and poll[0][-1][1] == "host-kernel"


def self_samples(root) -> Counter:
    out = Counter()
    for _, node in flatten(root):
        out[(node["s"], node["n"])] += node["v"] - sum(c["v"]
                                                      for c in node["c"])
    return out


def test_totals_equal_the_text_reports():
    s = sessions.hotcold()
    text = report.text_report(s, n=100)
    root = flamegraph_html.tree(s["samples"])
    assert f"# Samples: {root['v']} " in text
    selfs = self_samples(root)
    top = sessions.report_rows(text, "Top functions")
    for (space, symbol), n in top.items():
        key = ("host-kernel", symbol.split("] ", 1)[1]) \
            if symbol.startswith("[host kernel] ") else (space, symbol)
        assert selfs[key] == n, (space, symbol)
    # A guest frame's width is the domain-switch view's row for it.
    totals = Counter()
    for path, node in flatten(root):
        if node["s"].startswith("guest-"):
            totals[(node["s"], node["n"])] += node["v"]
    behalf = sessions.report_rows(text, "Guest code + emulator work")
    for key, n in totals.items():
        assert behalf[key] == n, key


class Resources(HTMLParser):
    """Every URL the page would fetch, and its script blocks."""
    def __init__(self):
        super().__init__()
        self.urls, self.scripts = [], 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.scripts += tag == "script"
        for attr in ("src", "href"):
            if a.get(attr):
                self.urls.append(a[attr])
        if tag == "link":
            self.urls.append(a.get("href", "link"))


def test_page_is_self_contained():
    page = flamegraph_html.flamegraph_html(sessions.hotcold())
    p = Resources()
    p.feed(page)
    assert p.urls == [] and p.scripts == 2
    assert "http://" not in page and "https://" not in page
    assert "@import" not in page and "url(" not in page


def test_names_cannot_end_the_data_block():
    s = sessions.session(sessions.guest("guest-user", "</script><b>x", 3))
    page = flamegraph_html.flamegraph_html(s)
    data = page.split('<script id="data" type="application/json">', 1)[1]
    data = data.split("</script>", 1)[0]
    root = json.loads(data)["root"]
    assert root["c"][0]["c"][0]["n"] == "</script><b>x"
