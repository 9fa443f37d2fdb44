"""The shape of pyhost: modules in layers whose imports only point down,
no import circle between any two modules (a package's own included), no
module over ~600 lines (pyhost/__init__.py draws it); and the TCG
plugin's units, whose includes make no circle, with the guest
architectures in one place (qemu_plugin/arch/).  The plugins' units by
symbols and the README's table of them: test_link_layering.py.

    cli -> sweep -> profile, results -> image -> vm -> pmu, arch
        -> abi, errors, paths, digest, guest_contract, elf, ram

The image builder sits above the VM launcher because its smoke boot uses
that one launcher; the launcher never imports the image package.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from support import REPO

PYHOST = REPO / "pyhost"
LAYERS = {"abi": 0, "errors": 0, "paths": 0, "digest": 0,
          "guest_contract": 0, "elf": 0, "ram": 0, "arch": 1, "pmu": 1, "vm": 2,
          "image": 3, "profile": 4, "results": 4, "sweep": 5, "cli": 6}
MAX_LINES = 600


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PYHOST.rglob("*.py"))}


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The pyhost modules ``name``'s import statements name, wherever they
    stand (an import inside a function counts too).  ``from P import x``
    names the module P.x if there is one, else P itself (x is P's
    attribute): so an architecture module's ``from . import Arch`` is an
    edge to its own package's __init__.  Importing P.x also runs the
    __init__ of each package on the way, which counts too, except for
    ``name``'s own packages: Python ran those before ``name``."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            named = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module
            named = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod
                     for a in node.names]
        else:
            continue
        for target in named:
            parts = target.split(".")
            for i in range(1, len(parts) + 1):
                run = ".".join(parts[:i])
                if run in known and (run == target
                                     or not name.startswith(run + ".")):
                    out.add(run)
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


def test_a_package_and_its_own_modules_are_edges_too(tmp_path):
    """The circle an architecture module once made with the registry
    that imports it: ``from . import Arch`` names the package."""
    known = {"pyhost", "pyhost.arch", "pyhost.arch.base",
             "pyhost.arch.x86_64", "pyhost.abi"}
    leaf = tmp_path / "x86_64.py"
    leaf.write_text("from . import Arch\nfrom .base import TaskPath\n"
                    "from .. import abi\n")
    assert imports("pyhost.arch.x86_64", leaf, known) == {
        "pyhost.arch", "pyhost.arch.base", "pyhost.abi"}
    registry = tmp_path / "__init__.py"
    registry.write_text("def lazy():\n    from . import x86_64\n")
    g = {"pyhost.arch": imports("pyhost.arch", registry, known),
         "pyhost.arch.x86_64": {"pyhost.arch"}}
    assert g["pyhost.arch"] == {"pyhost.arch.x86_64"}
    with pytest.raises(AssertionError, match="x86_64 -> pyhost.arch"):
        assert_acyclic(g)


PLUGIN = REPO / "qemu_plugin" / "pvperf"     # pvperf.so's units
ARCH = REPO / "qemu_plugin" / "arch"         # the guest architectures
RMAP = REPO / "qemu_plugin" / "rmap"         # pvperf-rmap.so's units


def plugin_graph() -> dict[str, set[str]]:
    """Unit -> units it uses: x.c or x.h including "y.h" uses y (if y.c
    exists).  No exemption: the shared state is a unit of its own (core).
    (The units table of qemu_plugin/README.md, and the same by symbols:
    test_link_layering.py.)"""
    units = {p.stem for p in PLUGIN.glob("*.c")}
    g = {}
    for u in units:
        text = (PLUGIN / f"{u}.c").read_text() + (
            (PLUGIN / f"{u}.h").read_text() if (PLUGIN / f"{u}.h").exists()
            else "")
        g[u] = {m for m in re.findall(r'^#include "(\w+)\.h"', text, re.M)
                if m in units and m != u}
    return g


def test_plugin_units_include_no_circle():
    g = plugin_graph()
    assert {"count", "models", "sample", "arena", "core"} <= set(g)
    assert_acyclic(g)


def test_plugin_core_is_below_every_unit_and_the_top_has_no_header():
    g = plugin_graph()
    assert g["core"] == set()
    assert not (PLUGIN / "pvperf.h").exists()
    assert [u for u, deps in g.items() if "pvperf" in deps] == []


# Names of an architecture, its registers or its decoder: only the files
# of an architecture (arch/x86_64.c, ...) and the table that lists them
# (arch/targets.c) may hold them; both products (pvperf/, rmap/) reach
# the guest through arch/arch.h.
ARCH_WORDS = re.compile(
    r"x86|X86|aarch64|arm64|AArch64|capstone|riscv|RISCV|rv64|RV64|satp|"
    r"\b(?:[re](?:ax|bx|cx|dx|si|di|sp|bp|ip)|r\d+[dwb]?|eflags|[cC][rR][0-4])\b|"
    r"\bMODE_(?:64|32|16)\b|#(?:GP|DE|UD|PF)\b")


def arch_names() -> set[str]:
    """The architectures arch/targets.c lists (&arch_NAME entries)."""
    text = (ARCH / "targets.c").read_text()
    return set(re.findall(r"&arch_(\w+),", text))


def test_one_architecture_table_each_file_named_after_its_architecture():
    assert {"x86_64", "aarch64"} <= arch_names()
    assert {p.stem for p in ARCH.glob("*.c")} == arch_names() | {"targets"}
    for product in (PLUGIN, RMAP):
        assert not {p.stem for p in product.glob("*.[ch]")} & (
            arch_names() | {"targets", "arch"}), product


def test_shared_plugin_code_names_no_architecture():
    allowed = {"targets.c"} | {f"{a}.c" for a in arch_names()}
    found = []
    for path in sorted([*PLUGIN.glob("*.[ch]"), *RMAP.glob("*.[ch]"),
                        *ARCH.glob("*.[ch]")]):
        if path.parent == ARCH and path.name in allowed:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if ARCH_WORDS.search(line):
                found.append(f"{path.relative_to(ARCH.parent)}:{n}: "
                             f"{line.strip()}")
    assert found == []


def test_the_arch_words_pattern_finds_what_it_should():
    for hit in ("x86 TBs", "(%rbx)", "%rax", "rip", "cr3", "CR3",
                "MODE_64", "capstone", "aarch64", "rsp", "r8", "eax", "#GP"):
        assert ARCH_WORDS.search(hit), hit
    for miss in ("strip", "description", "sp and bp", "ip", "pc", "vaddr",
                 "REG_PC"):
        assert not ARCH_WORDS.search(miss), miss


def test_one_sampling_engine():
    """sample.c alone keeps slots and sends overflows, for the inline
    counters and the models' alike; one slot type."""
    senders = {p.name for p in PLUGIN.glob("*.c")
               if p.name != "link.c" and "link_send_overflow(" in p.read_text()}
    assert senders == {"sample.c"}
    slot_types = [t for p in PLUGIN.glob("*.[ch]")
                  for t in re.findall(r"^\s*struct (\w*slot\w*) \{",
                                      p.read_text(), re.M)]
    assert slot_types == ["pvperf_sample_slot"]


def test_no_plugin_file_over_the_size_limit():
    """The plugins' files, both products."""
    big = {str(p.relative_to(PLUGIN.parent)): len(p.read_text().splitlines())
           for p in PLUGIN.parent.rglob("*.[ch]")}
    assert {n: k for n, k in big.items() if k > MAX_LINES} == {}


def test_no_module_over_the_size_limit():
    big = {name: len(p.read_text().splitlines())
           for name, p in modules().items()}
    assert {n: k for n, k in big.items() if k > MAX_LINES} == {}


def test_no_two_test_modules_share_a_name():
    """pytest imports test modules by basename (rootdir, no packages):
    a second tests/**/test_x.py fails the collection of the run that
    meets both (the clean-clone CI's serial phase did)."""
    seen: dict[str, list[str]] = {}
    for p in (REPO / "tests").rglob("test_*.py"):
        seen.setdefault(p.name, []).append(str(p.relative_to(REPO)))
    assert {n: ps for n, ps in seen.items() if len(ps) > 1} == {}
