"""The profile session file and the outputs rendered from it.

``session.json`` (version SESSION_VERSION) holds everything a report
needs: meta (the preamble's figures), the resolved samples, the guest
processes, the hottest guest code bytes and the translations' perf-map
names.  ``pvperf profile`` records and resolves once and writes it;
``pvperf report DIR`` reads it back and renders every output again
(record once, render many):

  report.txt        the text report (report.text_report)
  summary.json      samples_total, samples_code_cache,
                    samples_code_cache_resolved, top [{symbol, space, share}]
  stacks.folded     folded stacks (format: report.py)
  flamegraph.svg    flame graph of the folded stacks
  flamegraph.html   the interactive flame graph (flamegraph_html.py)
  perf-PID.map      the reverse map as a perf map of QEMU's code cache
  perf-report.txt   the host's own `perf report` using that map (when
                    perf.data is in the directory)
  annotate.txt      capstone listings of the hottest guest and host code
"""
from __future__ import annotations

import json
from pathlib import Path

from ..errors import PvperfError
from . import flamegraph_html, hostperf, report

SESSION_VERSION = 2
SESSION_FILE = "session.json"
PERF_DATA = "perf.data"


def write_session(session: dict, outdir: Path) -> Path:
    path = outdir / SESSION_FILE
    path.write_text(json.dumps(session))
    return path


def load_session(outdir: Path) -> dict:
    """The session in ``outdir``; PvperfError naming what is wrong."""
    path = Path(outdir) / SESSION_FILE
    try:
        session = json.loads(path.read_text())
    except OSError as e:
        raise PvperfError("reading the profile session", str(e),
                          "pass a directory `pvperf profile --output` "
                          "wrote", exc=e) from e
    except ValueError as e:
        raise PvperfError("reading the profile session",
                          f"{path} is not JSON: {e}", "re-record it",
                          exc=e) from e
    if not isinstance(session, dict) or \
            session.get("version") != SESSION_VERSION:
        version = session.get("version") if isinstance(session, dict) \
            else None
        raise PvperfError("reading the profile session",
                          f"version {version} in {path}",
                          f"re-record with this pvperf (session v"
                          f"{SESSION_VERSION})")
    return session


def render_all(session: dict, outdir: Path, table_sort: str = "host"
               ) -> str:
    """Write every output into ``outdir``; returns the text report
    (its translation table sorted by ``table_sort``: bt_table.SORT_KEYS)."""
    text = report.text_report(session, table_sort=table_sort)
    (outdir / "report.txt").write_text(text + "\n")
    (outdir / "summary.json").write_text(report.summary_json(session))
    (outdir / "stacks.folded").write_text(report.folded(session))
    (outdir / "flamegraph.svg").write_text(report.flamegraph_svg(session))
    (outdir / "flamegraph.html").write_text(
        flamegraph_html.flamegraph_html(session))
    pid = session["meta"]["qemu_pid"]
    perf_map = report.perf_map(session)
    (outdir / f"perf-{pid}.map").write_text(perf_map)
    (outdir / "annotate.txt").write_text(
        report.annotate_guest(session) + "\n" + report.annotate_host(session))
    if (outdir / PERF_DATA).exists():
        (outdir / "perf-report.txt").write_text(
            hostperf.perf_report(outdir / PERF_DATA, pid, perf_map))
    return text
