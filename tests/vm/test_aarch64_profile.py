"""pvperf profile of arm64 guests: the x86 host's code cache resolved to
arm64 guest functions, kernel and user, per process.

References, none of them pvperf's:

* hotcold (tests/guest_programs/aarch64/hotcold.c): hot() and cold() are
  written in assembly with the same loop shape, so their instruction
  counts are known by construction (4802 and 1202 a call, read off
  `aarch64-linux-gnu-objdump -d`: mov, 3 x 1600 or 3 x 400, ret) and the
  host time QEMU spends in them is in that ratio: hot/(hot+cold) of the
  code-cache samples within 3 points of 4802/6004; the functions' address
  ranges come from `aarch64-linux-gnu-nm`.
* rand (aarch64/rand.c), dynamically linked: two processes of it (two
  symlinks, two comms) map the guest's libc.so.6 at two ASLR addresses
  and spend their time in libc's random_r, N calls each on the same
  path: random_r is one row, not one per address; each process's
  samples lie in its own libc mapping; the bigger process's share of
  them is its share of the calls (3:1) within 3 points (or 3 standard
  deviations of a share of that many samples); at most 1 % of the
  code-cache samples are [unknown]: not resolved to a translation, or in
  no known process, or (in the two processes) in no named function; the
  PLT stubs are named NAME@plt as objdump names them.  At smp 1 and 2
  (MTTCG: one host thread per vCPU, each with its own timeline).
  (pvperf's own wrapper runs busybox, which Debian strips: its samples
  resolve to addresses in busybox, not to names.)
"""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
from collections import Counter

import pytest

from support import PROGRAMS, run_pvperf

pytestmark = pytest.mark.vm

ARCH = ["--arch", "aarch64"]
HOT_INSNS, COLD_INSNS = 1 + 3 * 1600 + 1, 1 + 3 * 400 + 1
BIG, SMALL = 15_000_000, 5_000_000


@pytest.fixture(scope="module")
def share(tmp_path_factory):
    if shutil.which("aarch64-linux-gnu-gcc") is None:
        pytest.skip("no cross compiler (apt-get install "
                    "gcc-aarch64-linux-gnu libc6-dev-arm64-cross)")
    subprocess.run(["make", "-s", "-C", str(PROGRAMS), "aarch64"],
                   check=True)
    d = tmp_path_factory.mktemp("aarch64-profile")
    for name in ("hotcold", "rand"):
        shutil.copy(PROGRAMS / "aarch64" / name, d / name)
    for alias in ("big", "small"):
        os.symlink("rand", d / alias)
    return d


def profile(share, out, *args, timeout=600) -> tuple[dict, dict]:
    r = run_pvperf(["profile", *ARCH, "--output", str(out), "--share",
                    str(share), *args], timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]
    assert not list(share.glob(".pvperf-profile-*"))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["meta"]["arch"] == "aarch64"
    assert "qemu-system-aarch64" in summary["meta"]["target"]
    assert summary["samples_code_cache"] > 500, summary["meta"]
    return summary, json.loads((out / "session.json").read_text())


def nm_ranges(prog) -> dict[str, tuple[int, int]]:
    """Function name -> [start, end) from the cross binutils' nm."""
    out = subprocess.run(["aarch64-linux-gnu-nm", "-S", str(prog)],
                         capture_output=True, text=True, check=True).stdout
    return {p[3]: (int(p[0], 16), int(p[0], 16) + int(p[1], 16))
            for p in (line.split() for line in out.splitlines())
            if len(p) == 4 and p[2] in "tT"}


def test_hotcold_matches_the_analytic_split(share, tmp_path):
    reference = HOT_INSNS / (HOT_INSNS + COLD_INSNS)
    out = tmp_path / "prof"
    summary, session = profile(share, out, "--", "./hotcold", "150000")
    rate = summary["samples_code_cache_resolved"] / \
        summary["samples_code_cache"]
    assert rate >= 0.95, rate
    rows = {row["symbol"]: row["samples"] for row in summary["guest_only"]}
    share_hot = rows["hot"] / (rows["hot"] + rows["cold"])
    assert abs(share_hot - reference) <= 0.03, (share_hot, reference)
    # every sample named hot or cold ran code inside that function
    ranges = nm_ranges(share / "hotcold")
    for s in session["samples"]:
        if s.get("resolved") and s["symbol"] in ("hot", "cold"):
            lo, hi = ranges[s["symbol"]]
            assert lo <= s["guestpc"] < hi, (s["symbol"], hex(s["guestpc"]))
    # the address-space timeline named the program's process
    procs = {row["comm"]: row["samples"] for row in summary["processes"]}
    assert procs.get("hotcold", 0) > 0.9 * (rows["hot"] + rows["cold"])
    # the guest kernel resolves too (System.map of the nokaslr boot)
    kernel = [s for s in session["samples"] if s.get("resolved")
              and s["space"] == "guest-kernel"]
    assert kernel and all(not s["symbol"].startswith("[guest kernel")
                          for s in kernel)
    # the guest listing is arm64 code, and `pvperf report` renders the
    # session again the same (it reads the guest's architecture from it)
    recorded = {f: (out / f).read_text() for f in ("report.txt",
                                                   "annotate.txt")}
    assert "subs" in recorded["annotate.txt"]
    for f in recorded:
        (out / f).unlink()
    r = run_pvperf(["report", str(out)])
    assert r.returncode == 0, r.stderr[-3000:]
    assert {f: (out / f).read_text() for f in recorded} == recorded
    print(f"aarch64 hotcold: {100 * rate:.1f}% of code-cache samples "
          f"resolved, hot/(hot+cold) {100 * share_hot:.1f}% (analytic "
          f"{100 * reference:.2f}%), {len(kernel)} guest-kernel samples")


def libc_mapping(session: dict, pid: int) -> tuple[int, int]:
    """Process ``pid``'s executable libc.so.6 mapping."""
    spans = [(lo, hi) for lo, hi, _, path in
             session["processes"][str(pid)]["maps"]
             if path.endswith("/libc.so.6")]
    assert len(spans) == 1, session["processes"][str(pid)]
    return spans[0]


@pytest.mark.parametrize("smp", ["1", "2"])
def test_two_processes_sharing_libc(share, tmp_path, smp):
    reference_big = BIG / (BIG + SMALL)
    out = tmp_path / "prof"
    summary, session = profile(share, out, "--smp", smp, "--", "sh", "-c",
                               f"./big {BIG} & ./small {SMALL} & wait")
    cc = summary["samples_code_cache"]
    unresolved = cc - summary["samples_code_cache_resolved"]
    unnamed = sum(1 for s in session["samples"] if s.get("resolved")
                  and s["space"] == "guest-user" and (
                      s["pid"] is None or s["comm"] in ("big", "small")
                      and s["symbol"].startswith("[guest")))
    assert unresolved + unnamed <= 0.01 * cc, (unresolved, unnamed, cc)
    rows = [row for row in summary["guest_only"]
            if row["symbol"] == "random_r"]
    assert len(rows) == 1, summary["guest_only"]
    user = [s for s in session["samples"] if s.get("resolved")
            and s["symbol"] == "random_r"]
    assert rows[0]["samples"] == len(user)
    per = Counter(s["comm"] for s in user)
    assert set(per) == {"big", "small"}, per
    pids = {s["comm"]: s["pid"] for s in user}
    spans = {comm: libc_mapping(session, pid) for comm, pid in pids.items()}
    assert spans["big"] != spans["small"]          # ASLR: two addresses
    for s in user:
        lo, hi = spans[s["comm"]]
        assert lo <= s["guestpc"] < hi, (s["comm"], hex(s["guestpc"]))
    n = len(user)
    share_big = per["big"] / n
    tol = max(0.03, 3 * math.sqrt(reference_big * (1 - reference_big) / n))
    assert abs(share_big - reference_big) <= tol, (share_big, n)
    # the PLT stubs the calls go through are named as objdump names them
    stubs = Counter(s["symbol"] for s in session["samples"]
                    if s.get("resolved") and s["comm"] in ("big", "small")
                    and s["dso"].endswith("/rand"))
    assert "random_r@plt" in stubs and "_init" not in stubs, stubs
    placements = Counter(s["placement"] for s in user)
    print(f"aarch64 rand x2, smp {smp}: random_r {n} samples, big "
          f"{100 * share_big:.1f}% (calls {100 * reference_big:.0f}%), "
          f"{unresolved + unnamed} of {cc} code-cache samples unnamed, "
          f"placements {dict(placements)}")
