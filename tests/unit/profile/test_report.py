"""pyhost.report renderers: golden structure, not golden numbers."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from pyhost.profile import report


def session():
    def s(space, symbol, cc, behalf=None, stack=("[code cache]",)):
        return {"space": space, "symbol": symbol, "code_cache": cc,
                "resolved": cc, "behalf": behalf, "thread": "qemu",
                "host_stack": list(stack), "dso": "x", "tid": 1}
    samples = [s("guest-user", "hot", True)] * 8 + \
        [s("guest-user", "cold", True)] * 2 + \
        [s("emulator", "helper_x", False,
           {"space": "guest-user", "symbol": "hot"},
           ("main", "[code cache]", "helper_x"))] * 3 + \
        [s("emulator", "main_loop_wait", False, None, ("main",))]
    return {"version": 1, "meta": {
        "event": "cpu-clock", "frequency_hz": 4000, "duration_s": 1.0,
        "samples": len(samples), "lost_samples": 0, "vcpus": 1,
        "target": "qemu-system-x86_64 pid 1", "command": "./x",
        "exit_status": 0, "qemu_pid": 1, "rmap_translations": 2,
        "rmap_generations": [0]},
        "samples": samples, "hot_guest_code": [{
            "space": "guest-user", "symbol": "hot", "samples": 8,
            "blocks": [{"guestpc": 0x401000, "code": "4883c001c3",
                        "samples": 8}]}],
        "translations": [[0x1000, 0x40, "guest-user:hot"]]}


def test_text_report_preamble_before_rows():
    text = report.text_report(session())
    lines = text.splitlines()
    first_row = next(i for i, l in enumerate(lines) if "guest-user" in l
                     and "%" in l and not l.startswith("#"))
    preamble = "\n".join(lines[:first_row])
    for word in ("Samples:", "Lost samples:", "Duration:", "vCPUs:",
                 "Target:", "cpu-clock"):
        assert word in preamble


def test_summary_fields_and_views():
    s = report.summary(session())
    assert s["samples_total"] == 14 and s["samples_code_cache"] == 10
    assert s["samples_code_cache_resolved"] == 10
    assert {"symbol", "space", "share"} <= set(s["top"][0])
    assert all(r["space"] in report.SPACES for r in s["top"])
    assert abs(sum(r["share"] for r in s["top"]) - 100) < 0.1
    behalf = {r["symbol"]: r["samples"] for r in s["guest_plus_emulator"]}
    assert behalf["hot"] == 11
    json.dumps(s)


def test_folded_lines_parse():
    for line in report.folded(session()).splitlines():
        stack, _, count = line.rpartition(" ")
        assert int(count) > 0 and stack.startswith("qemu;")
    assert "qemu;[code cache];guest-user:hot 8" in report.folded(session())


def test_flamegraph_is_svg():
    root = ET.fromstring(report.flamegraph_svg(session()))
    assert root.tag.endswith("svg")
    assert len(root.findall(".//{http://www.w3.org/2000/svg}rect")) >= 4


def test_perf_map_and_annotation():
    assert report.perf_map(session()) == "1000 40 guest-user:hot\n"
    ann = report.annotate_guest(session())
    assert "add" in ann and "ret" in ann
