"""`pvperf sweep`: experiment matrices on Ray.

Unit checks of the matrix (expansion, ids, one-line refusals), then real
sweeps.  References are independent of pvperf: valgrind's Ir of each
freestanding program (instructions:u is exact at every smp) and
cachegrind's D1mr for the --cachegrind-compat cells; and a cell's counts
equal a single `pvperf stat --json` run of it (a sweep adds no count of
its own).
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from parallel import make
from support import (GUEST_ARCHES, PROGRAMS, cachegrind,
                     guest_arches_wanted, leftovers, pvperf_cmd, run_pvperf,
                     sigint_default, valgrind_irefs)
from test_counting import ANALYTIC
from pyhost.sweep import matrix as sweep_matrix
from pyhost.sweep.matrix import MatrixError
from pyhost.vm import channels

# one_worker: the Ray tests check that no raylet is left machine-wide, so
# two of them must not overlap (scripts/test.sh's parallel phase)
pytestmark = pytest.mark.one_worker

D1 = "16384,4,64"


def matrix_text(events: list[str], workloads: dict[str, str],
                extra: str = "") -> str:
    """A matrix over smp 1 and 2 of these workloads (name: command)."""
    text = f"events = {events!r}\nshare = \"{PROGRAMS}\"\nsmp = [1, 2]\n"
    for name, command in workloads.items():
        text += f'\n[[workload]]\nname = "{name}"\ncommand = "{command}"\n'
    return text + extra


EVENTS = ["instructions:u", "L1-dcache-load-misses:u"]
WORKLOADS = {"loop": "./loop 1000000", "walk": "./memwalk 6 1 4096"}
MODELS = f"""
[[model]]
name = "default"

[[model]]
name = "compat-d1"
cachegrind_compat = true
D1 = "{D1}"
"""
MATRIX = matrix_text(EVENTS, WORKLOADS, MODELS)


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "m.toml"
    p.write_text(text)
    return p


# -- the matrix ------------------------------------------------------------------

def test_matrix_expands_in_order_with_stable_ids(tmp_path):
    m = sweep_matrix.load(write(tmp_path, MATRIX))
    assert [c.name for c in m.cells] == [
        f"{w}.{mo}.smp{s}.default" for w in ("loop", "walk")
        for mo in ("default", "compat-d1") for s in (1, 2)]
    ids = [c.id for c in m.cells]
    assert len(set(ids)) == 8
    assert ids == [c.id for c in sweep_matrix.load(
        write(tmp_path, MATRIX)).cells]
    args = m.cells[2].pvperf_args(Path("r.json"))       # loop, compat, 1
    assert args[args.index("-e"):] == [
        "-e", "instructions:u,L1-dcache-load-misses:u", "--D1", D1,
        "--cachegrind-compat", "--", "./loop", "1000000"]


@pytest.mark.parametrize("change,message", [
    ('\ncolour = "red"\n', "unknown key 'colour'"),
    ('\n[[model]]\nname = "bad"\nD1 = "1000,4,64"\n', "model[2].D1"),
    ('\n[[model]]\nname = "default"\n', "name 'default' used twice"),
    ('\n[[qemu]]\nname = "ic"\ndeterministic = true\n', "need smp 1"),
    ('\n[[model]]\nname = "p"\npenalties = "L1=x"\n', "model[2].penalties"),
    ('\n[[qemu]]\nname = "t"\ntcg = "one-insn=on"\n',
     "qemu[0].tcg: unknown TCG option"),
])
def test_bad_matrices_are_refused_in_one_line(tmp_path, change, message):
    with pytest.raises(MatrixError) as e:
        sweep_matrix.load(write(tmp_path, MATRIX + change))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_the_qemu_axis_passes_translator_options(tmp_path):
    m = sweep_matrix.load(write(tmp_path, MATRIX + f"""
[[qemu]]
name = "tcg"

[[qemu]]
name = "one-insn"
tcg = "one-insn-per-tb=on,tb-size=64"
dir = "{tmp_path}"
"""))
    cells = [c for c in m.cells if c.name.startswith("loop.default.smp1.")]
    assert [c.name.rsplit(".", 1)[1] for c in cells] == ["tcg", "one-insn"]
    args = [c.pvperf_args(Path("r.json")) for c in cells]
    assert "--tcg" not in args[0]
    assert args[1][args[1].index("--tcg") + 1] == \
        "one-insn-per-tb=on,tb-size=64"
    assert args[1][args[1].index("--qemu") + 1] == str(tmp_path)
    assert cells[0].id != cells[1].id


def test_empty_axis_and_bad_toml_are_refused(tmp_path):
    with pytest.raises(MatrixError, match="smp: must be a non-empty list"):
        sweep_matrix.load(write(tmp_path, MATRIX.replace("smp = [1, 2]",
                                                         "smp = []")))
    with pytest.raises(MatrixError, match="not TOML"):
        sweep_matrix.load(write(tmp_path, "events = ["))
    r = run_pvperf(["sweep", str(write(tmp_path, "events = [")), "-o",
                    str(tmp_path / "out")])
    assert r.returncode != 0 and r.stderr.startswith("pvperf: ")
    assert not (tmp_path / "out").exists()      # nothing started


# -- real sweeps -----------------------------------------------------------------

def rows_by_cell(out: Path) -> dict[str, dict[str, float]]:
    with open(out / "results.csv") as f:
        rows = list(csv.DictReader(f))
    parquet = pq.read_table(out / "results.parquet").to_pylist()
    assert [(r["cell"], r["event"], float(r["value"])) for r in rows] == \
        [(r["cell"], r["event"], r["value"]) for r in parquet]
    cells: dict[str, dict[str, float]] = {}
    for r in rows:
        assert r["status"] == "ok", r
        cells.setdefault(r["cell"], {})[r["event"]] = float(r["value"])
    return cells


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sweep")
    m = write(tmp, MATRIX)
    out = tmp / "out"
    start = time.monotonic()
    r = run_pvperf(["sweep", str(m), "-o", str(out)], timeout=900)
    seconds = time.monotonic() - start
    assert r.returncode == 0, r.stderr[-3000:]
    return m, out, r, seconds


@pytest.mark.vm
def test_every_cell_counts_like_valgrind(swept, tmp_path):
    m, out, r, seconds = swept
    cells = rows_by_cell(out)
    assert len(cells) == 8, r.stderr
    irefs = {"loop": valgrind_irefs([str(PROGRAMS / "loop"), "1000000"]),
             "walk": valgrind_irefs([str(PROGRAMS / "memwalk"), "6", "1",
                                     "4096"])}
    d1mr = cachegrind(("32768,8,64", D1, "8388608,16,64"),
                      [str(PROGRAMS / "memwalk"), "6", "1", "4096"],
                      tmp_path / "cg.out")["D1mr"]
    for name, counts in cells.items():
        assert counts["instructions:u"] == irefs[name.split(".")[0]], name
    # memwalk 6 1 4096: one read per line round 4 MiB, 64 K reads (the
    # table names each event as asked, though perf 6.1 prints this
    # hardware-cache event without its :u)
    assert abs(cells["walk.compat-d1.smp1.default"]
               ["L1-dcache-load-misses:u"] - d1mr) <= 1
    assert abs(cells["walk.compat-d1.smp2.default"]
               ["L1-dcache-load-misses:u"] - d1mr) <= 1
    print(f"2x2x2 sweep: {seconds:.1f} s; stderr: {r.stderr[-300:]}")


@pytest.mark.vm
def test_a_cell_equals_a_single_pvperf_stat(swept, tmp_path):
    m, out, _, _ = swept
    cell = sweep_matrix.load(m).cells[6]          # walk, compat, smp 1
    single = tmp_path / "single.json"
    r = run_pvperf(cell.pvperf_args(single), cwd=PROGRAMS)
    assert r.returncode == 0, r.stderr
    mine = json.loads((out / "cells" / cell.dirname /
                       "result.json").read_text())
    theirs = json.loads(single.read_text())["events"]
    assert [e["name"] for e in mine["events"]] == [e["name"] for e in theirs]
    got = {e["name"]: e["value"] for e in mine["events"]}
    want = {e["name"]: e["value"] for e in theirs}
    assert got["instructions:u"] == want["instructions:u"]
    # compat data misses agree within one, also run to run (docs/events.md:
    # the stack, randomised per run, shares L1 sets with the data)
    assert abs(got["L1-dcache-load-misses:u"] -
               want["L1-dcache-load-misses:u"]) <= 1, (got, want)


@pytest.mark.vm
def test_a_rerun_skips_finished_cells(swept):
    m, out, _, _ = swept
    states = sorted((out / "cells").glob("*/cell.json"))
    before = [p.stat().st_mtime_ns for p in states]
    r = run_pvperf(["sweep", str(m), "-o", str(out)], timeout=300)
    assert r.returncode == 0, r.stderr
    assert "0 run, 8 done before, 0 failed" in r.stderr
    assert [p.stat().st_mtime_ns for p in states] == before


KILL_MATRIX = matrix_text(["instructions:u"], {
    "loop": "./loop 3000000", "walk": "./memwalk 6 2 16",
    "missing": "./no-such-program"})


@pytest.mark.vm
def test_interrupted_sweep_completes_on_rerun(tmp_path):
    """SIGINT once the first cell has finished; nothing is left running
    or behind; the re-run runs only what is missing; the failing cell is
    recorded with its error and does not stop the others."""
    m = write(tmp_path, KILL_MATRIX)
    out = tmp_path / "out"
    proc = subprocess.Popen(pvperf_cmd() + ["sweep", str(m), "-o", str(out),
                                            "--parallel", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=sigint_default)
    deadline = time.monotonic() + 300
    while not list((out / "cells").glob("*/cell.json")):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=120)
    assert proc.returncode != 0
    time.sleep(1)
    assert leftovers() == []
    assert subprocess.run(["pgrep", "-f", "raylet|gcs_server"],
                          capture_output=True).stdout == b""
    ok_before = {p.parent.name: p.stat().st_mtime_ns
                 for p in (out / "cells").glob("*/cell.json")
                 if json.loads(p.read_text())["status"] == "ok"}
    assert 1 <= len(ok_before) < 4
    r = run_pvperf(["sweep", str(m), "-o", str(out)], timeout=600)
    assert r.returncode == 1, r.stderr              # the missing program
    cells = sweep_matrix.load(m).cells
    assert f"{4 - len(ok_before)} run, {len(ok_before)} done before, " \
        "2 failed" in r.stderr, r.stderr
    for name, mtime in ok_before.items():         # not run again
        assert (out / "cells" / name / "cell.json").stat().st_mtime_ns == \
            mtime
    with open(out / "results.csv") as f:
        rows = {r["cell"]: r for r in csv.DictReader(f)}
    for c in cells:
        row = rows[c.name]
        if c.workload["name"] == "missing":
            assert row["status"] == "failed" and row["error"], row
        else:
            assert row["status"] == "ok", row
    assert int(float(rows["loop.default.smp2.default"]["value"])) == \
        valgrind_irefs([str(PROGRAMS / "loop"), "3000000"])
    assert "cell missing.default.smp1.default failed: " in r.stderr
    assert leftovers() == []
    # Ray's defaults would leave /tmp/ray and /dev/shm/plasma_* behind
    assert not [p for p in (*Path("/tmp").iterdir(),
                            *Path("/dev/shm").iterdir())
                if p.name.startswith(("ray", "plasma"))]


# -- on an existing cluster: --address ---------------------------------------

RAY = Path(sys.executable).parent / "ray"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Ray 2.5x turns token authentication on for `ray start --head` when
# ~/.ray/auth_token exists (a local `ray.init()`, pvperf's own sweep
# included, writes one), but not for a node joining it, which is then
# refused ("InvalidAuthToken"): the test cluster, on loopback only, says
# how it authenticates instead of depending on the home directory.
RAY_ENV = {**os.environ, "RAY_AUTH_MODE": "disabled"}


def ray_start(args: list[str], log: Path, sessions: list[int]) -> None:
    """`ray start ARGS` in a session of its own, added to ``sessions``:
    every process of the node it starts stays in that session.  (Its
    daemons inherit its stdout: a file, since reading a pipe would not
    end while they run.)"""
    with open(log, "w") as out:
        proc = subprocess.Popen([str(RAY), "start", *args], stdout=out,
                                stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=RAY_ENV,
                                start_new_session=True)
        sessions.append(proc.pid)
        status = proc.wait(timeout=180)
    assert status == 0, log.read_text()[-3000:]


def session_members(sid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getsid(int(entry.name)) == sid:
                    members.append(int(entry.name))
            except ProcessLookupError:
                pass
    return members


def stop_session(sid: int) -> None:
    """SIGTERM to the session's process group, SIGKILL to what is left
    15 s later (as `ray stop` does, but to this node alone: `ray stop`
    stops every Ray on the machine)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(sid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 15
        while session_members(sid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if not session_members(sid):
            return
    raise AssertionError(f"the Ray node of session {sid} did not stop")


def node_ids(address: str) -> tuple[str, list[str]]:
    """(the head's node id, every live node's id)."""
    probe = ("import ray; ray.init(address=%r, logging_level='ERROR', "
             "log_to_driver=False); ns = [n for n in ray.nodes() if "
             "n['Alive']]; print(*[n['NodeID'] for n in ns if "
             "'node:__internal_head__' in n['Resources']]); "
             "print(*[n['NodeID'] for n in ns])" % address)
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True,
                       text=True, timeout=120, env=RAY_ENV)
    assert r.returncode == 0, r.stderr[-2000:]
    head, every = r.stdout.strip().splitlines()[-2:]
    return head.strip(), every.split()


def alive_nodes(address: str) -> int:
    return len(node_ids(address)[1])


@dataclass
class Cluster:
    address: str
    files: Path             # the cluster's private directory
    sessions: list[int]     # the head's session, then the second node's


@pytest.fixture
def two_node_cluster():
    """A Ray head and a second node on loopback, started as a user would
    (`ray start`), each in its own session, with its files (session,
    object store) in a private directory; all of it stopped and removed
    after the test.  Free ports, so that another Ray on this machine is
    not disturbed."""
    # not "pvperf-...": support.leftovers takes those for pvperf's own,
    # and another worker's test asks while this cluster runs
    top = Path(tempfile.mkdtemp(prefix="raytest-",
                                dir=channels.run_dir_parent()))
    (top / "plasma").mkdir()
    port = free_port()
    address = f"127.0.0.1:{port}"
    node = ["--node-ip-address=127.0.0.1", "--num-cpus=1",
            f"--plasma-directory={top / 'plasma'}",
            f"--object-store-memory={80 << 20}", "--disable-usage-stats"]
    sessions: list[int] = []
    try:
        ray_start(["--head", f"--port={port}", f"--temp-dir={top / 'ray'}",
                   "--include-dashboard=false",
                   f"--dashboard-port={free_port()}",
                   f"--dashboard-agent-listen-port={free_port()}", *node],
                  top / "head.log", sessions)
        ray_start([f"--address={address}",
                   f"--dashboard-agent-listen-port={free_port()}", *node],
                  top / "node.log", sessions)
        deadline = time.monotonic() + 120
        while alive_nodes(address) < 2:       # the second one registered
            assert time.monotonic() < deadline, "the second node never came"
            time.sleep(1)
        yield Cluster(address, top, sessions)
    finally:
        for sid in reversed(sessions):
            stop_session(sid)
        shutil.rmtree(top, ignore_errors=True)


@pytest.mark.vm
def test_sweep_on_a_cluster_runs_on_both_nodes_like_a_local_one(
        swept, two_node_cluster, tmp_path):
    """`--address` on a two-node cluster (one CPU each): the cells run on
    both nodes, and the table is the local sweep's for the same cells
    (instructions exact; the data-miss model within one, as between any
    two runs: docs/events.md)."""
    _, local_out, _, _ = swept
    address, cluster_files = two_node_cluster.address, two_node_cluster.files
    m = write(tmp_path, matrix_text(EVENTS, {"loop": WORKLOADS["loop"]},
                                    MODELS))
    out = tmp_path / "out"
    r = run_pvperf(["sweep", str(m), "-o", str(out), "--address", address],
                   timeout=900, env=RAY_ENV)
    assert r.returncode == 0, r.stderr[-3000:]
    nodes = {json.loads(p.read_text())["node"]
             for p in (out / "cells").glob("*/cell.json")}
    assert len(nodes) == 2, nodes
    got, local = rows_by_cell(out), rows_by_cell(local_out)
    assert len(got) == 4 and set(got) <= set(local), (got, local)
    for cell, counts in got.items():
        assert counts.keys() == local[cell].keys(), cell
        assert counts["instructions:u"] == local[cell]["instructions:u"]
        assert abs(counts["L1-dcache-load-misses:u"] -
                   local[cell]["L1-dcache-load-misses:u"]) <= 1, cell
    # (the cluster's own files go with it, after the test)
    assert [p for p in leftovers() if p != str(cluster_files)] == []


KILL_NODE_WORKLOADS = {f"loop{i}": f"./loop {n}" for i, n in
                       enumerate((40000000, 40000001, 40000002))}


@pytest.mark.vm
def test_a_node_killed_mid_sweep_costs_only_its_running_cells(
        two_node_cluster, tmp_path):
    """The second node is killed (SIGKILL to its whole process group, as
    a crashed machine) while each node runs a cell: the sweep still
    ends with every cell ok and exact (valgrind's Ir), the cell that was
    running there ran again on the head, and no cell finished before
    the kill ran twice."""
    address, cluster_files = two_node_cluster.address, two_node_cluster.files
    head, nodes = node_ids(address)
    assert len(nodes) == 2 and head in nodes, (head, nodes)
    m = write(tmp_path, matrix_text(["instructions:u"], KILL_NODE_WORKLOADS))
    out = tmp_path / "out"
    proc = subprocess.Popen(pvperf_cmd() + ["sweep", str(m), "-o", str(out),
                                            "--address", address],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=RAY_ENV)
    cells = out / "cells"
    deadline = time.monotonic() + 600

    def running() -> set[str]:
        return {d.name for d in cells.glob("*") if (d / "log.txt").exists()
                and not (d / "cell.json").exists()}

    # One CPU a node: two cells running means one on each node.
    while len(running()) < 2:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "never two cells at once"
        time.sleep(0.2)
    done_before = {p.parent.name: p.stat().st_mtime_ns
                   for p in cells.glob("*/cell.json")}
    cut_short = running()
    os.killpg(two_node_cluster.sessions[1], signal.SIGKILL)
    _, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]

    states = {p.parent.name: json.loads(p.read_text())
              for p in cells.glob("*/cell.json")}
    assert len(states) == 6 and all(s["status"] == "ok"
                                    for s in states.values()), states
    for name, mtime in done_before.items():          # not run again
        assert (cells / name / "cell.json").stat().st_mtime_ns == mtime
    # The cell the dead node was running finished on the head.
    assert all(states[name]["node"] == head for name in cut_short), states
    refs = {n: valgrind_irefs([str(PROGRAMS / "loop"), c.split()[1]])
            for n, c in KILL_NODE_WORKLOADS.items()}
    for cell, counts in rows_by_cell(out).items():
        assert counts["instructions:u"] == refs[cell.split(".")[0]], cell
    assert [p for p in leftovers() if p != str(cluster_files)] == []


# -- the arch axis -------------------------------------------------------------

ARCH_N = 2_000_000


def arch_matrix(share: Path, arches=("x86_64", "aarch64")) -> str:
    return (f'events = ["instructions:u"]\nshare = "{share}"\n'
            f'arch = {json.dumps(list(arches))}\n'
            f'\n[[workload]]\nname = "loop"\n'
            f'command = "./{{arch}}/loop {ARCH_N}"\n')


def test_the_arch_axis_expands_and_keeps_host_ids(tmp_path):
    m = sweep_matrix.load(write(tmp_path, arch_matrix(PROGRAMS)))
    assert [c.name for c in m.cells] == ["loop.default.smp1.default",
                                         "loop.default.smp1.default.aarch64"]
    host_only = sweep_matrix.load(write(tmp_path, arch_matrix(PROGRAMS)
                                        .replace('arch = ["x86_64", '
                                                 '"aarch64"]\n', "")))
    assert host_only.cells[0].id == m.cells[0].id   # ids of old matrices
    args = m.cells[1].pvperf_args(Path("r.json"))
    assert args[args.index("--arch"):args.index("--arch") + 2] == \
        ["--arch", "aarch64"]
    assert args[-2:] == ["./aarch64/loop", str(ARCH_N)]
    with pytest.raises(MatrixError, match=r"arch\[0\]: must be one of"):
        sweep_matrix.load(write(tmp_path, arch_matrix(PROGRAMS).replace(
            '"x86_64", "aarch64"', '"sparc"')))


@pytest.mark.vm
def test_a_sweep_over_the_architectures_counts_exactly(tmp_path):
    """One workload on an x86_64 guest and each foreign one
    PVPERF_GUEST_ARCHES wants (arm64, riscv64): each cell equals its
    independent reference (valgrind's Ir on the host for x86_64; the
    foreign loops' analytic counts, tests/vm/test_counting.py)."""
    foreign = [a for a in ANALYTIC if a in guest_arches_wanted()]
    for arch in foreign:
        if reason := GUEST_ARCHES[arch].missing():
            pytest.skip(reason)
    make(PROGRAMS, "-s", "loop", *foreign,
                   check=True)
    share = tmp_path / "share"
    for arch in ("x86_64", *foreign):
        (share / arch).mkdir(parents=True)
        shutil.copy(GUEST_ARCHES[arch].programs / "loop",
                    share / arch / "loop")
    m = write(tmp_path, arch_matrix(share, ("x86_64", *foreign)))
    out = tmp_path / "out"
    r = run_pvperf(["sweep", str(m), "-o", str(out), "--parallel", "2"],
                   timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    got = rows_by_cell(out)
    assert got == {
        "loop.default.smp1.default": {"instructions:u": valgrind_irefs(
            [str(PROGRAMS / "loop"), str(ARCH_N)])},
        **{f"loop.default.smp1.default.{arch}": {
            "instructions:u": ANALYTIC[arch][0](ARCH_N)[0]}
           for arch in foreign}}
    with open(out / "results.csv") as f:
        assert sorted(r["arch"] for r in csv.DictReader(f)) == \
            sorted(["x86_64", *foreign])
