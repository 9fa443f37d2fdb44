"""The guest root tree: modules, busybox, perf and tools, /init, the
recipe's overlay and the PMU driver (everything the initramfs holds).
"""
from __future__ import annotations

import json
import lzma
import os
import shutil
import stat
import zlib
from pathlib import Path
from typing import Callable, Sequence

from .. import guest_contract as guest
from ..errors import ImageError
from ..guest_contract import in_root
from . import foreign, maintainer, packages
from .host import run
from .inputs import Inputs
from .modules import ModuleDB, modname, read_module, uncompressed

# In the root tree: where /init finds them (guest_contract.py).
GUEST_DRIVER_PATH = in_root(guest.DRIVER_PATH)
GUEST_MODULE_LIST = in_root(guest.MODULE_LIST)


def _busybox_applets(busybox: Path, runs_here: bool) -> list[str]:
    """Applet paths (relative, e.g. 'bin/sh') from ``busybox --list-full``
    when the host can run the guest's busybox; else the names in the
    binary's applet table, all in bin/ (foreign.py)."""
    if runs_here:
        out = run([str(busybox), "--list-full"],
                  "cannot list busybox applets",
                  "delete the busybox-static .deb from the cache and retry")
        applets = [a.strip() for a in out.stdout.splitlines() if a.strip()]
    else:
        try:
            applets = ["bin/" + n for n in
                       foreign.busybox_applets(busybox.read_bytes())]
        except ValueError as e:
            raise ImageError("cannot list busybox applets", str(e),
                             "check the recipe's busybox package") from e
    # /init is ours; busybox's init/linuxrc applets must not shadow it.
    return [a for a in applets if modname(a) not in ("init", "linuxrc")]


def _install(src: Path, dst: Path, mode: int | None = None) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.is_symlink():             # never write through an applet link
        dst.unlink()
    shutil.copyfile(src, dst)
    os.chmod(dst, mode if mode is not None else
             stat.S_IMODE(os.stat(src).st_mode))


def populate_root(root: Path, inputs: Inputs, kdir: Path, kver: str,
                   busybox_dir: Path, report: Callable[[int, str], None],
                   debs: Sequence[Path] = (),
                   userland: Path | None = None) -> list[str]:
    """Fill the guest root tree; returns the module load order.

    ``debs`` (the recipe's packages and their dependencies) are unpacked
    first: their programs win over busybox applets of the same name (but
    /bin/sh stays busybox's: /init is written for it), and perf, the
    recipe's tools, /init, the overlay and the driver go in last.
    ``userland``: the unpacked packages perf and the tools come from when
    the host cannot run them (foreign.py); None: from the host."""
    recipe = inputs.recipe
    for d in ("bin", "sbin", "usr/bin", "usr/sbin", "lib", "lib64", "etc",
              "etc/pvperf", "proc", "sys", "dev", "tmp", "run", "root",
              in_root(guest.SHARE_MOUNT), f"lib/modules/{kver}"):
        (root / d).mkdir(parents=True, exist_ok=True)
    os.chmod(root / "tmp", 0o1777)
    os.chmod(root / "root", 0o700)

    # kernel modules
    moddir = kdir / "lib" / "modules" / kver
    db = ModuleDB.from_tree(moddir)
    try:
        order = db.load_order(recipe.modules)
    except KeyError as e:
        raise ImageError("cannot collect kernel modules",
                         f"module {e.args[0]} is neither in {kver} nor built in",
                         f"fix the module list in {recipe.directory}/recipe.json"
                         ) from e
    report(5, f"collecting {len(order)} kernel modules: {' '.join(order)}")
    gmod = root / "lib" / "modules" / kver
    # Decompressed (Debian's 6.12 ships .ko.xz; busybox's insmod reads
    # plain ELF, and an initramfs is not worth compressing twice).
    for name in order:
        try:
            data = read_module(moddir / db.paths[name])
        except (ValueError, OSError, lzma.LZMAError, zlib.error) as e:
            raise ImageError("cannot collect kernel modules", str(e),
                             "use a kernel with plain, xz or gzip modules"
                             ) from e
        dst = gmod / uncompressed(db.paths[name])
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(data)
        os.chmod(dst, 0o644)
    (gmod / "modules.dep").write_text(db.modules_dep_text(order,
                                                          uncompressed))
    (gmod / "modules.order").write_text(
        "".join(uncompressed(db.paths[n]) + "\n" for n in order))
    for f in ("modules.builtin", "modules.builtin.modinfo"):
        if (moddir / f).exists():
            _install(moddir / f, gmod / f, 0o644)
    (root / GUEST_MODULE_LIST).write_text(
        "".join(f"/lib/modules/{kver}/{uncompressed(db.paths[n])}\n"
                for n in order))

    if debs:
        report(6, f"unpacking {len(debs)} Debian packages")
        packages.unpack(list(debs), root)
        alts = [a for deb in debs
                for a in maintainer.parse_alternatives(maintainer.postinst(deb))]
        done = maintainer.install_alternatives(root, alts)
        if done:
            report(6, f"alternatives: {', '.join(done)}")

    # busybox and its applets
    names = ", ".join(["perf"] + [os.path.basename(t.spec.guest)
                                  for t in inputs.tools])
    libs = (f"{len(inputs.libraries())} shared libraries" if userland is None
            else "their libraries (DT_NEEDED closure)")
    report(6, f"collecting busybox, {names} and {libs}")
    # /usr/bin in a /usr-merged release's package (trixie)
    bb_src = next((p for p in (busybox_dir / "bin" / "busybox",
                               busybox_dir / "usr" / "bin" / "busybox")
                   if p.is_file()), busybox_dir / "bin" / "busybox")
    if not bb_src.is_file():
        raise ImageError("cannot install busybox",
                         f"{recipe.busybox_package} has no /bin/busybox",
                         "check the recipe's busybox package")
    install_busybox(root, bb_src, inputs.arch.runs_on_host())
    if userland is None:
        install_programs(root, inputs)
    else:
        foreign.install_programs(root, userland, inputs.programs())

    # /init, recipe overlay, identification
    _install(recipe.init, root / "init", 0o755)
    if recipe.overlay and recipe.overlay.is_dir():
        for src in sorted(recipe.overlay.rglob("*")):
            rel = src.relative_to(recipe.overlay)
            if src.is_dir():
                (root / rel).mkdir(parents=True, exist_ok=True)
            else:
                _install(src, root / rel)

    install_driver(root, inputs)
    return order


def install_busybox(root: Path, bb_src: Path, runs_here: bool = True
                    ) -> None:
    """/bin/busybox and a link per applet where the image's packages put
    no program of that name; /bin/sh is busybox's whatever the packages
    brought (/init is written for it)."""
    _install(bb_src, root / "bin" / "busybox", 0o755)
    for applet in _busybox_applets(bb_src, runs_here):
        link = root / applet
        if link.exists() or link.is_symlink():
            continue
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath("/bin/busybox", "/" + str(Path(applet).parent)),
                   link)
    sh = root / "bin" / "sh"
    if os.path.realpath(sh) != os.path.realpath(root / "bin" / "busybox"):
        sh.unlink(missing_ok=True)       # a package's shell (dash, bash)
        os.symlink("busybox", sh)


def install_programs(root: Path, inputs: Inputs) -> None:
    """perf and the recipe's tools (over any busybox applet of the same
    name), their libraries and the dynamic loader at the paths ldd
    printed, unless the image's packages already brought that library,
    at that path or its /usr twin (the host is /usr-merged, so ldd's
    /lib/<triplet> may be the package's /usr/lib/<triplet>;
    one copy, the package's, keeps e.g. libssl and libcrypto of one
    version)."""
    for guest, host in inputs.programs():
        _install(host, root / guest.lstrip("/"), 0o755)
    for guest, host in inputs.libraries():
        rel = guest.lstrip("/")
        twin = rel[4:] if rel.startswith("usr/") else "usr/" + rel
        if not (root / rel).exists() and not (root / twin).exists():
            _install(host, root / rel, 0o755)


def install_driver(root: Path, inputs: Inputs) -> None:
    """Put (or remove) the guest PMU driver."""
    ko = root / GUEST_DRIVER_PATH
    if ko.exists():
        ko.unlink()
    if ko.parent.is_dir() and not any(ko.parent.iterdir()):
        ko.parent.rmdir()
    if inputs.driver_bytes is not None:
        ko.parent.mkdir(parents=True, exist_ok=True)
        ko.write_bytes(inputs.driver_bytes)


def write_image_json(root: Path, inputs: Inputs, kver: str) -> None:
    (root / "etc/pvperf").mkdir(parents=True, exist_ok=True)
    (root / "etc/pvperf/image.json").write_text(json.dumps(
        {"name": inputs.recipe.name, "kernel_version": kver,
         "input_hash": inputs.hash,
         "driver": inputs.data["driver"]}, indent=1) + "\n")

