"""Machine-readable results (``pvperf run/stat --json``) and the
regression gate (``pvperf compare``).

A result file is JSON, schema 1 (``SCHEMA``; a reader refuses others):

  schema          1
  events          [{"name", "value" (int, float, or null when perf said
                   <not supported>/<not counted>), "unit"}], in perf's order;
                   a name met again (two perf stat runs in one command)
                   gets "#2", "#3"...; with the events asked known
                   (`pvperf stat -e`), each is named as it was asked
                   (``names_as_asked``)
  command         the guest command line; exit_status its status
  deterministic   whether it ran with --deterministic
  model           the PMU models' options: pmu, I1, D1, LL (size,ways,line),
                  cachegrind_compat, timing, accounting (cpu, domain);
                  vm: smp, mem_mb
  qemu            the first line of the QEMU binary's `--version`
  image           name, kernel, id (the image's input hash), packages
  pvperf          revision (git commit, "+dirty" with local changes)
  created         UTC time the file was written (never compared)

The counts come from the guest's own `perf stat` output on its stderr,
in either of perf's formats: the table (`perf stat`) or CSV (`-x,`).

Comparing: an event regressed when NEW is above BASE by more than the
threshold (percent of BASE): every count pvperf's PMU gives (instructions,
branches, misses, loads...) is work done, so more is worse.  Events in
only one file are listed, not judged.  Exit status: 0 no regression,
1 a regression, 2 bad input.
"""
from __future__ import annotations

import datetime
import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .errors import PvperfError
from .paths import REPO_ROOT

SCHEMA = 1
NOT_COUNTED = ("<not supported>", "<not counted>")
_NUM = r"[\d][\d,]*(?:\.\d+)?"
# Table rows, e.g. "   120621627      instructions:u   # 1.00 insn per
# cycle" or "     120.63 msec task-clock    #  0.999 CPUs utilized".
TABLE_ROW = re.compile(rf"^\s*(?P<value>{_NUM}|<not supported>|<not counted>)"
                       r"\s+(?:(?P<unit>msec|usec|nsec|sec)\s+)?"
                       r"(?P<name>[^\s#]+)")
TABLE_START = re.compile(r"^\s*Performance counter stats for ")
TABLE_END = re.compile(r"seconds (time elapsed|user|sys)")
# CSV rows (-x,): value,unit,event,run time,percent[,metric...]
CSV_ROW = re.compile(r"^(?P<value>[\d.]+|<not supported>|<not counted>),"
                     r"(?P<unit>[^,]*),(?P<name>[^,\s]+),")


class ResultError(PvperfError):
    """A result file or the guest's perf stat output is unusable."""


@dataclass
class Event:
    name: str
    value: int | float | None
    unit: str = ""


def _number(text: str) -> int | float | None:
    if text in NOT_COUNTED:
        return None
    text = text.replace(",", "")
    return float(text) if "." in text else int(text)


def parse_perf_stat(text: str, asked: Sequence[str] = ()) -> list[Event]:
    """Events of every perf stat block in ``text`` (a command's stderr);
    ``asked``: the -e lists perf stat was given, if known."""
    events: list[Event] = []
    in_table = False
    for line in text.splitlines():
        if TABLE_START.match(line):
            in_table = True
            continue
        if in_table and TABLE_END.search(line):
            in_table = False
            continue
        m = (TABLE_ROW.match(line) if in_table else None) or \
            CSV_ROW.match(line)
        if m:
            events.append(Event(m.group("name"), _number(m.group("value")),
                                m.group("unit") or ""))
    return _unique(names_as_asked(events, asked))


def split_event_list(text: str) -> list[str]:
    """perf's -e list split at its top-level commas: a group
    ``{a,b}:u`` or a PMU event ``cpu/event=0xc0,umask=0/`` stays whole."""
    items, depth, in_pmu, start = [], 0, False, 0
    for i, ch in enumerate(text):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == "/":
            in_pmu = not in_pmu
        elif ch == "," and depth == 0 and not in_pmu:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return [item for item in items if item]


def names_as_asked(events: list[Event], asked: Sequence[str]) -> list[Event]:
    """Name each event as it was asked for.  perf 6.1 names a
    hardware-cache event by its type, op and result alone, so
    ``L1-dcache-loads:u`` prints as ``L1-dcache-loads``
    (tools/perf/util/parse-events.c: parse_events_add_cache()), on
    hardware as here; a table keyed by that name would lose the modifier.
    Only a one-to-one match is renamed: as many events as asked, each
    printed as asked or as asked without its modifier."""
    wanted = [name for text in asked for name in split_event_list(text)]
    if len(wanted) != len(events):
        return events
    for ev, name in zip(events, wanted):
        if ev.name == name.partition(":")[0] and "/" not in name:
            ev.name = name
    return events


def _unique(events: list[Event]) -> list[Event]:
    seen: dict[str, int] = {}
    for ev in events:
        seen[ev.name] = seen.get(ev.name, 0) + 1
        if seen[ev.name] > 1:
            ev.name = f"{ev.name}#{seen[ev.name]}"
    return events


# -- metadata ---------------------------------------------------------------

def _first_line(argv: list[str], cwd: Path | None = None) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, cwd=cwd,
                             timeout=30).stdout
    except OSError:
        return ""
    return out.splitlines()[0].strip() if out.strip() else ""


def pvperf_revision() -> str:
    """The checkout's git commit, "+dirty" if it has local changes."""
    rev = _first_line(["git", "rev-parse", "HEAD"], REPO_ROOT)
    if not rev:
        from . import __version__
        return __version__
    dirty = _first_line(["git", "status", "--porcelain", "--untracked-files"
                         "=no"], REPO_ROOT)
    return rev + ("+dirty" if dirty else "")


def image_meta(manifest: Path) -> dict:
    try:
        m = json.loads(manifest.read_text())
    except (OSError, ValueError):
        return {}
    return {"name": m.get("name"), "kernel": m.get("kernel_version"),
            "id": m.get("input_hash"), "packages": m.get("packages", {})}


def build_result(events: list[Event], *, command: str, exit_status: int,
                 deterministic: bool, model: dict, vm: dict, qemu: str,
                 image: dict) -> dict:
    return {
        "schema": SCHEMA,
        "events": [{"name": e.name, "value": e.value, "unit": e.unit}
                   for e in events],
        "command": command,
        "exit_status": exit_status,
        "deterministic": deterministic,
        "model": model,
        "vm": vm,
        "qemu": _first_line([qemu, "--version"]),
        "image": image,
        "pvperf": {"revision": pvperf_revision()},
        "created": datetime.datetime.now(datetime.timezone.utc)
        .strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def write_result(result: dict, path: Path) -> None:
    path.write_text(json.dumps(result, indent=1) + "\n")


def load_result(path: Path) -> dict:
    """A result file, checked enough to compare (ResultError otherwise)."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as e:
        raise ResultError(f"reading {path}", e.strerror or str(e),
                          "give a file that `pvperf stat --json` wrote")
    except ValueError as e:
        raise ResultError(f"reading {path}", f"not JSON ({e})",
                          "give a file that `pvperf stat --json` wrote")
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        got = data.get("schema") if isinstance(data, dict) else None
        raise ResultError(f"reading {path}", f"schema {got!r}, this pvperf "
                          f"reads schema {SCHEMA}",
                          "write it again with this pvperf")
    events = data.get("events")
    if not isinstance(events, list) or not all(
            isinstance(e, dict) and isinstance(e.get("name"), str) and
            (e.get("value") is None or isinstance(e.get("value"),
                                                  (int, float)))
            for e in events):
        raise ResultError(f"reading {path}", "malformed \"events\"",
                          "write it again with `pvperf stat --json`")
    return data


# -- comparing ---------------------------------------------------------------

def parse_threshold(text: str) -> float:
    """'0.5%' or '0.5' -> 0.5 (percent); ValueError if not >= 0."""
    value = float(text.strip().removesuffix("%"))
    if not value >= 0:
        raise ValueError(f"{text!r} is not a percentage >= 0")
    return value


@dataclass
class Row:
    name: str
    base: int | float | None
    new: int | float | None
    delta: float | None          # percent of base
    regressed: bool
    only_in: str = ""            # "base" or "new": the other lacks it


def compare(base: dict, new: dict, threshold: float) -> list[Row]:
    """One row per event of either file, base's order first."""
    b = {e["name"]: e["value"] for e in base["events"]}
    n = {e["name"]: e["value"] for e in new["events"]}
    rows = []
    for name in list(b) + [k for k in n if k not in b]:
        bv, nv = b.get(name), n.get(name)
        delta = None
        if bv is not None and nv is not None:
            delta = ((nv - bv) * 100.0 / bv if bv else
                     (0.0 if nv == bv else float("inf")))
        only = "" if name in b and name in n else \
            "base" if name in b else "new"
        rows.append(Row(name, bv, nv, delta,
                        delta is not None and delta > threshold, only))
    return rows


def notes(base: dict, new: dict) -> list[str]:
    """Differences in how the two were measured (shown, not judged)."""
    out = []
    for key in ("command", "deterministic", "model", "vm", "qemu"):
        if base.get(key) != new.get(key):
            out.append(f"{key} differs: {base.get(key)!r} -> "
                       f"{new.get(key)!r}")
    if (base.get("image") or {}).get("id") != (new.get("image") or {}).get(
            "id"):
        out.append("the guest images differ")
    for which, data in (("base", base), ("new", new)):
        if data.get("exit_status", 0) != 0:
            out.append(f"{which} command exited with {data['exit_status']}")
    return out


def _fmt(value) -> str:
    if value is None:
        return "-"
    return f"{value:,}" if isinstance(value, int) else f"{value:,.2f}"


def render(rows: list[Row], threshold: float) -> str:
    """A perf-diff-like table."""
    width = max([len(r.name) for r in rows] + [5])
    lines = [f"# threshold: +{threshold:g}% (an increase is a regression)",
             f"# {'Event':<{width}} {'Base':>16} {'New':>16} {'Delta':>9}"]
    for r in rows:
        if r.only_in:
            delta = f"(only in {r.only_in})"
        elif r.delta is None:
            delta = "n/a"
        else:
            delta = f"{r.delta:+.2f}%"
        mark = "  REGRESSION" if r.regressed else ""
        lines.append(f"  {r.name:<{width}} {_fmt(r.base):>16} "
                     f"{_fmt(r.new):>16} {delta:>9}{mark}")
    return "\n".join(lines)
