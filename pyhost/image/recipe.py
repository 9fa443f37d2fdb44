"""The image recipe: ``images/<name>/recipe.json`` (keys: images/README.md),
or a saved derived recipe: ``pvperf image build --name NAME --add PKG,...``
writes ``<cache>/recipes/NAME.json`` (``{"base": RECIPE, "add": [PKG,
...]}``): the base recipe plus those Debian packages (packages.py)."""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from .. import arch as arches
from ..errors import ImageError, SetupError
from .store import recipe_dir, recipe_name, user_recipe_path  # noqa: F401

#: Debian package names (policy 5.6.1): lower case, digits, + - . ; two
#: characters at least, starting alphanumeric.  Also keeps an option
#: (``-o...``) from ever reaching apt-get's command line.
PACKAGE_RE = re.compile(r"[a-z0-9][a-z0-9+.-]+")
#: apt release names (``bookworm-backports``): what ``-t`` and
#: APT::Default-Release take.
RELEASE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+~_-]{0,63}")
#: Image names: a file name, no path.
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")

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
    #: Debian packages installed from their .debs with their dependencies
    packages: list[str] = field(default_factory=list)
    #: the recipe in images/ a saved derived recipe is based on, else None
    base: str | None = None
    #: the guest's architecture (an Arch name; recipe key ``arch``,
    #: default: the host's)
    arch: str = field(default_factory=lambda: arches.host().name)
    #: the apt release the kernel package is taken from (``kernel.release``,
    #: e.g. bookworm-backports); None: apt's candidate
    kernel_release: str | None = None
    #: the apt release perf comes from (``perf.release``): then perf and
    #: the tools come from their .debs, not from the host's installed
    #: packages (the host keeps its own perf); None: the host's
    perf_release: str | None = None
    #: the Debian suite every package comes from (recipe key ``suite``,
    #: e.g. trixie for an architecture the host's release lacks): a
    #: private apt directory with the host's sources retargeted to it
    #: (aptdir.py); None: the host's release
    suite: str | None = None
    #: packages taken from another suite than ``suite`` when the image
    #: installs them (recipe key ``package_suites``: {PKG: SUITE}, e.g.
    #: a package only the unstable suite has for a port): that suite's
    #: sources join the image's apt context, pinned to it (aptdir.py);
    #: its dependencies come from ``suite`` where they fit
    package_suites: dict[str, str] = field(default_factory=dict)

    def userland_from_debs(self) -> bool:
        """Do perf and the tools come from .debs (foreign.py), not from
        the host's installed packages?"""
        return self.perf_release is not None or \
            not arches.get(self.arch).runs_on_host()


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


def parse_packages(raw) -> list[str]:
    """The recipe's ``packages`` list (Debian package names, each once, in
    the order given).  Raises ValueError on a malformed entry."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ValueError("'packages' must be a list of package names")
    out: list[str] = []
    for name in raw:
        if not isinstance(name, str) or not PACKAGE_RE.fullmatch(name):
            raise ValueError(f"{name!r} is not a Debian "
                             "package name")
        if name not in out:
            out.append(name)
    return out


def parse_release(raw) -> str | None:
    """A recipe's ``release`` value (an apt release name) or None."""
    if raw is None:
        return None
    if not isinstance(raw, str) or not RELEASE_RE.fullmatch(raw):
        raise ValueError(f"release {raw!r} is not an apt release name")
    return raw


def parse_package_suites(raw) -> dict[str, str]:
    """The recipe's ``package_suites`` ({package: suite}).  Raises
    ValueError on a malformed entry."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValueError("'package_suites' must map package names to suites")
    for pkg, suite in raw.items():
        parse_packages([pkg])
        if parse_release(suite) is None:
            raise ValueError(f"package_suites[{pkg!r}] must name a suite")
    return dict(raw)


def check_image_name(name: str) -> str:
    """``name`` if it can name an image; ValueError otherwise."""
    if not NAME_RE.fullmatch(name):
        raise ValueError(f"{name!r} is not an image name (letters, digits, "
                         "'.', '_', '-'; at most 64)")
    return name


def image_exists(name: str) -> bool:
    """Is there a recipe for ``name`` (images/ or a saved derived one)?"""
    return NAME_RE.fullmatch(name) is not None and (
        (recipe_dir(name) / "recipe.json").is_file()
        or user_recipe_path(name).is_file())


def save_derived_recipe(name: str, base: str, packages: list[str]) -> Path:
    """Write the derived recipe ``name`` = ``base`` + ``packages``."""
    check_image_name(name)
    if (recipe_dir(name) / "recipe.json").is_file():
        raise ValueError(f"{name} is a recipe in images/: choose another name")
    f = user_recipe_path(name)
    f.parent.mkdir(parents=True, exist_ok=True)
    tmp = f.with_name(f"{f.name}.{os.getpid()}")
    tmp.write_text(json.dumps({"base": base,
                               "add": parse_packages(packages)}) + "\n")
    os.replace(tmp, f)
    return f


def load_recipe(name: str = "default") -> Recipe:
    name = recipe_name(name)
    if not (recipe_dir(name) / "recipe.json").is_file() \
            and user_recipe_path(name).is_file():
        return _load_derived(name)
    return _load_base(name)


def _load_derived(name: str) -> Recipe:
    f = user_recipe_path(name)
    try:
        raw = json.loads(f.read_text())
        base, add = raw["base"], parse_packages(raw["add"])
        if not isinstance(base, str) or not NAME_RE.fullmatch(base):
            raise ValueError(f"base {base!r} is not a recipe name")
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ImageError(f"image {name!r} cannot be loaded",
                         f"{f}: {e!r}", "build it again: pvperf image build "
                         f"--name {name} --add PKG,...", exc=e) from e
    recipe = _load_base(base)
    recipe.name, recipe.base = name, base
    recipe.packages = recipe.packages + [p for p in add
                                         if p not in recipe.packages]
    return recipe


def _load_base(name: str) -> Recipe:
    d = recipe_dir(name)
    f = d / "recipe.json"
    try:
        raw = json.loads(f.read_text())
    except FileNotFoundError as e:
        raise ImageError(f"image recipe {name!r} not found", f"no {f}",
                         "use an image name that has a directory in images/"
                         ", or build one: pvperf image build --name "
                         f"{name} --add PKG,...",
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
            tools=parse_tools(raw.get("tools")),
            packages=parse_packages(raw.get("packages")),
            arch=raw.get("arch") or arches.host().name,
            kernel_release=parse_release(raw["kernel"].get("release")),
            perf_release=parse_release(raw["perf"].get("release")),
            suite=parse_release(raw.get("suite")),
            package_suites=parse_package_suites(raw.get("package_suites")))
        arches.get(recipe.arch)
    except (KeyError, TypeError) as e:
        raise ImageError(f"image recipe {f} is incomplete",
                         f"missing or malformed key {e}",
                         "see images/README.md for the recipe keys",
                         exc=e) from e
    except (ValueError, SetupError) as e:
        raise ImageError(f"image recipe {f} is malformed", str(e),
                         "see images/README.md for the recipe keys",
                         exc=e) from e
    if not recipe.init.is_file():
        raise ImageError(f"image recipe {name!r} has no init script",
                         f"{recipe.init} does not exist", "restore it from git")
    return recipe

