"""Programs of an architecture the host cannot run: the guest's perf,
tools and busybox applets from that architecture's Debian packages.

The host's own architecture copies the host's installed perf and asks
``ldd`` for its libraries (host.py), and lists busybox's applets by
running it (root.py).  Neither works for another architecture's
binaries, so here:

  * perf and the recipe's tools come from the .debs of their packages'
    dependency closure (``userland``, resolved by apt for the guest's
    architecture), unpacked into a staging tree;
  * their libraries are the DT_NEEDED closure (and PT_INTERP, the
    dynamic loader) searched the way the guest's loader searches: the
    directories of the tree's own ``/etc/ld.so.conf.d`` (libc6 ships
    them), then /lib and /usr/lib; RUNPATH first;
  * busybox's applet names are read from the binary's own table
    (``applet_names``: NUL-separated, sorted, starting "[", "[["), and
    every link goes into /bin, which /init's PATH holds.
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from ..elf import open_elf
from ..errors import ImageError

_APPLET_TABLE_START = b"[\0[[\0"
_APPLET_NAME = re.compile(r"[a-z0-9_.\[\]-]+")
DEFAULT_LIBRARY_DIRS = ("/lib", "/usr/lib")


def busybox_applets(binary: bytes) -> list[str]:
    """Applet names from a busybox binary's ``applet_names`` table,
    without running it; ValueError if the table is not found whole."""
    start = binary.find(_APPLET_TABLE_START)
    if start < 0:
        raise ValueError("no applet table ([ and [[) in the busybox binary")
    names, pos = [], start
    while True:
        end = binary.index(b"\0", pos)
        if end == pos:
            break
        names.append(binary[pos:end].decode("ascii", "replace"))
        pos = end + 1
    if names != sorted(names) or not all(_APPLET_NAME.fullmatch(n)
                                         for n in names) or "sh" not in names:
        raise ValueError("the busybox applet table is not a sorted list "
                         "of names with sh in it")
    return names


_MERGED = ("/bin/", "/sbin/", "/lib/", "/lib32/", "/lib64/")


def resolve_in_tree(tree: Path, guest: str, depth: int = 0) -> Path | None:
    """The file guest path ``guest`` names inside ``tree``, following
    symlinks (absolute ones relative to ``tree``); None if absent.  A
    /usr-merged release (trixie) ships /lib/X as /usr/lib/X and the
    /lib -> usr/lib link in a package outside the closure: the /usr
    twin stands in."""
    found = _resolve(tree, guest, depth)
    if found is None and guest.startswith(_MERGED):
        found = _resolve(tree, "/usr" + guest, depth)
    return found


def _resolve(tree: Path, guest: str, depth: int) -> Path | None:
    if depth > 40:
        return None
    parts = [p for p in guest.split("/") if p]
    cur = "/"
    for i, part in enumerate(parts):
        nxt = os.path.join(cur, part)
        host = tree / nxt.lstrip("/")
        if host.is_symlink():
            target = os.readlink(host)
            target = target if target.startswith("/") else \
                os.path.normpath(os.path.join(cur, target))
            rest = "/".join(parts[i + 1:])
            return resolve_in_tree(tree, os.path.join(target, rest)
                                   if rest else target, depth + 1)
        cur = nxt
    path = tree / cur.lstrip("/")
    return path if path.exists() else None


def library_dirs(tree: Path) -> list[str]:
    """The loader's search directories from the tree's ld.so.conf.d."""
    dirs: list[str] = []
    for conf in sorted((tree / "etc" / "ld.so.conf.d").glob("*.conf")):
        for line in conf.read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line.startswith("/") and line not in dirs:
                dirs.append(line)
    return dirs + [d for d in DEFAULT_LIBRARY_DIRS if d not in dirs]


def dynamic_needs(data: bytes) -> tuple[list[str], list[str], str | None]:
    """(DT_NEEDED names, RUNPATH/RPATH directories, PT_INTERP) of an ELF."""
    elf = open_elf(data)
    needed, runpath, interp = [], [], None
    for seg in elf.iter_segments():
        if seg["p_type"] == "PT_INTERP":
            interp = seg.get_interp_name()
        elif seg["p_type"] == "PT_DYNAMIC":
            for tag in seg.iter_tags():
                if tag.entry.d_tag == "DT_NEEDED":
                    needed.append(tag.needed)
                elif tag.entry.d_tag == "DT_RUNPATH":
                    runpath += tag.runpath.split(":")
                elif tag.entry.d_tag == "DT_RPATH":
                    runpath += tag.rpath.split(":")
    return needed, runpath, interp


def library_closure(tree: Path, programs: list[str]
                    ) -> list[tuple[str, Path]]:
    """(guest path, file in ``tree``) of every library and loader the
    guest programs (paths in ``tree``) need, each once.  ImageError
    naming a library the tree lacks."""
    dirs = library_dirs(tree)
    out: dict[str, Path] = {}
    todo = list(programs)
    seen: set[str] = set()
    loaders: dict[str, str] = {}
    while todo:
        guest = todo.pop(0)
        if guest in seen:
            continue
        seen.add(guest)
        real = resolve_in_tree(tree, guest)
        if real is None:
            raise ImageError("cannot collect the guest's programs",
                             f"{guest} is not in the unpacked packages",
                             "check the recipe's perf and tools entries")
        needed, runpath, interp = dynamic_needs(real.read_bytes())
        if interp:
            loaders[os.path.basename(interp)] = interp
        origin = os.path.dirname(guest)
        search = [d.replace("$ORIGIN", origin) for d in runpath] + dirs
        # A library that needs the dynamic loader by name (libc does) gets
        # the loaded one, wherever it lies: its soname is already loaded.
        wanted = ([interp] if interp else []) + [
            loaders.get(name) or _find_library(tree, name, search, guest)
            for name in needed]
        for lib in wanted:
            if lib not in out:
                out[lib] = resolve_in_tree(tree, lib)
                todo.append(lib)
    return [(g, f) for g, f in out.items() if g not in programs]


def _find_library(tree: Path, name: str, search: list[str],
                  needed_by: str) -> str:
    for d in search:
        cand = os.path.join(d, name)
        if resolve_in_tree(tree, cand) is not None:
            return cand
    raise ImageError("cannot collect the guest's programs",
                     f"{needed_by} needs {name}, which no unpacked package "
                     f"has in {', '.join(search)}",
                     "report a bug: the package's dependencies lack it")


def install_programs(root: Path, tree: Path,
                     programs: list[tuple[str, Path]]) -> int:
    """Copy ``programs`` ((guest path, path inside ``tree``)) and their
    library closure from ``tree`` into ``root``; a library the image's
    packages already put there (or at its /usr twin) is kept, the twin
    linked from the path asked for: a /usr-merged libc6 (trixie's) puts
    the loader in /usr/lib only, and PT_INTERP names /lib.  Returns the
    number of libraries copied."""
    sources = []
    for guest, inside in programs:
        real = resolve_in_tree(tree, str(inside))
        if real is None:
            raise ImageError("cannot collect the guest's programs",
                             f"{inside} is not in the unpacked packages",
                             "check the recipe's perf and tools entries")
        _copy(real, root / guest.lstrip("/"))
        sources.append(str(inside))
    copied = 0
    for guest, real in library_closure(tree, sources):
        rel = guest.lstrip("/")
        twin = rel[4:] if rel.startswith("usr/") else "usr/" + rel
        if (root / rel).exists():
            continue
        if (root / twin).exists():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            os.symlink("/" + twin, root / rel)
        else:
            _copy(real, root / rel)
            copied += 1
    return copied


def _copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.is_symlink():
        dst.unlink()
    shutil.copyfile(src, dst)
    os.chmod(dst, 0o755)
