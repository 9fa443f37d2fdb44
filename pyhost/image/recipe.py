"""The image recipe: ``images/<name>/recipe.json`` (keys: images/README.md)."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ImageError
from .store import recipe_dir

@dataclass(frozen=True)
class ToolSpec:
    """A recipe ``tools`` entry: a host program copied into the guest with
    its shared libraries, like perf (e.g. objdump for ``perf annotate``)."""
    package: str        # the installed Debian package it comes from
    binary: str         # host path; a symlink is followed to the ELF file
    guest: str          # guest path (default: ``binary``)


@dataclass
class Recipe:
    name: str
    directory: Path
    kernel_package: str
    busybox_package: str
    perf_package: str
    perf_binary: str
    modules: list[str]
    init: Path
    overlay: Path | None
    tools: list[ToolSpec] = field(default_factory=list)


_GUEST_RESERVED = {"/init", "/bin/busybox", "/usr/bin/perf"}


def parse_tools(raw) -> list[ToolSpec]:
    """The recipe's ``tools`` list: ``[{"package": P, "binary": PATH,
    "guest": PATH?}, ...]``.  Raises ValueError on a malformed entry."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ValueError("'tools' must be a list of objects")
    tools, seen = [], set()
    for i, item in enumerate(raw):
        where = f"tools[{i}]"
        if not isinstance(item, dict):
            raise ValueError(f"{where} must be an object")
        unknown = set(item) - {"package", "binary", "guest"}
        if unknown:
            raise ValueError(f"{where} has unknown key(s) "
                             + ", ".join(sorted(unknown)))
        pkg, binary = item.get("package"), item.get("binary")
        guest = item.get("guest", binary)
        if not isinstance(pkg, str) or not pkg:
            raise ValueError(f"{where}.package must be a package name")
        for key, path in (("binary", binary), ("guest", guest)):
            if (not isinstance(path, str) or not path.startswith("/")
                    or ".." in path.split("/") or path.endswith("/")):
                raise ValueError(f"{where}.{key} must be an absolute file "
                                 f"path, not {path!r}")
        guest = os.path.normpath(guest)
        if guest in _GUEST_RESERVED or guest in seen:
            raise ValueError(f"{where}.guest {guest} is already taken")
        seen.add(guest)
        tools.append(ToolSpec(pkg, binary, guest))
    return tools


def load_recipe(name: str = "default") -> Recipe:
    d = recipe_dir(name)
    f = d / "recipe.json"
    try:
        raw = json.loads(f.read_text())
    except FileNotFoundError as e:
        raise ImageError(f"image recipe {name!r} not found", f"no {f}",
                         "use an image name that has a directory in images/",
                         exc=e) from e
    except json.JSONDecodeError as e:
        raise ImageError(f"image recipe {f} is not valid JSON", str(e),
                         "fix the file", exc=e) from e
    try:
        recipe = Recipe(
            name=name, directory=d,
            kernel_package=raw["kernel"]["package"],
            busybox_package=raw["busybox"]["package"],
            perf_package=raw["perf"]["package"],
            perf_binary=raw["perf"].get("binary", "/usr/bin/perf"),
            modules=list(raw["modules"]),
            init=d / raw.get("init", "init"),
            overlay=(d / raw["overlay"]) if raw.get("overlay") else None,
            tools=parse_tools(raw.get("tools")))
    except (KeyError, TypeError) as e:
        raise ImageError(f"image recipe {f} is incomplete",
                         f"missing or malformed key {e}",
                         "see images/README.md for the recipe keys",
                         exc=e) from e
    except ValueError as e:
        raise ImageError(f"image recipe {f} is malformed", str(e),
                         "see images/README.md for the recipe keys",
                         exc=e) from e
    if not recipe.init.is_file():
        raise ImageError(f"image recipe {name!r} has no init script",
                         f"{recipe.init} does not exist", "restore it from git")
    return recipe

