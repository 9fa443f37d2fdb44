"""How scripts/test.sh's parallel phase (pytest-xdist, `--dist loadgroup
--no-loadscope-reorder`) splits the suite between its workers.

A module-scoped fixture is a boot of a guest or a reference computed
once: it must stay one instance, on one worker, as in a serial run.  So
the tests that share an instance (a module's fixture with the same
parameters: one support.Guest's boot, say) form one xdist group, run
whole by one worker; a test that uses no module-scoped fixture goes
wherever a worker is free.  A module marked one_worker runs whole on one
worker (its tests look for processes of their kind machine-wide).
Groups are handed out in collection order (no reordering by their number
of tests: a group of two tests may hold the longest boot), the VM tests
first, the quick ones filling in at the end.

Test code that runs make goes through make() here: one make at a time
per directory.
"""
from __future__ import annotations

import fcntl
import subprocess
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
            # named by its first test, not by the union-find root: the
            # root follows the order of a set of str keys, which string
            # hashing randomizes per process, and every xdist worker
            # must give a test the same node id.  No "]" or "@" in the
            # name: xdist takes the group name from after the last "@",
            # only when no "]" follows it
            name = f"{items[group[0]].nodeid.split('::')[0]}#{group[0]}"
            for i in group:
                items[i].add_marker(pytest.mark.xdist_group(name))
                _suffix_nodeid(items[i], name)
    items.sort(key=lambda item: not (item.get_closest_marker("vm")
                                     or item.nodeid.startswith("tests/vm/")))


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
