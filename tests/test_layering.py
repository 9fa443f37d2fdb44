"""The shape of pyhost: subsystems in layers whose imports only point down,
no import circle, no module over ~600 lines (pyhost/__init__.py draws it);
and the TCG plugin's units, whose includes only point down the table in
qemu_plugin/README.md ("Units"), which lists every unit once.

    cli -> profile, results -> image -> vm -> pmu -> errors, paths

The image builder sits above the VM launcher because its smoke boot uses
that one launcher; the launcher never imports the image package.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

from conftest import REPO

PYHOST = REPO / "pyhost"
LAYERS = {"errors": 0, "paths": 0, "digest": 0, "pmu": 1, "vm": 2, "image": 3,
          "profile": 4, "results": 4, "sweep": 5, "cli": 6}
MAX_LINES = 600


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PYHOST.rglob("*.py"))}


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The pyhost modules ``name`` imports (a package import also runs
    the package's __init__, which counts when it is another package)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module
            targets = [mod] + [f"{mod}.{a.name}" for a in node.names]
        else:
            continue
        for t in targets:
            if t in known and not name.startswith(t + "."):
                out.add(t)          # (not its own package: `from . import`)
            parts = t.split(".")
            for i in range(2, len(parts)):
                parent = ".".join(parts[:i])
                if parent in known and not name.startswith(parent + "."):
                    out.add(parent)
    out.discard(name)
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {n: imports(n, p, set(mods)) for n, p in mods.items()}


def layer(name: str) -> int | None:
    parts = name.split(".")
    return LAYERS.get(parts[1]) if len(parts) > 1 else None


def test_every_subsystem_has_a_layer():
    for name in modules():
        if name != "pyhost":
            assert layer(name) is not None, f"{name}: add it to LAYERS"


def test_imports_only_point_down():
    bad = []
    for name, deps in graph().items():
        for dep in deps:
            if dep == "pyhost" or name == "pyhost":
                continue
            same = dep.split(".")[1] == name.split(".")[1]
            if not same and layer(dep) >= layer(name):
                bad.append(f"{name} -> {dep}")
    assert bad == []


def assert_acyclic(g: dict[str, set[str]]) -> None:
    state: dict[str, int] = {}

    def visit(n: str, path: list[str]) -> None:
        if state.get(n) == 2:
            return
        assert state.get(n) != 1, " -> ".join(path + [n])
        state[n] = 1
        for d in sorted(g[n]):
            visit(d, path + [n])
        state[n] = 2

    for n in sorted(g):
        visit(n, [])


def test_no_import_circle():
    assert_acyclic(graph())


PLUGIN = REPO / "qemu_plugin"


def plugin_graph() -> dict[str, set[str]]:
    """Unit -> units it uses: x.c or x.h including "y.h" uses y (if y.c
    exists).  No exemption: the shared state is a unit of its own (core)."""
    units = {p.stem for p in PLUGIN.glob("*.c")}
    g = {}
    for u in units:
        text = (PLUGIN / f"{u}.c").read_text() + (
            (PLUGIN / f"{u}.h").read_text() if (PLUGIN / f"{u}.h").exists()
            else "")
        g[u] = {m for m in re.findall(r'^#include "(\w+)\.h"', text, re.M)
                if m in units and m != u}
    return g


def readme_units() -> list[str]:
    """The units of qemu_plugin/README.md's "Units" table, in its order."""
    text = (PLUGIN / "README.md").read_text()
    section = text.split("\n## Units\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `(\w+)\.c` \|", section, re.M)


def test_plugin_units_include_no_circle():
    g = plugin_graph()
    assert {"count", "models", "sample", "arena", "core"} <= set(g)
    assert_acyclic(g)


def test_plugin_core_is_below_every_unit_and_the_top_has_no_header():
    g = plugin_graph()
    assert g["core"] == set()
    assert not (PLUGIN / "pvperf.h").exists()
    assert [u for u, deps in g.items() if "pvperf" in deps] == []


def test_readme_lists_every_plugin_unit_once():
    listed = readme_units()
    assert len(listed) == len(set(listed)), listed
    assert set(listed) == {p.stem for p in PLUGIN.glob("*.c")}


def test_plugin_units_only_use_units_below_them_in_the_readme():
    order = {u: i for i, u in enumerate(readme_units())}
    up = [f"{u} -> {d}" for u, deps in plugin_graph().items()
          for d in deps if order[d] <= order[u]]
    assert up == []


def test_no_module_over_the_size_limit():
    big = {name: len(p.read_text().splitlines())
           for name, p in modules().items()}
    assert {n: k for n, k in big.items() if k > MAX_LINES} == {}
