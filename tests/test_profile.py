"""pvperf profile end to end: accuracy against independent references.

* resolution: >= 95% of the samples in QEMU's code cache map to a guest
  symbol through the reverse map;
* attribution: for tests/guest_programs/hotcold.c, hot/(hot+cold) of the
  host profile (guest-code-only view) is within 3 points of valgrind
  callgrind's per-function instruction ratio (functions placed by `nm`).

`./hotcold 300000` runs about 1.5 s under the reverse-map plugin (about
0.5 s for 100000 since its markers replaced an exec callback per TB), so
the > 1000 code-cache samples the checks rest on come with a margin.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from collections import Counter

import pytest

from conftest import PROGRAMS, REPO, run_pvperf

pytestmark = pytest.mark.vm

CFLAGS = ["-O2", "-static", "-nostdlib", "-fno-pic", "-no-pie",
          "-fno-stack-protector", "-fcf-protection=none",
          "-fno-asynchronous-unwind-tables", "-fno-omit-frame-pointer",
          "-Wall", "-Werror"]


@pytest.fixture(scope="module")
def hotcold(tmp_path_factory):
    d = tmp_path_factory.mktemp("share")
    subprocess.run(["gcc", *CFLAGS, "-o", str(d / "hotcold"),
                    str(PROGRAMS / "hotcold.c")], check=True)
    return d


def callgrind_self_ir(out_text: str) -> Counter:
    """Self Ir per function entry address from a callgrind.out file (the
    program has no debug info, so callgrind names functions by address):
    cost lines under each fn=, except the inclusive line after calls=."""
    names, ir, fn, skip = {}, Counter(), None, False
    for line in out_text.splitlines():
        if line.startswith("fn="):
            key, _, label = line[3:].partition(" ")
            if label:
                names[key] = label
            fn = names.get(key, key)
        elif line.startswith("cfn="):
            key, _, label = line[4:].partition(" ")
            if label:
                names[key] = label
        elif line.startswith("calls="):
            skip = True
        elif fn and line[:1] and (line[0].isdigit() or line[0] in "+-"):
            if skip:
                skip = False
                continue
            ir[fn] += int(line.split()[1])
    return ir


def callgrind_ratio(prog) -> float:
    """hot / (hot + cold) of valgrind callgrind's self Ir."""
    if shutil.which("valgrind") is None:
        pytest.skip("valgrind missing (apt-get install valgrind)")
    out = prog.parent / "cg.out"
    subprocess.run(["valgrind", "--tool=callgrind",
                    f"--callgrind-out-file={out}", str(prog), "200"],
                   check=True, capture_output=True)
    nm = subprocess.run(["nm", str(prog)], capture_output=True, text=True,
                        check=True).stdout
    addr = {parts[2]: int(parts[0], 16) for parts in
            (line.split() for line in nm.splitlines()) if len(parts) == 3}
    ir = {int(k, 16): v for k, v in
          callgrind_self_ir(out.read_text()).items() if k.startswith("0x")}
    hot, cold = ir.get(addr["hot"], 0), ir.get(addr["cold"], 0)
    assert hot and cold, ir
    return hot / (hot + cold)


def test_hotcold_profile_matches_valgrind(hotcold, tmp_path):
    reference = callgrind_ratio(hotcold / "hotcold")
    assert abs(reference - 0.8) < 0.01
    out = tmp_path / "prof"
    r = run_pvperf(["profile", "--output", str(out), "--share", str(hotcold),
                    "--", "./hotcold", "300000"], timeout=300)
    assert r.returncode == 0, r.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["samples_code_cache"] > 1000
    rate = (summary["samples_code_cache_resolved"] /
            summary["samples_code_cache"])
    assert rate >= 0.95, rate
    guest = {row["symbol"]: row["samples"] for row in summary["guest_only"]}
    share = guest["hot"] / (guest["hot"] + guest["cold"])
    assert abs(share - reference) <= 0.03, (share, reference)
    assert all(row["space"] in ("emulator", "guest-kernel", "guest-user")
               for row in summary["top"])
    pid = summary["meta"]["qemu_pid"]
    assert (out / f"perf-{pid}.map").exists()
    assert not (REPO / f"/tmp/perf-{pid}.map").exists()
    for name in ("stacks.folded", "flamegraph.svg", "session.json",
                 "report.txt", "annotate.txt"):
        assert (out / name).stat().st_size > 0
    assert not list(hotcold.glob(".pvperf-profile-*"))


def test_rmap_plugin_rejects_unknown_option(tmp_path):
    r = subprocess.run(["qemu-system-x86_64", "-display", "none",
                        "-plugin", str(REPO / "qemu_plugin" /
                                       "pvperf-rmap.so") + ",bogus=1"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "bogus" in r.stderr
