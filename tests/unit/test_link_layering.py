"""No circle at any level, by symbols: the C products' units, read from
their objects with ``nm``.

A unit is one object file.  Unit A uses unit B when A leaves undefined a
symbol (a function or a global) that B defines; a global read by two
units is an edge as much as a call is, so two units that reach into each
other's state form a circle even when their includes do not.  For each
product (the TCG plugin's two, the guest driver and its hypercall test
module) the graph of its objects must have no cycle.

The plugins' units are also listed, top down, in qemu_plugin/README.md
("Units"): one table per product and one for arch/, the guest
architectures both link, below either product's own units.  Every unit
is listed once, and a unit uses, by symbols and by includes, only units
listed below it.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from support import REPO, make

PLUGIN_DIR = REPO / "qemu_plugin"
DRIVER_DIR = REPO / "guest_kernel_patch"
README = PLUGIN_DIR / "README.md"
MAX_LINES = 600

# Symbol types nm prints for what an object defines for others (global:
# upper case) and for what it needs.
DEFINED = set("TDBRCGSVW")
UNDEFINED = set("U")


def make_var(name: str) -> list[Path]:
    """A Makefile variable of qemu_plugin/ (object lists), as paths."""
    out = subprocess.run(
        ["make", "-s", "--no-print-directory", "-C", str(PLUGIN_DIR),
         f"print-{name}"], capture_output=True, text=True, check=True)
    return [PLUGIN_DIR / o for o in out.stdout.split()]


PLUGIN_PRODUCTS = {"pvperf.so": "OBJS", "pvperf-rmap.so": "RMAP_OBJS"}


def plugin_objects(product: str) -> list[Path]:
    """Builds the product if needed (make -C qemu_plugin PRODUCT), then
    its objects, as the Makefile links them."""
    make(PLUGIN_DIR, "-s", product, check=True, capture_output=True)
    return make_var(PLUGIN_PRODUCTS[product])


def kbuild_objects(mod: Path, target: str) -> list[Path]:
    """A kernel module's objects, from kbuild's .mod list, built first
    (``make -C guest_kernel_patch TARGET``) if they are not there."""
    if not mod.exists():
        build = make(DRIVER_DIR, target, capture_output=True, text=True)
        if build.returncode or not mod.exists():
            pytest.skip(f"{mod.name} not built (make -C guest_kernel_patch "
                        f"{target}: {build.stderr.strip()[-200:]})")
    return [Path(p) for p in mod.read_text().split()]


def product_objects(product: str) -> list[Path]:
    if product in PLUGIN_PRODUCTS:
        return plugin_objects(product)
    if product == "pvperf.ko":
        return kbuild_objects(DRIVER_DIR / "pvperf.mod", "modules")
    assert product == "pvperf_hctest.ko"
    return kbuild_objects(DRIVER_DIR / "hctest" / "pvperf_hctest.mod",
                          "hctest")


def symbols(obj: Path) -> tuple[set[str], set[str]]:
    """(defined, undefined) global symbols of an object."""
    out = subprocess.run(["nm", str(obj)], capture_output=True, text=True,
                         check=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in UNDEFINED:
            undefined.add(parts[1])
        elif len(parts) == 3 and parts[1] in DEFINED:
            defined.add(parts[2])
    return defined, undefined


def symbol_graph(objs: list[Path]) -> tuple[dict[str, set[str]],
                                             dict[tuple[str, str], set[str]]]:
    """Unit -> units it uses, and the symbols of each edge.  A unit is
    named by its object's path under its product's folder, less .o."""
    def name(o: Path) -> str:
        for base in (PLUGIN_DIR, DRIVER_DIR):
            if o.is_relative_to(base):
                return str(o.relative_to(base).with_suffix(""))
        return o.stem

    syms = {name(o): symbols(o) for o in objs}
    owner = {s: u for u, (d, _) in syms.items() for s in d}
    g: dict[str, set[str]] = {u: set() for u in syms}
    why: dict[tuple[str, str], set[str]] = {}
    for u, (_, undef) in syms.items():
        for s in undef:
            v = owner.get(s)
            if v and v != u:
                g[u].add(v)
                why.setdefault((u, v), set()).add(s)
    return g, why


def find_cycle(g: dict[str, set[str]]) -> list[str] | None:
    """A cycle of g as [a, b, ..., a], or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for d in sorted(g[n]):
            if state.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in state:
                found = visit(d)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(g):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def describe(cycle: list[str], why: dict[tuple[str, str], set[str]]) -> str:
    return "; ".join(f"{a} -> {b} ({', '.join(sorted(why[a, b]))})"
                     for a, b in zip(cycle, cycle[1:]))


def test_find_cycle_names_the_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [
        "a", "b", "c", "a"]


# Both plugin products, the guest driver and its hypercall test module
# (whose shared helpers live in hctest_hcall.c, below hctest.c and
# hctest_fuzz.c, so that neither reaches into the other).
@pytest.mark.parametrize("product", ["pvperf.so", "pvperf-rmap.so",
                                     "pvperf.ko", "pvperf_hctest.ko"])
def test_no_symbol_circle(product):
    g, why = symbol_graph(product_objects(product))
    assert len(g) > 1
    cycle = find_cycle(g)
    assert cycle is None, f"{product}: {describe(cycle, why)}"


# ---- the README's units tables (the plugins) ----

def readme_tables() -> dict[str, list[str]]:
    """The "Units" section's tables, by their heading's first `word`,
    each a list of source paths (under qemu_plugin/, less .c) in order."""
    text = README.read_text()
    section = text.split("\n## Units\n", 1)[1].split("\n## ", 1)[0]
    tables = {}
    for part in section.split("\n### ")[1:]:
        heading = re.match(r"`([^`]+)`", part)
        assert heading, part[:60]
        tables[heading.group(1)] = re.findall(r"^\| `([\w/]+)\.c` \|",
                                              part, re.M)
    return tables


def readme_order(product: str) -> list[str]:
    """A product's units top down: its own table, then arch/'s."""
    tables = readme_tables()
    return tables[product] + tables["arch/"]


def includes(unit: str, known: set[str]) -> set[str]:
    """The units whose header unit.c or unit.h includes ("y.h": the unit
    y.c of the same product, in whichever folder)."""
    by_stem = {Path(u).name: u for u in known}
    text = "".join((PLUGIN_DIR / f"{unit}{ext}").read_text()
                   for ext in (".c", ".h")
                   if (PLUGIN_DIR / f"{unit}{ext}").exists())
    return {by_stem[m] for m in re.findall(r'^#include "(\w+)\.h"', text,
                                           re.M)
            if m in by_stem and by_stem[m] != unit}


@pytest.mark.parametrize("product", list(PLUGIN_PRODUCTS))
def test_readme_lists_every_unit_once(product):
    listed = readme_order(product)
    assert len(listed) == len(set(listed)), listed
    objs = plugin_objects(product)
    assert set(listed) == {str(o.relative_to(PLUGIN_DIR).with_suffix(""))
                           for o in objs}


@pytest.mark.parametrize("product", list(PLUGIN_PRODUCTS))
def test_units_use_only_units_below_them_in_the_readme(product):
    order = {u: i for i, u in enumerate(readme_order(product))}
    g, why = symbol_graph(plugin_objects(product))
    up = [f"{u} -> {d} (symbols {', '.join(sorted(why[u, d]))})"
          for u, deps in g.items() for d in deps if order[d] <= order[u]]
    up += [f"{u} -> {d} (include)" for u in order
           for d in includes(u, set(order)) if order[d] <= order[u]]
    assert up == []


def test_arch_is_below_both_products_and_names_neither():
    """arch/ is shared: it uses nothing of either product."""
    for product in PLUGIN_PRODUCTS:
        g, why = symbol_graph(plugin_objects(product))
        up = [f"{u} -> {d}" for u, deps in g.items()
              if u.startswith("arch/") for d in deps
              if not d.startswith("arch/")]
        assert up == [], product


def test_no_c_module_over_the_size_limit():
    """The plugins' and the guest driver's C files."""
    files = list(PLUGIN_DIR.rglob("*.[ch]")) + [
        p for p in DRIVER_DIR.rglob("*.[ch]")
        if not p.name.endswith(".mod.c") and p.parent.name not in (
            "arm64", "linux-6.12") and p.parent.parent.name not in (
            "arm64", "linux-6.12")]
    big = {str(p.relative_to(REPO)): len(p.read_text().splitlines())
           for p in files if p.is_file()}
    assert {n: k for n, k in big.items() if k > MAX_LINES} == {}
