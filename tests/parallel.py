"""How scripts/test.sh's parallel phase (pytest-xdist, `--dist loadgroup
--no-loadscope-reorder`) splits the suite between its workers.

A module-scoped fixture is a boot of a guest or a reference computed
once: it must stay one instance, on one worker, as in a serial run.  So
the tests that share an instance (a module's fixture with the same
parameters: one support.Guest's boot, say) form one xdist group, run
whole by one worker; a test that uses no module-scoped fixture goes
wherever a worker is free.  A module marked one_worker runs whole on one
worker (its tests look for processes of their kind machine-wide).
Groups are handed out longest first, by the seconds each test took in a
measured run (durations.txt; a test not in it counts DEFAULT_SECONDS):
the number of tests says nothing (a group of two tests may hold the
longest boot), and a long group handed out last leaves the other worker
idle until it ends.  The quick tests fill in at the end.

scripts/test.sh writes each phase's junit xml to build/ and prints
report()'s summary: where the time went, by module, by group (a boot)
and by worker.  `python tests/parallel.py --record build/junit-*.xml`
writes a run's durations to durations.txt.

Test code that runs make goes through make() here: one make at a time
per directory.
"""
from __future__ import annotations

import fcntl
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _hashable(value):
    try:
        hash(value)
        return value
    except TypeError:
        return repr(value)


def fixture_instances(item) -> set[tuple]:
    """The module-scoped fixture instances ``item`` uses: (module,
    fixture, the values of the parameters it depends on, even through
    another fixture)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return set()
    params = getattr(getattr(item, "callspec", None), "params", {})
    defs = info.name2fixturedefs

    def depends(name, seen=()) -> set[str]:
        found = {name} if name in params else set()
        if name in defs and name not in seen:
            for arg in defs[name][-1].argnames:
                found |= depends(arg, (*seen, name))
        return found
    module = item.nodeid.split("::")[0]
    return {(module, name, tuple((p, _hashable(params[p]))
                                 for p in sorted(depends(name))))
            for name, d in defs.items() if d and d[-1].scope == "module"}


def mark_groups(items) -> None:
    """Give the tests that share a module-scoped fixture instance one
    xdist_group; put the VM tests first."""
    parent = list(range(len(items)))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i
    owner = {}
    for i, item in enumerate(items):
        keys = fixture_instances(item)
        if item.get_closest_marker("one_worker"):
            keys.add(("one_worker", item.nodeid.split("::")[0]))
        for instance in keys:
            j = owner.setdefault(instance, i)
            parent[find(i)] = find(j)
    members = {}
    for i in range(len(items)):
        members.setdefault(find(i), []).append(i)
    for group in members.values():
        if len(group) > 1:
            # no "]" or "@" in the name: xdist takes the group name from
            # after the last "@", only when no "]" follows it.  Named by
            # its first test's place, not by ``root``: which member ends
            # up the root follows the order of the unions, from sets of
            # strings whose order changes with each process's hash seed,
            # and every worker must name a group alike (xdist compares
            # the workers' collections).
            name = f"{items[group[0]].nodeid.split('::')[0]}#{group[0]}"
            for i in group:
                items[i].add_marker(pytest.mark.xdist_group(name))
                _suffix_nodeid(items[i], name)
    seconds = durations()
    if not seconds:                 # no measured run: the VM tests first
        items.sort(key=lambda item: _default_seconds(item) < 1)
        return
    cost, first = {}, {}
    for i, item in enumerate(items):
        group = _group(item)
        first.setdefault(group, i)
        cost[group] = cost.get(group, 0.0) + (
            0.0 if _skipped_as_slow(item) else
            seconds.get(_plain(item.nodeid), _default_seconds(item)))
    # a group's tests stay together, in their order
    items.sort(key=lambda item: (-cost[_group(item)], first[_group(item)]))


#: seconds of a test missing from durations.txt (new since it was
#: recorded): a VM test's share of a boot, or a quick one
DEFAULT_SECONDS = {"vm": 5.0, "other": 0.5}
DURATIONS = Path(__file__).with_name("durations.txt")


def _default_seconds(item) -> float:
    vm = item.get_closest_marker("vm") or item.nodeid.startswith("tests/vm/")
    return DEFAULT_SECONDS["vm" if vm else "other"]


def _skipped_as_slow(item) -> bool:
    """A slow test that this run skips (conftest.py, after mark_groups)."""
    return bool(item.get_closest_marker("slow")) and \
        os.environ.get("PVPERF_SLOW") != "1"


def _plain(nodeid: str) -> str:
    """A node id without the "@group" suffix mark_groups gives it."""
    return nodeid.split("@tests/")[0]


def _group(item) -> str:
    """The test's xdist group, or the test itself."""
    mark = item.get_closest_marker("xdist_group")
    return mark.args[0] if mark else item.nodeid


def durations(path: Path = DURATIONS) -> dict[str, float]:
    """{node id: seconds} of durations.txt ("SECONDS NODEID" lines)."""
    if not path.exists():
        return {}
    out = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            sec, nodeid = line.split(" ", 1)
            out[nodeid] = float(sec)
    return out


def make(directory: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    """`make -C DIRECTORY ARGS` (subprocess.run's keywords), one at a time
    per directory across processes: the pytest-xdist workers
    (scripts/test.sh) may both ask for a product, and two makes at once
    would write one binary, or kbuild's .cmd and Module.symvers, twice
    over while the other reads it."""
    locks = REPO / "build" / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    name = str(Path(directory).resolve()).strip("/").replace("/", "_")
    with open(locks / f"make-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)      # released when closed
        return subprocess.run(["make", "-C", str(directory), *args], **kw)


def _suffix_nodeid(item, name: str) -> None:
    """What xdist's worker does for a grouped test (nodeid + "@group",
    from which its scheduler reads the group), where xdist 3.8 cannot:
    it sets item._nodeid, which pytest 9.2 no longer reads (a node's id
    is item._id, a NodeId)."""
    try:
        from _pytest.nodeid import NodeId
    except ImportError:           # an older pytest: xdist's own works
        return
    if isinstance(getattr(item, "_id", None), NodeId):
        item._id = NodeId.parse(f"{item.nodeid}@{name}")


def make_scheduler(config, log):
    """xdist's loadgroup scheduler, giving a worker its next group only
    when it has one test left (xdist's own: when it has two): a worker
    keeps its last test until more work or shutdown comes, so one group
    always waits behind the running one, and a second one queued behind a
    boot-long test is time the other worker may spend idle at the end."""
    from xdist.scheduler import LoadGroupScheduling

    class OneAhead(LoadGroupScheduling):
        def _reschedule(self, node) -> None:
            if node.shutting_down:
                return
            if not self.workqueue:
                node.shutdown()
                return
            if self._pending_of(self.assigned_work[node]) > 1:
                return
            self._assign_work_unit(node)
    return OneAhead(config, log)


# -- where the time went: the junit xml scripts/test.sh writes ----------

@dataclass
class Case:
    """A test of a junit xml pytest wrote; worker, start and cpu are the
    properties conftest.py records (absent in older files)."""
    nodeid: str             # without its group
    group: str              # its xdist group, or its node id
    seconds: float          # with its fixtures' set-up and teardown
    worker: str = "-"
    start: float | None = None
    cpu: float = 0.0        # pvperf's and QEMU's too: the host's load aside


def testcases(path: Path) -> list[Case]:
    import xml.etree.ElementTree as ET
    out = []
    for case in ET.parse(path).iter("testcase"):
        parts = case.get("classname", "").split(".")
        k = next((k for k in range(len(parts), 0, -1)
                  if (REPO / "/".join(parts[:k])).with_suffix(".py")
                  .is_file()), len(parts))
        name = case.get("name", "")
        nodeid = "::".join(["/".join(parts[:k]) + ".py", *parts[k:],
                            _plain(name)])
        props = {p.get("name"): p.get("value")
                 for p in case.iter("property")}
        # junit puts a parametrized test's params back in one bracket,
        # after the group: "test[a-b]@tests/m.py#7]" (a group name has
        # no "]")
        out.append(Case(
            nodeid, name.rsplit("@", 1)[1].rstrip("]") if "@tests/" in name
            else nodeid,
            float(case.get("time") or 0.0), props.get("worker", "-"),
            float(props["start"]) if "start" in props else None,
            float(props.get("cpu", 0.0))))
    return out


def report(paths: list[Path], top: int = 15) -> str:
    """Each junit xml's seconds (worker-seconds in the parallel phase)
    and CPU seconds by module and by group (a group is one boot: the
    tests sharing a module-scoped fixture instance), and each worker's
    busy time and end, from the start of the first test: a worker that
    ends long before the other waited idle."""
    out = []
    for path in paths:
        if not path.is_file():
            continue
        cases = testcases(path)
        out.append(f"{path.name}: {len(cases)} tests, "
                   f"{sum(c.seconds for c in cases):.0f} s, "
                   f"{sum(c.cpu for c in cases):.0f} CPU s")
        t0 = min((c.start for c in cases if c.start), default=0.0)
        for worker in sorted({c.worker for c in cases if c.start}):
            mine = [c for c in cases if c.worker == worker and c.start]
            out.append(f"  worker {worker}: "
                       f"{sum(c.seconds for c in mine):.0f} s busy, last "
                       f"test ended at "
                       f"{max(c.start + c.seconds for c in mine) - t0:.0f} s")
        for what in ("module", "group"):
            sums = {}
            for c in cases:
                key = c.nodeid.split("::")[0] if what == "module" else c.group
                n, sec, cpu = sums.get(key, (0, 0.0, 0.0))
                sums[key] = (n + 1, sec + c.seconds, cpu + c.cpu)
            out.append(f"  by {what}, the {top} longest:  seconds  CPU s "
                       f"tests")
            for key, (n, sec, cpu) in sorted(sums.items(),
                                             key=lambda kv: -kv[1][1])[:top]:
                out.append(f"  {sec:8.1f} {cpu:8.1f} {n:4d}  {key}")
    return "\n".join(out)


def record(paths: list[Path], path: Path = DURATIONS) -> None:
    """Write the tests' seconds of junit xml files to durations.txt
    (those of at least a tenth of a second)."""
    seconds = {}
    for p in paths:
        for case in testcases(p):
            seconds[case.nodeid] = case.seconds
    lines = [f"{sec:.1f} {nodeid}" for nodeid, sec in sorted(seconds.items())
             if sec >= 0.1]
    path.write_text("# seconds node-id, read by parallel.mark_groups "
                    "(longest groups first);\n# `python tests/parallel.py "
                    "--record build/junit-*.xml` writes a run's.\n"
                    + "\n".join(lines) + "\n")


if __name__ == "__main__":
    import sys
    args = sys.argv[1:]
    if args and args[0] == "--record":
        record([Path(a) for a in args[1:]])
    else:
        print(report([Path(a) for a in args]))
