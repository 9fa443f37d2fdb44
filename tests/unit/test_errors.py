"""pyhost/errors.py draws the exception tree: every subclass of
PvperfError in pyhost, wherever it is defined, under its own base."""
from __future__ import annotations

import ast
import re

import pyhost.errors

from support import REPO


def defined_bases() -> dict[str, str]:
    """Class name -> its first base's name, for every class of pyhost."""
    out = {}
    for path in sorted((REPO / "pyhost").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.bases:
                base = node.bases[0]
                out[node.name] = base.id if isinstance(base, ast.Name) \
                    else getattr(base, "attr", "")
    return out


def pvperf_errors() -> dict[str, str]:
    """Subclass of PvperfError -> its base, by name."""
    bases = defined_bases()

    def is_error(name: str) -> bool:
        seen = set()
        while name in bases and name not in seen | {"PvperfError"}:
            seen.add(name)
            name = bases[name]
        return name == "PvperfError"
    return {n: b for n, b in bases.items()
            if n != "PvperfError" and is_error(n)}


def drawn_tree() -> dict[str, str]:
    """Class -> parent, as the docstring's tree draws them (a class's
    depth is the column of its "+--")."""
    out, stack = {}, []            # stack: (column, name)
    for line in pyhost.errors.__doc__.splitlines():
        m = re.match(r"^(\s*(?:\|\s*)*)\+-- (\w+)", line)
        if m is None:
            root = re.match(r"^\s+(PvperfError)\b", line)
            if root:
                stack = [(-1, root.group(1))]
            continue
        col = len(m.group(1))
        while stack and stack[-1][0] >= col:
            stack.pop()
        out[m.group(2)] = stack[-1][1]
        stack.append((col, m.group(2)))
    return out


def test_the_tree_draws_every_error_under_its_base():
    assert drawn_tree() == pvperf_errors()
    assert {"ResultError", "CheckpointError"} <= set(drawn_tree())
