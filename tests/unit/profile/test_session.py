"""session.json: written once by `pvperf profile`, rendered again by
`pvperf report DIR` (record once, render many)."""
from __future__ import annotations

import json

from pyhost.cli import EXIT_FAILURE, EXIT_USAGE
from pyhost.profile import report, session

from support import run_pvperf
from test_report import session as sample_session


def saved(tmp_path) -> dict:
    s = sample_session()
    s["version"] = session.SESSION_VERSION
    session.write_session(s, tmp_path)
    return s


def test_report_rerenders_every_output(tmp_path):
    s = saved(tmp_path)
    r = run_pvperf(["report", str(tmp_path)])
    assert r.returncode == 0, r.stderr
    assert r.stdout == report.text_report(s) + "\n"
    assert (tmp_path / "report.txt").read_text() == r.stdout
    assert (tmp_path / "stacks.folded").read_text() == report.folded(s)
    assert json.loads((tmp_path / "summary.json").read_text()) == \
        json.loads(report.summary_json(s))
    assert (tmp_path / "perf-1.map").read_text() == report.perf_map(s)
    for name in ("flamegraph.svg", "flamegraph.html", "annotate.txt"):
        assert (tmp_path / name).stat().st_size > 0, name
    # No perf.data was kept: no host perf report either.
    assert not (tmp_path / "perf-report.txt").exists()


def test_load_session_roundtrip(tmp_path):
    s = saved(tmp_path)
    assert session.load_session(tmp_path) == json.loads(json.dumps(s))


def test_report_of_a_directory_without_a_session(tmp_path):
    r = run_pvperf(["report", str(tmp_path)])
    assert r.returncode == EXIT_FAILURE
    assert r.stderr.startswith("pvperf: reading the profile session: ")
    assert len(r.stderr.strip().splitlines()) == 1


def test_report_of_another_session_version(tmp_path):
    s = sample_session()
    s["version"] = session.SESSION_VERSION + 1
    session.write_session(s, tmp_path)
    r = run_pvperf(["report", str(tmp_path)])
    assert r.returncode == EXIT_FAILURE and "re-record" in r.stderr


def test_report_of_a_missing_directory_is_a_usage_error(tmp_path):
    r = run_pvperf(["report", str(tmp_path / "nope")])
    assert r.returncode == EXIT_USAGE and "does not exist" in r.stderr
