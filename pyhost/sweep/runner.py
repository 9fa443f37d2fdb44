"""Running a matrix's cells on Ray and collecting one table.

Each cell is one ``pvperf stat --json`` run (the CLI's own code path, in
a child process: its VM, its clean-up, its private run directory), in
``OUTPUT/cells/<name>-<id>/``, as a Ray task.  By default a local Ray
instance sized to ``--parallel`` (the machine's cores) is started for
the sweep and shut down after it, with its session files and object
store in a private run directory (not /tmp/ray, not /dev/shm), removed at
the end; ``--address`` uses an existing cluster instead (its nodes need
pvperf at the same path and OUTPUT on a shared file system).

State on disk, so that a re-run skips what is done:
  cell.json    written last and atomically (rename): the cell's settings,
               status "ok" or "failed", the error, the wall time, the
               Ray node that ran it.  A cell is finished when it says
               "ok" and its result.json loads.
  result.json  `pvperf stat --json`'s schema-1 record (pyhost/results.py)
  log.txt      the run's stdout and stderr
A failed cell is run again by the next sweep; a cell interrupted midway
has no cell.json and is run again too.  A cell whose Ray worker or node
dies under it is started again at once on a node still alive (at most
NODE_LOSS_RETRIES times): losing a node costs only its running cells.

The table, OUTPUT/results.csv and OUTPUT/results.parquet: one row per
cell and event (cell, id, workload, command, model, smp, qemu, arch, the
model's options, event, value, unit, status, error); a failed cell has
one row with its error and no event.
"""
from __future__ import annotations

import contextlib
import csv
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .. import results
from ..errors import PvperfError
from ..vm import channels
from .matrix import GEOMETRY_KEYS, Cell, Matrix


class SweepError(PvperfError):
    """A sweep that cannot start (the Ray package is missing)."""


try:
    import pyarrow as pa
    import pyarrow.parquet as pq
    import ray
except ImportError as e:      # an optional extra: say how to get it
    raise SweepError("pvperf sweep", f"the {e.name} package is missing",
                     "pip install -e '.[sweep]' (scripts/setup.sh does)"
                     ) from e

COLUMNS = ["cell", "id", "workload", "command", "model", "smp", "qemu", "arch",
           "cachegrind_compat", "timing", *GEOMETRY_KEYS, "deterministic",
           "mem", "tcg", "qemu_dir", "event", "value", "unit", "status", "error"]
OBJECT_STORE_BYTES = 80 << 20       # Ray's minimum is 75 MiB
PR_SET_PDEATHSIG = 1


@dataclass
class Outcome:
    cell: Cell
    status: str             # "ok", "failed", "skipped" (done before)
    error: str = ""
    seconds: float = 0.0


# -- one cell (runs in a Ray worker) ------------------------------------------

# How often a cell is started again after losing its worker or node.
NODE_LOSS_RETRIES = 2


def _die_with_parent() -> None:
    """preexec_fn: SIGTERM when the Ray worker dies (the sweep was
    interrupted), so that pvperf cleans up its VM as on Ctrl-C."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _write_atomic(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


def cell_done(cell_dir: Path) -> bool:
    """Finished before: cell.json says ok and result.json loads."""
    try:
        state = json.loads((cell_dir / "cell.json").read_text())
        if state.get("status") != "ok":
            return False
        results.load_result(cell_dir / "result.json")
    except (OSError, ValueError, PvperfError):
        return False
    return True


def run_cell(cell: Cell, cell_dir: Path) -> tuple[str, str, float]:
    """Run ``cell`` with ``pvperf stat --json``; record and return
    (status, error, seconds)."""
    cell_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        (cell_dir / "cell.json").unlink()
    argv = [sys.executable, "-m", "pyhost.cli",
            *cell.pvperf_args(cell_dir / "result.json")]
    start = time.monotonic()
    with open(cell_dir / "log.txt", "wb") as log:
        proc = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, cwd=cell.share,
                              preexec_fn=_die_with_parent)
    seconds = time.monotonic() - start
    status, error = "ok", ""
    if proc.returncode != 0:
        status = "failed"
        error = _last_line(cell_dir / "log.txt") or \
            f"pvperf exited with status {proc.returncode}"
    elif not (cell_dir / "result.json").exists():
        status, error = "failed", "no result.json written"
    _write_atomic(cell_dir / "cell.json", {
        "cell": cell.name, "id": cell.id, "settings": cell.settings(),
        "status": status, "error": error, "seconds": round(seconds, 3),
        "node": ray.get_runtime_context().get_node_id(), "argv": argv[3:]})
    return status, error, seconds


def _last_line(log: Path) -> str:
    """The log's last `pvperf: ...` line (its one-line error), else its
    last line."""
    lines = [ln for ln in log.read_text(errors="replace").splitlines()
             if ln.strip()]
    ours = [ln for ln in lines if ln.startswith("pvperf: ")]
    return (ours or lines or [""])[-1][:500]


# -- the sweep -----------------------------------------------------------------

def _start_ray(address: str | None, parallel: int, run_dir: Path) -> None:
    if address:
        ray.init(address=address, logging_level="WARNING",
                 log_to_driver=False)
    else:
        (run_dir / "plasma").mkdir()
        ray.init(num_cpus=parallel, include_dashboard=False,
                 logging_level="WARNING", log_to_driver=False,
                 _temp_dir=str(run_dir / "ray"),
                 _plasma_directory=str(run_dir / "plasma"),
                 object_store_memory=OBJECT_STORE_BYTES,
                 configure_logging=False)


def sweep(matrix: Matrix, output: Path, *, parallel: int,
          address: str | None = None, progress=None) -> list[Outcome]:
    """Run every unfinished cell of ``matrix``; write the table.
    ``progress(outcome)`` is called as each cell ends."""
    cells_dir = output / "cells"
    cells_dir.mkdir(parents=True, exist_ok=True)
    outcomes: list[Outcome] = []
    todo = []
    for cell in matrix.cells:
        if cell_done(cells_dir / cell.dirname):
            outcomes.append(Outcome(cell, "skipped"))
            if progress:
                progress(outcomes[-1])
        else:
            todo.append(cell)
    if todo:
        outcomes += _run_on_ray(todo, cells_dir, parallel, address, progress)
    write_table(matrix, output)
    return outcomes


def _run_on_ray(todo: list[Cell], cells_dir: Path, parallel: int,
                address: str | None, progress) -> list[Outcome]:
    run_dir = channels.make_run_dir()
    try:
        _start_ray(address, parallel, run_dir)
        try:
            # max_retries counts system failures only (the worker or its
            # node died), never a cell that failed: a cell lost with its
            # node runs again on another; run_cell starts afresh.
            task = ray.remote(num_cpus=1, max_retries=NODE_LOSS_RETRIES)(
                run_cell)
            pending = {task.remote(c, cells_dir / c.dirname): c
                       for c in todo}
            out = []
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                cell = pending.pop(done[0])
                try:
                    status, error, seconds = ray.get(done[0])
                except Exception as e:      # the worker itself died
                    status, error, seconds = "failed", f"Ray: {e}", 0.0
                out.append(Outcome(cell, status, error, seconds))
                if progress:
                    progress(out[-1])
            return out
        finally:
            ray.shutdown()
    finally:
        channels.remove_run_dir(run_dir)


# -- the table -------------------------------------------------------------------

def _rows(cell: Cell, cell_dir: Path) -> list[dict]:
    m, q = cell.model, cell.qemu
    base = {"cell": cell.name, "id": cell.id,
            "workload": cell.workload["name"],
            "command": cell.workload["command"], "model": m["name"],
            "smp": cell.smp, "qemu": q["name"], "arch": cell.arch,
            "cachegrind_compat": bool(m.get("cachegrind_compat")),
            "timing": bool(m.get("timing")),
            **{k: m.get(k, "") for k in GEOMETRY_KEYS},
            "deterministic": bool(q.get("deterministic")),
            "mem": q.get("mem", ""), "tcg": q.get("tcg", ""),
            "qemu_dir": q.get("dir", ""),
            "event": "", "value": None,
            "unit": "", "status": "not run", "error": ""}
    try:
        state = json.loads((cell_dir / "cell.json").read_text())
    except (OSError, ValueError):
        return [base]
    base.update(status=state.get("status", "?"), error=state.get("error", ""))
    if base["status"] != "ok":
        return [base]
    try:
        record = results.load_result(cell_dir / "result.json")
    except (OSError, ValueError, PvperfError) as e:
        return [{**base, "status": "failed", "error": str(e)}]
    return [{**base, "event": ev["name"], "value": ev["value"],
             "unit": ev.get("unit", "")} for ev in record["events"]]


def write_table(matrix: Matrix, output: Path) -> list[dict]:
    """OUTPUT/results.csv and .parquet from the cells' files."""
    rows = [r for cell in matrix.cells
            for r in _rows(cell, output / "cells" / cell.dirname)]
    tmp = output / "results.csv.tmp"
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    os.replace(tmp, output / "results.csv")
    table = pa.Table.from_pylist(rows, schema=pa.schema(
        [(c, pa.int64() if c == "smp" else
          pa.bool_() if c in ("cachegrind_compat", "timing", "deterministic")
          else pa.float64() if c == "value" else pa.string())
         for c in COLUMNS]))
    pq.write_table(table, output / "results.parquet.tmp")
    os.replace(output / "results.parquet.tmp", output / "results.parquet")
    return rows


def summary(outcomes: list[Outcome], output: Path) -> tuple[list[str], int]:
    """The lines pvperf prints at the end, and how many cells failed."""
    by = {s: [o for o in outcomes if o.status == s]
          for s in ("ok", "failed", "skipped")}
    lines = [f"pvperf: cell {o.cell.name} failed: {o.error}"
             for o in by["failed"]]
    lines.append(f"pvperf: {len(outcomes)} cells: {len(by['ok'])} run, "
                 f"{len(by['skipped'])} done before, {len(by['failed'])} "
                 f"failed; table: {output / 'results.csv'} and .parquet")
    return lines, len(by["failed"])
