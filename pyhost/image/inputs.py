"""The image's inputs and their hash: what decides whether to rebuild.

Inputs (all of them go into the input hash; any change rebuilds):

    * the kernel package that the recipe's kernel metapackage depends on
      and its candidate version, and the candidate version of
      busybox-static, as the local apt lists resolve them (``apt-cache``;
      no network);
    * the installed ``linux-perf`` version and the size/mtime of the perf
      binary and of every library ``ldd`` lists for it;
    * likewise for each recipe ``tools`` entry: the installed version of
      its package, the size/mtime of its binary (symlinks resolved) and of
      every library ``ldd`` lists for it, and its guest path;
    * for an architecture the host cannot run (foreign.py), instead of
      those two: every .deb of the closure of perf's and the tools'
      packages, as that architecture's apt resolves them (aptdir.py);
    * the guest's architecture;
    * the recipe's ``packages`` and every .deb (file name: package,
      version, architecture) of their dependency closure (packages.py);
    * every file of the recipe directory ``images/<name>/``;
    * the SHA-256 of the guest PMU driver ``pvperf.ko`` (if any);
    * the SHA-256 of the builder's sources (this package, the names it
      shares with /init: guest_contract.py, and what it takes from the
      architecture: arch/, elf.py).

``base_hash`` leaves the driver out: when only the driver changed, the
cached kernel, System.map and tree are reused.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from .. import arch, elf, guest_contract
from ..arch import Arch
from ..digest import sha256_file
from ..errors import ImageError
from ..paths import driver_ko_paths
from . import apt, aptdir, host, maintainer, packages
from .aptdir import AptContext
from .host import Tool
from .kernel import read_modinfo
from .memo import stat_key
from .recipe import Recipe, load_recipe

#: Version of the image layout, recorded in the manifest and the hash.
IMAGE_FORMAT = 1
#: build_image's and image_status's default driver: driver_ko_paths' if built.
DEFAULT_DRIVER = object()


def builder_hash() -> str:
    """SHA-256 over the builder's sources: every module of this package,
    the guest contract (where the tree puts what /init looks for) and the
    architecture's description (the boot kernel, the console node)."""
    h = hashlib.sha256()
    sources = sorted(Path(__file__).parent.glob("*.py")) + \
        sorted(Path(arch.__file__).parent.glob("*.py")) + \
        [Path(guest_contract.__file__), Path(elf.__file__)]
    for p in sources:
        h.update(p.name.encode() + b"\0" + sha256_file(p).encode())
    return h.hexdigest()


def _hash_tree(d: Path) -> dict[str, str]:
    """relative path -> sha256 (symlinks hash their target)."""
    out = {}
    for p in sorted(Path(d).rglob("*")):
        rel = p.relative_to(d).as_posix()
        if "__pycache__" in rel or rel.endswith("~"):
            continue
        if p.is_symlink():
            out[rel] = "link:" + os.readlink(p)
        elif p.is_file():
            out[rel] = sha256_file(p) + (":x" if os.access(p, os.X_OK) else "")
    return out


def input_hash(inputs: dict) -> str:
    """Canonical SHA-256 of the inputs dictionary."""
    blob = json.dumps(inputs, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclass
class Inputs:
    recipe: Recipe
    kernel_package: str
    versions: dict[str, str]             # package -> version
    perf_binary: Path
    perf_libs: list[tuple[str, Path]]
    driver_ko: Path | None
    driver_bytes: bytes | None
    data: dict
    tools: list[Tool] = field(default_factory=list)
    debs: list[packages.Deb] = field(default_factory=list)
    arch: Arch = field(default_factory=arch.host)
    apt: AptContext | None = None
    # the .debs perf and the tools come from, when the host cannot run
    # the guest's programs (foreign.py); empty: from the host
    userland: list[packages.Deb] = field(default_factory=list)

    def programs(self) -> list[tuple[str, Path]]:
        """(guest path, host file) of perf and of every tool."""
        return [("/usr/bin/perf", self.perf_binary)] + [
            (t.spec.guest, t.host) for t in self.tools]

    def libraries(self) -> list[tuple[str, Path]]:
        """(guest path, host file) of every shared library of perf and the
        tools, each guest path once (first one wins)."""
        out: dict[str, Path] = {}
        for guest, lib in self.perf_libs + [x for t in self.tools
                                            for x in t.libs]:
            out.setdefault(guest, lib)
        return list(out.items())

    @property
    def hash(self) -> str:
        return input_hash(self.data)

    @property
    def base_hash(self) -> str:
        """The hash of everything but the driver: when only the driver
        changed, the kernel, System.map and the rest of the tree are reused."""
        return input_hash({k: v for k, v in self.data.items() if k != "driver"})


def _host_userland(recipe: Recipe, versions: dict[str, str]):
    """perf and the tools from the host's installed packages, with the
    libraries ldd lists: (perf, its libs, tools, host files' stat keys)."""
    perf, perf_version = host.find_perf_binary(recipe)
    versions[recipe.perf_package] = perf_version
    libs = host.ldd_libraries(perf)
    host_files = {str(perf): stat_key(perf)}
    for _guest, lib in libs:
        host_files[str(lib)] = stat_key(lib)
    tools = []
    for spec in recipe.tools:
        binary, version = host.find_tool(spec)
        tool = Tool(spec, binary, version, host.ldd_libraries(binary))
        tools.append(tool)
        versions[spec.package] = version
        for f in [binary] + [h for _g, h in tool.libs]:
            host_files[str(f)] = stat_key(f)
    return perf, libs, tools, host_files


def _deb_userland(recipe: Recipe, versions: dict[str, str],
                  ctx: AptContext) -> tuple[list[Tool], list[packages.Deb]]:
    """perf and the tools from the guest architecture's packages: their
    dependency closure (the library closure is taken at build time from
    the unpacked .debs, foreign.py); the binaries' paths are inside them."""
    wanted = [recipe.perf_package] + [t.package for t in recipe.tools]
    # perf of its release (apt's PKG/RELEASE), its dependencies as apt
    # picks them for it
    asked = [f"{p}/{recipe.perf_release}"
             if p == recipe.perf_package and recipe.perf_release else p
             for p in dict.fromkeys(wanted)]
    userland = packages.resolve(asked, ctx)
    have = {d.name: d.version for d in userland}
    versions.update({p: have[p] for p in wanted if p in have})
    tools = [Tool(spec, Path(spec.binary), have.get(spec.package, ""), [])
             for spec in recipe.tools]
    return tools, userland


def gather_inputs(name: str, driver_ko) -> Inputs:
    """The inputs of image ``name``; ``driver_ko`` a path, None, or
    DEFAULT_DRIVER (the one built for the image's kernel, if any)."""
    recipe = load_recipe(name)
    guest_arch = arch.get(recipe.arch)
    ctx = aptdir.for_recipe(recipe)
    kpkg, versions = apt.resolve_packages(recipe.kernel_package,
                                          [recipe.busybox_package], ctx,
                                          recipe.kernel_release)
    driver_ko = _default_driver(driver_ko, guest_arch,
                                kpkg.removeprefix("linux-image-"))
    userland: list[packages.Deb] = []
    if not recipe.userland_from_debs():
        perf, libs, tools, host_files = _host_userland(recipe, versions)
    else:
        tools, userland = _deb_userland(recipe, versions, ctx)
        perf, libs, host_files = Path(recipe.perf_binary), [], {}
    # An installed Debian has its Essential packages (ldconfig: the
    # libraries' trigger runs it; maintainer.py).
    debs = packages.resolve(recipe.packages + [
        p for p in maintainer.ESSENTIAL if recipe.packages
        and p not in recipe.packages], ctx)
    driver_bytes = None
    if driver_ko is not None:
        driver_ko = Path(driver_ko).resolve()
        try:       # read once: what is hashed is exactly what is installed
            driver_bytes = driver_ko.read_bytes()
        except OSError as e:
            raise ImageError("cannot add the guest PMU driver",
                             f"{driver_ko}: {e.strerror}",
                             "build it first (make -C guest_kernel_patch) or "
                             "build without it (--no-driver)", exc=e) from e
    data = {
        "format": IMAGE_FORMAT,
        "builder": builder_hash(),
        "recipe": _hash_tree(recipe.directory),
        # a recipe may take them from another recipe's directory
        "init": sha256_file(recipe.init),
        "overlay": _hash_tree(recipe.overlay) if recipe.overlay else None,
        "packages": {p: versions[p] for p in sorted(versions)},
        "kernel_package": kpkg,
        "host_files": host_files,
        "tools": {t.spec.guest: str(t.host) for t in tools},
        "add": recipe.packages,
        "debs": sorted(d.filename for d in debs),
        "driver": (hashlib.sha256(driver_bytes).hexdigest()
                   if driver_bytes is not None else None),
        "arch": guest_arch.name,
        "userland": sorted(d.filename for d in userland),
    }
    return Inputs(recipe, kpkg, versions, perf, libs, driver_ko,
                  driver_bytes, data, tools, debs, guest_arch, ctx, userland)


def _elf_machine(path: Path) -> str | None:
    try:
        return elf.open_elf(path.read_bytes()).header["e_machine"]
    except (OSError, ValueError):
        return None


def _vermagic_release(path: Path) -> str | None:
    """The kernel release a module was built for (vermagic's first word)."""
    try:
        magic = read_modinfo(path.read_bytes()).get("vermagic", [""])[0]
    except (OSError, ValueError):
        return None
    return magic.split()[0] if magic.split() else None


def _default_driver(driver_ko, guest_arch: Arch,
                    kernel_release: str) -> Path | None:
    """The driver to install: the one given, or by default the one
    guest_kernel_patch/ built for the guest's architecture and kernel
    (its vermagic's release is ``kernel_release``: 6.1's next to the
    sources, 6.12's in linux-6.12/, ...); none if it built none."""
    if driver_ko is DEFAULT_DRIVER:
        for path in driver_ko_paths(guest_arch.debian_arch):
            if path.is_file() and \
                    _elf_machine(path) == guest_arch.elf_machine and \
                    _vermagic_release(path) == kernel_release:
                return path
        return None
    if driver_ko is None:
        return None
    driver_ko = Path(driver_ko)
    machine = _elf_machine(driver_ko)
    if machine is not None and machine != guest_arch.elf_machine:
        raise ImageError("cannot add the guest PMU driver",
                         f"{driver_ko} is built for {machine}, the image is "
                         f"{guest_arch.name}",
                         "give a driver built for the image's architecture, "
                         "or build without it (--no-driver)")
    return driver_ko


def stale_driver(guest_arch: Arch, kernel_release: str) -> str | None:
    """Why the image gets no default driver although one is built for its
    architecture: "PATH is built for RELEASE" (the kernel package moved
    on since `make -C guest_kernel_patch` ran: the archive published a
    new ABI), else None."""
    for path in driver_ko_paths(guest_arch.debian_arch):
        if path.is_file() and _elf_machine(path) == guest_arch.elf_machine:
            built = _vermagic_release(path)
            # the same kernel series (6.1 and 6.1, not linux-6.12's
            # driver for the default image's 6.1)
            if built and built != kernel_release and \
                    built.split(".")[:2] == kernel_release.split(".")[:2]:
                return f"{path} is built for {built}"
    return None


def gather(name: str, driver_ko) -> Inputs:
    """gather_inputs; the default driver may vanish while
    guest_kernel_patch/ is being rebuilt: then build without it."""
    try:
        return gather_inputs(name, driver_ko)
    except ImageError as e:
        if driver_ko is DEFAULT_DRIVER and "PMU driver" in e.what:
            return gather_inputs(name, None)
        raise

