"""Kernel module dependencies: which modules the guest loads, in order.

Debian's kernel packages ship no ``modules.dep`` (depmod runs at install
time), so dependencies come from each module's ``.modinfo``
(``depends=``, ``softdep=pre:``), read lazily for the modules needed.
"""
from __future__ import annotations

import lzma
import os
import re
import zlib
from pathlib import Path
from typing import Callable, Iterable

from .kernel import read_modinfo

_COMPRESSED = re.compile(r"\.ko\.(xz|gz|zst)$")


def uncompressed(path: str) -> str:
    """A module's path without its compression suffix (``x.ko.xz`` ->
    ``x.ko``): where the image puts the module, decompressed."""
    return _COMPRESSED.sub(".ko", path)


def read_module(path: Path) -> bytes:
    """A module file's ELF bytes, decompressed by its suffix (Debian's
    6.1 ships plain .ko, its 6.12 .ko.xz).  ValueError for .zst, which
    Python's standard library cannot read."""
    data = Path(path).read_bytes()
    if str(path).endswith(".xz"):
        return lzma.decompress(data)
    if str(path).endswith(".gz"):
        return zlib.decompress(data, 16 + zlib.MAX_WBITS)
    if str(path).endswith(".zst"):
        raise ValueError(f"zstd-compressed modules are not supported: {path}")
    return data


def modname(path_or_name: str) -> str:
    """Canonical module name: basename without .ko[.xz|.gz|.zst], '-'->'_'."""
    base = os.path.basename(path_or_name)
    base = re.sub(r"\.ko(\.(xz|gz|zst))?$", "", base)
    return base.replace("-", "_")


class ModuleDB:
    """Module name -> file and dependencies, from a ``modules.dep`` text or
    (Debian's kernel packages ship none: depmod runs at install time) from
    the ``depends=`` and ``softdep=pre:`` fields of each module's
    ``.modinfo``, read lazily for the modules actually needed."""

    def __init__(self, paths: dict[str, str],
                 deps_of: Callable[[str], list[str]],
                 builtin: Iterable[str] = ()):
        self.paths = paths                      # name -> relative .ko path
        self._deps_of = deps_of
        self._deps: dict[str, list[str]] = {}
        self.builtin = {modname(b) for b in builtin}

    @classmethod
    def from_modules_dep(cls, text: str, builtin: Iterable[str] = ()
                         ) -> "ModuleDB":
        paths, deps = {}, {}
        for line in text.splitlines():
            if ":" not in line:
                continue
            target, rest = line.split(":", 1)
            name = modname(target.strip())
            paths[name] = target.strip()
            deps[name] = [modname(d) for d in rest.split()]
        return cls(paths, lambda n: deps.get(n, []), builtin)

    @classmethod
    def from_tree(cls, moddir: Path) -> "ModuleDB":
        """Index ``/lib/modules/<ver>``: modules.dep if present, else
        modinfo of the .ko files."""
        moddir = Path(moddir)
        builtin = []
        if (moddir / "modules.builtin").exists():
            builtin = (moddir / "modules.builtin").read_text().split()
        dep_file = moddir / "modules.dep"
        if dep_file.exists() and dep_file.stat().st_size:
            return cls.from_modules_dep(dep_file.read_text(), builtin)
        paths = {}
        for dirpath, _dirs, files in os.walk(moddir / "kernel"):
            for f in files:
                if re.search(r"\.ko(\.(xz|gz|zst))?$", f):
                    rel = os.path.relpath(os.path.join(dirpath, f), moddir)
                    paths[modname(f)] = rel

        def deps_of(name: str) -> list[str]:
            info = read_modinfo(read_module(moddir / paths[name]))
            out = [d for v in info.get("depends", []) for d in v.split(",") if d]
            for soft in info.get("softdep", []):
                m = re.search(r"pre:\s*([^:]*?)(\s+\w+:|$)", soft)
                if m:
                    out += [d for d in m.group(1).split() if d in paths]
            return [modname(d) for d in out]

        return cls(paths, deps_of, builtin)

    def deps(self, name: str) -> list[str]:
        if name not in self._deps:
            self._deps[name] = self._deps_of(name)
        return self._deps[name]

    def load_order(self, roots: Iterable[str]) -> list[str]:
        """Modules to insmod, dependencies first; built-in ones dropped.
        Raises KeyError naming a module that is neither file nor built-in,
        and ValueError on a dependency cycle."""
        order: list[str] = []
        state: dict[str, int] = {}          # 1 visiting, 2 done

        def visit(name: str, chain: tuple[str, ...]) -> None:
            name = modname(name)
            if state.get(name) == 2:
                return
            if state.get(name) == 1:
                raise ValueError("module dependency cycle: "
                                 + " -> ".join(chain + (name,)))
            if name not in self.paths:
                if name in self.builtin:
                    state[name] = 2
                    return
                raise KeyError(name)
            state[name] = 1
            for dep in self.deps(name):
                visit(dep, chain + (name,))
            state[name] = 2
            order.append(name)

        for root in roots:
            visit(root, ())
        return order

    def modules_dep_text(self, names: Iterable[str],
                         rename: Callable[[str], str] = str) -> str:
        """A ``modules.dep`` for ``names`` (a closed set), depmod-style:
        all transitive deps, the one to load first listed last; each path
        as ``rename`` makes it (e.g. ``uncompressed``)."""
        lines = []
        for name in names:
            closure = [d for d in self.load_order([name]) if d != name]
            deps = " ".join(rename(self.paths[d]) for d in reversed(closure))
            lines.append(f"{rename(self.paths[name])}:"
                         f"{' ' if deps else ''}{deps}")
        return "\n".join(lines) + "\n"

