"""perf's own test suite as a gate: `perf test` in the guest with pvperf
and without (--no-pmu), against tests/vm/perf_test_expected.tsv.

The reference is perf's own verdicts, not pvperf's output.  The gate
fails when a test that passes without pvperf fails with it, when one the
file records as passing with pvperf does not, or when a test fails that
the file does not list as failing (with its reason).  Tests marked
`racy` (perf test 24: docs/design/perf-test.md) gate nothing.  A test that
fails is run once more in the same guest: one that passes then is
reported as flaky (a warning), not as failed.

Opt-in (both runs take ~3.5 minutes on 2 cores):
    PVPERF_SLOW=1 .venv/bin/python -m pytest tests/vm/test_perf_test_gate.py
The table of docs/design/perf-test.md comes from the same runs:
    .venv/bin/python tests/vm/test_perf_test_gate.py > /tmp/table.md
"""
from __future__ import annotations

import re
import sys
import tempfile
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support import run_pvperf  # noqa: E402

pytestmark = [pytest.mark.vm, pytest.mark.slow]

EXPECTED = Path(__file__).with_name("perf_test_expected.tsv")
# " 26: Object code reading     : Ok" and " 6.3: ... : Skip (permissions)";
# group headers (" 6: Parse event definition strings :") carry no verdict.
VERDICT = re.compile(r"^\s*(\d+(?:\.\d+)?):\s(.*?)\s*:\s*"
                     r"(Ok|FAILED!|Skip(?: \(.*\))?)\s*$", re.M)


def verdicts(output: str) -> dict[str, str]:
    """perf test's output -> {test id: Ok | FAILED | Skip}."""
    return {tid: "FAILED" if v.startswith("FAILED") else v.split()[0]
            for tid, _, v in VERDICT.findall(output)}


def expected() -> dict[str, tuple[str, str, str]]:
    """{test id: (with pvperf, without, name -- reason)}."""
    rows = {}
    for line in EXPECTED.read_text().splitlines():
        if line and not line.startswith("#"):
            tid, with_pv, without, text = line.split("\t", 3)
            rows[tid] = (with_pv, without, text)
    return rows


# perf test, then each failed test again (by its top-level number:
# `perf test 6` runs 6.1 to 6.4).
GUEST_SCRIPT = r"""
perf test > /tmp/pt.txt 2>&1; cat /tmp/pt.txt
for id in $(sed -n 's/^ *\([0-9.]*\): .*: FAILED!$/\1/p' /tmp/pt.txt); do
    echo "=== retry $id"; perf test "${id%%.*}" 2>&1
done
"""


def perf_test(no_pmu: bool) -> str:
    """One run, in an empty share: perf test 17 looks for its attr
    scripts in ./tests of its working directory, and a share holding
    pvperf's own tests/ made it run them and fail."""
    with tempfile.TemporaryDirectory(prefix="perf-test-share-") as share:
        return _perf_test(no_pmu, share)


def _perf_test(no_pmu: bool, share: str) -> str:
    args = ["run", "--timeout", "1200", "--share", share] + \
        (["--no-pmu"] if no_pmu else [])
    r = run_pvperf(args + ["--", "sh", "-c", GUEST_SCRIPT], timeout=1300)
    assert r.returncode in (0, 1), r.stdout[-2000:] + r.stderr[-2000:]
    return r.stdout


def retried(output: str) -> dict[str, tuple[str, str]]:
    """{test id: (its verdict on the retry, the retry's output)}."""
    out = {}
    for part in output.split("=== retry ")[1:]:
        tid, _, text = part.partition("\n")
        out[tid] = (verdicts(text).get(tid, "FAILED"), text)
    return out


def settle(output: str) -> dict[str, str]:
    """The run's verdicts, a failure that passed on its retry as flaky
    (warned)."""
    first = verdicts(output.split("=== retry ")[0])
    for tid, (again, text) in retried(output).items():
        if first.get(tid) == "FAILED" and again != "FAILED":
            warnings.warn(f"perf test {tid} flaky: FAILED, then {again}")
            first[tid] = again
    return first


@pytest.fixture(scope="module")
def runs() -> dict[str, dict[str, str]]:
    with ThreadPoolExecutor(2) as pool:
        with_pv, without = pool.map(perf_test, (False, True))
    return {"with": settle(with_pv), "without": settle(without),
            "output": {"with": with_pv, "without": without}}


def test_every_test_ran_both_ways(runs):
    assert set(runs["with"]) == set(expected()), runs["with"]
    assert set(runs["without"]) == set(expected()), runs["without"]


def test_nothing_that_passes_without_pvperf_fails_with_it(runs):
    racy = {t for t, (w, _, _) in expected().items() if w == "racy"}
    broken = [t for t, v in runs["without"].items()
              if v == "Ok" and runs["with"].get(t) != "Ok" and t not in racy]
    assert not broken, broken


def test_what_passed_with_pvperf_still_passes(runs):
    lost = [(t, text) for t, (w, _, text) in expected().items()
            if w == "Ok" and runs["with"].get(t) != "Ok"]
    assert not lost, lost


def test_every_failure_is_known(runs):
    rows = expected()
    for which, col in (("with", 0), ("without", 1)):
        new = [t for t, v in runs[which].items() if v == "FAILED"
               and rows.get(t, ("",) * 3)[col] not in ("FAILED", "racy")]
        assert not new, (which, new, runs["output"][which][-4000:])


def markdown(runs: dict[str, dict[str, str]]) -> str:
    """The docs' table: every test whose verdicts differ, or fail."""
    lines = ["| test | pvperf | --no-pmu | why |", "|---|---|---|---|"]
    for tid, (_, _, text) in expected().items():
        w, wo = runs["with"].get(tid, "-"), runs["without"].get(tid, "-")
        if w != wo or "FAILED" in (w, wo):
            name, _, why = text.partition(" -- ")
            lines.append(f"| {tid} {name} | {w} | {wo} | {why} |")
    counts = {k: {v: list(runs[k].values()).count(v)
                  for v in ("Ok", "FAILED", "Skip")}
              for k in ("with", "without")}
    lines.append("")
    for k, c in counts.items():
        lines.append(f"{k} pvperf: {c['Ok']} Ok, {c['FAILED']} FAILED, "
                     f"{c['Skip']} Skip")
    return "\n".join(lines)


if __name__ == "__main__":
    with ThreadPoolExecutor(2) as pool:
        a, b = pool.map(perf_test, (False, True))
    print(markdown({"with": settle(a), "without": settle(b)}))
