"""Build the bootable pvperf guest image from Debian bookworm packages.

An image is four artifacts plus a manifest, cached under
``${XDG_CACHE_HOME:-~/.cache}/pvperf/images/<name>/``:

    vmlinux          the ELF kernel, booted through its PVH entry point
                     (``qemu-system-x86_64 -kernel vmlinux``); extracted from
                     the bzImage of the Debian kernel package because the
                     bzImage's own XZ decompressor is slow under TCG
    initramfs.cpio   an UNCOMPRESSED newc archive (no decompression at boot):
                     busybox, the host's Debian ``perf`` with its shared
                     libraries, the recipe's extra host tools (``objdump``
                     for ``perf annotate``) with theirs, the virtio/9p/
                     fw_cfg modules, /init, and the guest PMU driver when
                     one is given
    System.map       the core-kernel lines of /proc/kallsyms, read in a
                     test boot of the new image (Debian's package ships a
                     placeholder; the real one is in the ~860 MB -dbg deb)
    root/            the unpacked initramfs tree, kept so that host-side
                     symbolizers can read the guest's binaries
    manifest.json    kernel version, package versions, input hash, build time

Inputs (all of them go into the input hash; any change rebuilds):

    * the kernel package that ``linux-image-amd64`` depends on and its
      candidate version, and the candidate version of busybox-static, as
      the local apt lists resolve them (``apt-cache``; no network);
    * the installed ``linux-perf`` version and the size/mtime of the perf
      binary and of every library ``ldd`` lists for it;
    * likewise for each recipe ``tools`` entry: the installed version of
      its package, the size/mtime of its binary (symlinks resolved) and of
      every library ``ldd`` lists for it, and its guest path;
    * every file of the recipe directory ``images/<name>/``;
    * the SHA-256 of the guest PMU driver ``pvperf.ko`` (if any);
    * the SHA-256 of this source file.

Debian packages are fetched with ``apt-get download`` into
``<cache>/debs/`` (verified against the SHA-256 that apt lists) and
unpacked with ``dpkg -x``; nothing is installed on the host.  A build runs
in a temporary directory inside ``<cache>/images/`` and is renamed into
place at the end, so an interrupted build never leaves a half image.  When
only the driver changed, the cached tree is reused and just the .ko and
the cpio are rewritten (~0.3 s instead of ~10 s).

The pure pieces (newc writer/reader, bzImage extractor, ELF note and
``.modinfo`` readers, module dependency resolution, the input hash) have
no side effects and are unit-tested in tests/test_image.py.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import fcntl
import hashlib
import json
import lzma
import os
import re
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator

try:  # the project's exception root; the builder also works stand-alone
    from .errors import ImageError
except ImportError:  # pragma: no cover - only when run outside the package
    class ImageError(Exception):  # type: ignore[no-redef]
        """Building or finding the guest image failed."""

        def __init__(self, what: str, cause: str = "", hint: str = "",
                     exc: BaseException | None = None, details: str = ""):
            self.what, self.cause, self.hint = what, cause, hint
            self.exc, self.details = exc, details
            text = what + (f": {cause}" if cause else "")
            text += f" \u2014 {hint}" if hint else ""
            super().__init__(text)

__all__ = [
    "GuestImage", "ImageError", "build_image", "image_status", "cache_dir",
    "image_dir", "recipe_dir", "CpioWriter", "read_newc", "extract_vmlinux",
    "pvh_entry", "read_modinfo", "ModuleDB",
]

#: Version of the image layout, recorded in the manifest and the hash.
IMAGE_FORMAT = 1

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DRIVER_KO = REPO_ROOT / "guest_kernel_patch" / "pvperf.ko"
GUEST_DRIVER_PATH = "lib/modules/pvperf/pvperf.ko"
GUEST_DRIVER_KSYMS = "lib/modules/pvperf/ksyms"
GUEST_MODULE_LIST = "etc/pvperf/modules.load"
KSYM_PARAM_PREFIX = "ksym_"

Progress = Callable[[int, int, str], None]
_DEFAULT = object()
TOTAL_STEPS = 9


def stderr_progress(step: int, total: int, message: str) -> None:
    """Default progress reporter: one line per step on stderr."""
    print(f"pvperf: image: [{step}/{total}] {message}", file=sys.stderr,
          flush=True)


# ---------------------------------------------------------------------------
# Public result type and locations

@dataclass(frozen=True)
class GuestImage:
    """A built guest image in the cache (all paths exist)."""
    name: str
    vmlinux: Path
    initramfs: Path
    system_map: Path
    root: Path
    kernel_version: str          # the kernel release, as `uname -r` says

    @property
    def manifest(self) -> Path:
        return self.vmlinux.parent / "manifest.json"


def cache_dir() -> Path:
    """``${XDG_CACHE_HOME:-~/.cache}/pvperf``."""
    base = os.environ.get("XDG_CACHE_HOME") or ""
    root = Path(base) if base else Path.home() / ".cache"
    return root / "pvperf"


def image_dir(name: str = "default") -> Path:
    return cache_dir() / "images" / name


def recipe_dir(name: str = "default") -> Path:
    return REPO_ROOT / "images" / name


# ---------------------------------------------------------------------------
# newc cpio (the "new ASCII" format the kernel's initramfs unpacker reads)

_NEWC_MAGIC = b"070701"
_NEWC_HEADER = 110
_TRAILER = "TRAILER!!!"


def _pad4(n: int) -> int:
    return (4 - n % 4) % 4


class CpioWriter:
    """Write an uncompressed newc archive; owners and modes are exactly
    what the caller asks for (root:root by default), so no fakeroot.

    Entries are written in call order: add a directory before its
    contents.  Every entry gets nlink 1 (directories 2) and a fresh inode
    number, so the kernel never treats two entries as hard links.
    """

    def __init__(self, out: BinaryIO, mtime: int = 0):
        self._out = out
        self._mtime = mtime
        self._ino = 0
        self._closed = False
        self.names: list[str] = []

    def _header(self, name: str, mode: int, size: int, nlink: int = 1,
                uid: int = 0, gid: int = 0, rdev: tuple[int, int] = (0, 0)
                ) -> None:
        name = name.lstrip("/")
        if not name or name.startswith("../") or "/../" in name:
            raise ValueError(f"bad cpio entry name {name!r}")
        if self._closed:
            raise ValueError("cpio archive already closed")
        self._ino += 1
        raw = name.encode() + b"\0"
        fields = (self._ino, mode, uid, gid, nlink, self._mtime, size,
                  0, 0, rdev[0], rdev[1], len(raw), 0)
        head = _NEWC_MAGIC + b"".join(b"%08X" % f for f in fields)
        self._out.write(head + raw + b"\0" * _pad4(len(head) + len(raw)))
        if name != _TRAILER:
            self.names.append(name)

    def add_dir(self, name: str, mode: int = 0o755, **kw) -> None:
        self._header(name, stat.S_IFDIR | (mode & 0o7777), 0, nlink=2, **kw)

    def add_file(self, name: str, data: bytes | os.PathLike | str,
                 mode: int = 0o644, **kw) -> None:
        """Add a regular file from bytes or from a host path (streamed)."""
        if isinstance(data, (bytes, bytearray)):
            self._header(name, stat.S_IFREG | (mode & 0o7777), len(data), **kw)
            self._out.write(data)
            size = len(data)
        else:
            size = os.stat(data).st_size
            self._header(name, stat.S_IFREG | (mode & 0o7777), size, **kw)
            with open(data, "rb") as src:
                shutil.copyfileobj(src, self._out, 1 << 20)
        self._out.write(b"\0" * _pad4(size))

    def add_symlink(self, name: str, target: str, **kw) -> None:
        raw = target.encode()
        self._header(name, stat.S_IFLNK | 0o777, len(raw), **kw)
        self._out.write(raw + b"\0" * _pad4(len(raw)))

    def add_device(self, name: str, major: int, minor: int, mode: int = 0o600,
                   char: bool = True, **kw) -> None:
        kind = stat.S_IFCHR if char else stat.S_IFBLK
        self._header(name, kind | (mode & 0o7777), 0, rdev=(major, minor), **kw)

    def add_tree(self, root: Path, prefix: str = "") -> None:
        """Add everything below ``root`` (sorted, parents first), keeping
        permission bits and symlink targets but forcing root ownership."""
        root = Path(root)
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            rel_dir = os.path.relpath(dirpath, root)
            entries = sorted(dirnames + filenames)
            for entry in entries:
                host = os.path.join(dirpath, entry)
                rel = entry if rel_dir == "." else f"{rel_dir}/{entry}"
                name = f"{prefix}{rel}"
                st = os.lstat(host)
                if stat.S_ISLNK(st.st_mode):
                    self.add_symlink(name, os.readlink(host))
                elif stat.S_ISDIR(st.st_mode):
                    self.add_dir(name, st.st_mode)
                elif stat.S_ISREG(st.st_mode):
                    self.add_file(name, host, st.st_mode)
                else:
                    raise ValueError(f"unsupported file type in tree: {host}")
            # os.walk does not descend into symlinked dirs: good.

    def close(self) -> None:
        if not self._closed:
            self._header(_TRAILER, 0, 0, nlink=1)
            self._closed = True


@dataclass
class CpioEntry:
    name: str
    mode: int
    uid: int
    gid: int
    nlink: int
    mtime: int
    rdev: tuple[int, int]
    data: bytes


def read_newc(data: bytes) -> list[CpioEntry]:
    """Parse a newc archive (used by the tests and to verify a build)."""
    entries, pos = [], 0
    while True:
        if data[pos:pos + 6] != _NEWC_MAGIC:
            raise ValueError(f"bad newc magic at offset {pos}")
        f = [int(data[pos + 6 + 8 * i: pos + 14 + 8 * i], 16) for i in range(13)]
        namesize, size = f[11], f[6]
        name_start = pos + _NEWC_HEADER
        name = data[name_start:name_start + namesize - 1].decode()
        pos = name_start + namesize
        pos += _pad4(pos)
        body = data[pos:pos + size]
        if len(body) != size:
            raise ValueError(f"truncated newc entry {name!r}")
        pos += size + _pad4(size)
        if name == _TRAILER:
            return entries
        entries.append(CpioEntry(name, f[1], f[2], f[3], f[4], f[5],
                                 (f[9], f[10]), body))


# ---------------------------------------------------------------------------
# bzImage -> vmlinux, ELF helpers

_XZ_MAGIC = bytes.fromhex("fd377a585a00")
_GZ_MAGIC = b"\x1f\x8b\x08"
_ELF_MAGIC = b"\x7fELF"


def _decompress_at(blob: bytes, off: int) -> bytes | None:
    """Decompress the stream starting at ``off`` or return None."""
    try:
        if blob.startswith(_XZ_MAGIC, off):
            return lzma.LZMADecompressor(lzma.FORMAT_XZ).decompress(blob[off:])
        if blob.startswith(_GZ_MAGIC, off):
            return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(blob[off:])
    except (lzma.LZMAError, zlib.error, EOFError):
        return None
    return None


def _bzimage_payload_offset(blob: bytes) -> int | None:
    """Offset of the compressed payload per the x86 boot protocol
    (>= 2.08: payload_offset at 0x248, relative to the protected-mode
    code, which starts after (setup_sects + 1) * 512 bytes)."""
    if len(blob) < 0x250 or blob[0x202:0x206] != b"HdrS":
        return None
    version = struct.unpack_from("<H", blob, 0x206)[0]
    if version < 0x208:
        return None
    setup_sects = blob[0x1F1] or 4
    payload_offset = struct.unpack_from("<I", blob, 0x248)[0]
    off = (setup_sects + 1) * 512 + payload_offset
    return off if off < len(blob) else None


def extract_vmlinux(blob: bytes) -> bytes:
    """Return the ELF kernel inside a bzImage (XZ or gzip payload).

    Uses the boot header's payload offset when present, else scans for
    the XZ and gzip magics; every candidate is tried until one
    decompresses to an ELF image.
    """
    candidates: list[int] = []
    hinted = _bzimage_payload_offset(blob)
    if hinted is not None:
        candidates.append(hinted)
    for magic in (_XZ_MAGIC, _GZ_MAGIC):
        start = 0
        while (hit := blob.find(magic, start)) >= 0:
            if hit not in candidates:
                candidates.append(hit)
            start = hit + 1
    for off in candidates:
        out = _decompress_at(blob, off)
        if out and out.startswith(_ELF_MAGIC):
            return out
    raise ValueError("no XZ or gzip stream in the bzImage decompresses to an "
                     f"ELF image ({len(candidates)} candidate(s) tried)")


def _elf64_check(elf: bytes) -> None:
    if not elf.startswith(_ELF_MAGIC) or elf[4] != 2 or elf[5] != 1:
        raise ValueError("not a little-endian ELF64 file")


def _iter_notes(buf: bytes) -> Iterator[tuple[bytes, int, bytes]]:
    pos = 0
    while pos + 12 <= len(buf):
        namesz, descsz, ntype = struct.unpack_from("<III", buf, pos)
        pos += 12
        name = buf[pos:pos + namesz].rstrip(b"\0")
        pos += namesz + _pad4(namesz)
        desc = buf[pos:pos + descsz]
        pos += descsz + _pad4(descsz)
        yield name, ntype, desc


_PT_NOTE = 4
_XEN_ELFNOTE_PHYS32_ENTRY = 18


def pvh_entry(elf: bytes) -> int | None:
    """The PVH entry point (Xen note PHYS32_ENTRY) QEMU boots, or None."""
    _elf64_check(elf)
    phoff, = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    for i in range(phnum):
        p_type, _flags, p_offset, _va, _pa, p_filesz = struct.unpack_from(
            "<IIQQQQ", elf, phoff + i * phentsize)
        if p_type != _PT_NOTE:
            continue
        for name, ntype, desc in _iter_notes(elf[p_offset:p_offset + p_filesz]):
            if name == b"Xen" and ntype == _XEN_ELFNOTE_PHYS32_ENTRY:
                return struct.unpack_from("<I", desc.ljust(4, b"\0"))[0]
    return None


def kernel_banner(elf: bytes) -> str:
    """The ``Linux version ...`` string (linux_banner) inside a vmlinux."""
    m = re.search(rb"Linux version [^\n\0]+", elf)
    return m.group(0).decode("ascii", "replace").strip() if m else ""


def elf_sections(elf: bytes) -> dict[str, bytes]:
    """Section name -> contents for an ELF64 little-endian file."""
    _elf64_check(elf)
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize)
               for i in range(shnum)]
    if not headers:
        return {}
    strtab_hdr = headers[shstrndx]
    strtab = elf[strtab_hdr[4]:strtab_hdr[4] + strtab_hdr[5]]
    out = {}
    for h in headers:
        name = strtab[h[0]:strtab.index(b"\0", h[0])].decode()
        out[name] = b"" if h[1] == 8 else elf[h[4]:h[4] + h[5]]  # 8: NOBITS
    return out


def read_modinfo(ko: bytes) -> dict[str, list[str]]:
    """The ``.modinfo`` key=value strings of a kernel module."""
    info: dict[str, list[str]] = {}
    for item in elf_sections(ko).get(".modinfo", b"").split(b"\0"):
        if b"=" in item:
            key, value = item.decode("utf-8", "replace").split("=", 1)
            info.setdefault(key, []).append(value)
    return info


# ---------------------------------------------------------------------------
# kernel module dependencies

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
            data = (moddir / paths[name]).read_bytes()
            if paths[name].endswith(".xz"):
                data = lzma.decompress(data)
            elif paths[name].endswith(".gz"):
                data = zlib.decompress(data, 16 + zlib.MAX_WBITS)
            info = read_modinfo(data)
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

    def modules_dep_text(self, names: Iterable[str]) -> str:
        """A ``modules.dep`` for ``names`` (a closed set), depmod-style:
        all transitive deps, the one to load first listed last."""
        lines = []
        for name in names:
            closure = [d for d in self.load_order([name]) if d != name]
            deps = " ".join(self.paths[d] for d in reversed(closure))
            lines.append(f"{self.paths[name]}:{' ' if deps else ''}{deps}")
        return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------
# recipe, inputs and the input hash

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


def _run(cmd: list[str], what: str, hint: str, cwd: Path | None = None,
         check: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, LC_ALL="C", LANG="C")
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True,
                              text=True)
    except FileNotFoundError as e:
        raise ImageError(what, f"{cmd[0]} is not installed", hint,
                         exc=e) from e
    if check and proc.returncode != 0:
        err = (proc.stderr or proc.stdout).strip().splitlines()
        cause = err[-1] if err else f"{cmd[0]} exited with {proc.returncode}"
        raise ImageError(what, cause, hint,
                         details="\n".join(err[-20:]))
    return proc


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
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
            out[rel] = _sha256_file(p) + (":x" if os.access(p, os.X_OK) else "")
    return out


def input_hash(inputs: dict) -> str:
    """Canonical SHA-256 of the inputs dictionary."""
    blob = json.dumps(inputs, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


_APT_HINT = ("run `apt-get update` (the apt lists are empty or stale), "
             "then retry")


def parse_apt_records(text: str) -> list[dict[str, str]]:
    """Records of ``apt-cache show`` (RFC 822 stanzas, blank-line separated;
    continuation lines are dropped, no field used here has them)."""
    records, cur = [], {}
    for line in text.splitlines():
        if not line.strip():
            if cur:
                records.append(cur)
            cur = {}
        elif not line[0].isspace() and ":" in line:
            key, value = line.split(":", 1)
            cur[key] = value.strip()
    if cur:
        records.append(cur)
    return records


def kernel_from_depends(depends: str) -> tuple[str, str | None] | None:
    """(package, pinned version or None) of the first linux-image-*
    alternative in a Depends field."""
    for alt in re.split(r"[,|]", depends):
        m = re.match(r"\s*(linux-image-[^\s(]+)\s*(?:\(\s*=\s*([^)\s]+)\s*\))?",
                     alt)
        if m:
            return m.group(1), m.group(2)
    return None


def _apt_show(packages: list[str]) -> dict[str, dict[str, str]]:
    """Candidate records (``apt-cache show --no-all-versions``)."""
    proc = _run(["apt-cache", "show", "--no-all-versions", *packages],
                "cannot resolve Debian package versions", _APT_HINT,
                check=False)
    found = {r["Package"]: r for r in parse_apt_records(proc.stdout)
             if "Package" in r and "Version" in r}
    missing = [p for p in packages if p not in found]
    if missing:
        raise ImageError("cannot resolve Debian package versions",
                         "apt knows no installable version of "
                         + ", ".join(missing), _APT_HINT,
                         details=proc.stderr.strip())
    return found


# apt-cache needs ~0.5 s per call to load its cache; the answer only
# changes when one of these does (apt-get update, a config change, dpkg).
_APT_STATE = ("/var/lib/apt/lists", "/var/cache/apt/pkgcache.bin",
              "/var/lib/dpkg/status", "/etc/apt/sources.list",
              "/etc/apt/sources.list.d", "/etc/apt/preferences",
              "/etc/apt/preferences.d", "/etc/apt/apt.conf.d")


def _apt_state() -> dict[str, list[int] | None]:
    state = {}
    for p in _APT_STATE:
        try:
            st = os.stat(p)
            state[p] = [st.st_mtime_ns, st.st_size]
        except OSError:
            state[p] = None
    return state


def resolve_packages(kernel_meta: str, others: list[str]
                     ) -> tuple[str, dict[str, str]]:
    """(concrete kernel package, {package: candidate version}) from the
    local apt lists; no network.  Memoized per apt state."""
    memo = cache_dir() / "images" / ".apt-resolved.json"
    query = [kernel_meta, *others]
    state = _apt_state()
    try:
        saved = json.loads(memo.read_text())
        if saved["query"] == query and saved["state"] == state:
            return saved["kernel"], saved["versions"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    records = _apt_show(query)
    versions = {p: records[p]["Version"] for p in others}
    hit = kernel_from_depends(records[kernel_meta].get("Depends", ""))
    if hit is None:
        if not re.search(r"\d", kernel_meta):
            raise ImageError(f"cannot resolve the kernel package {kernel_meta}",
                             "it depends on no linux-image-* package",
                             "name a kernel (meta)package in the recipe")
        kpkg, kver = kernel_meta, records[kernel_meta]["Version"]
    else:
        kpkg, kver = hit
        if kver is None:
            kver = _apt_show([kpkg])[kpkg]["Version"]
    versions[kpkg] = kver
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo.with_name(f"{memo.name}.{os.getpid()}")
        tmp.write_text(json.dumps({"query": query, "state": state,
                                   "kernel": kpkg, "versions": versions}))
        os.replace(tmp, memo)
    except OSError:
        pass                                  # the memo is only a speed-up
    return kpkg, versions


def _is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == _ELF_MAGIC
    except OSError:
        return False


def installed_version(package: str, purpose: str) -> str:
    """The version of an installed host package; ImageError if it is not
    installed (``purpose`` says what the image takes from it)."""
    hint = f"install it: apt-get install {package}"
    q = _run(["dpkg-query", "-W", "-f", "${Status}\t${Version}", package],
             f"the host package {package} is not installed", hint,
             check=False)
    if q.returncode != 0 or "install ok installed" not in q.stdout:
        raise ImageError(f"the host package {package} is not installed",
                         purpose, hint)
    return q.stdout.split("\t", 1)[1].strip()


def find_perf_binary(recipe: Recipe) -> tuple[Path, str]:
    """The real perf ELF of the installed perf package and its version.
    Debian's /usr/bin/perf may be a wrapper that execs perf_<major.minor>."""
    hint = f"install it: apt-get install {recipe.perf_package}"
    version = installed_version(recipe.perf_package,
                                "the guest image takes perf from it")
    wanted = Path(recipe.perf_binary)
    if _is_elf(wanted):
        return wanted, version
    files = _run(["dpkg", "-L", recipe.perf_package],
                 f"cannot list {recipe.perf_package}", hint).stdout.split("\n")
    elves = sorted(Path(f) for f in files
                   if re.fullmatch(r"/usr/bin/perf_[\d.]+", f.strip())
                   and _is_elf(Path(f.strip())))
    if not elves:
        raise ImageError("cannot find the perf binary",
                         f"{wanted} is not an ELF file and "
                         f"{recipe.perf_package} ships no /usr/bin/perf_*",
                         f"reinstall it: apt-get install --reinstall "
                         f"{recipe.perf_package}")
    return elves[-1], version


_LDD_LINE = re.compile(r"^\s*(?:(\S+)\s+=>\s+)?(\S+)\s+\(0x[0-9a-f]+\)\s*$")


def ldd_libraries(binary: Path) -> list[tuple[str, Path]]:
    """(guest path, host file) for every library ``ldd`` lists, plus the
    dynamic loader; the guest path is the one the loader searches.  A
    static binary has none."""
    proc = _run(["ldd", str(binary)], f"ldd failed on {binary}",
                "install libc-bin, or check that the binary is intact",
                check=False)
    if proc.returncode != 0 and "not a dynamic executable" in proc.stderr:
        return []
    if proc.returncode != 0:
        err = (proc.stderr or proc.stdout).strip()
        raise ImageError(f"ldd failed on {binary}",
                         err.splitlines()[-1] if err else
                         f"ldd exited with {proc.returncode}",
                         "install libc-bin, or check that the binary is "
                         "intact", details=err)
    out = proc.stdout
    libs: list[tuple[str, Path]] = []
    for line in out.splitlines():
        if "not found" in line:
            raise ImageError(f"{binary} cannot run on this host",
                             f"ldd: {line.strip()}",
                             "install the missing library package")
        m = _LDD_LINE.match(line)
        if not m:
            continue
        path = m.group(2)
        if not path.startswith("/"):
            continue                 # linux-vdso.so.1 has no file
        libs.append((path, Path(os.path.realpath(path))))
    return libs


def _stat_key(path: Path) -> list[int]:
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns]


@dataclass
class Tool:
    """A recipe tool resolved on the host."""
    spec: ToolSpec
    host: Path                           # the ELF file (symlinks resolved)
    version: str                         # of spec.package
    libs: list[tuple[str, Path]]         # as ldd_libraries


def find_tool(spec: ToolSpec) -> tuple[Path, str]:
    """(host ELF file, package version) of a recipe tool; ImageError if the
    package is not installed or does not give a runnable ELF binary."""
    version = installed_version(
        spec.package, f"the guest image takes {spec.binary} from it "
                      "(recipe key tools)")
    path = Path(spec.binary)
    if not path.exists():
        raise ImageError(f"cannot add {spec.binary} to the guest image",
                         f"{spec.binary} does not exist, although "
                         f"{spec.package} {version} is installed",
                         f"reinstall it (apt-get install --reinstall "
                         f"{spec.package}) or fix the recipe's tools entry")
    real = Path(os.path.realpath(path))
    if not (real.is_file() and _is_elf(real)):
        raise ImageError(f"cannot add {spec.binary} to the guest image",
                         f"{real} is not an ELF program (only ELF binaries "
                         "and their shared libraries are copied)",
                         "name the real program in the recipe's tools entry")
    return real, version


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

    def programs(self) -> list[tuple[str, Path]]:
        """(guest path, host file) of perf and of every tool."""
        return [("/usr/bin/perf", self.perf_binary)] + [
            (t.spec.guest, t.host) for t in self.tools]

    def libraries(self) -> list[tuple[str, Path]]:
        """(guest path, host file) of every shared library of perf and the
        tools, each guest path once (first one wins)."""
        out: dict[str, Path] = {}
        for guest, host in self.perf_libs + [l for t in self.tools
                                             for l in t.libs]:
            out.setdefault(guest, host)
        return list(out.items())

    @property
    def hash(self) -> str:
        return input_hash(self.data)

    @property
    def base_hash(self) -> str:
        """The hash of everything but the driver: when only the driver
        changed, the kernel, System.map and the rest of the tree are reused."""
        return input_hash({k: v for k, v in self.data.items() if k != "driver"})


def gather_inputs(name: str, driver_ko: Path | None) -> Inputs:
    recipe = load_recipe(name)
    kpkg, versions = resolve_packages(recipe.kernel_package,
                                      [recipe.busybox_package])
    perf, perf_version = find_perf_binary(recipe)
    versions[recipe.perf_package] = perf_version
    libs = ldd_libraries(perf)
    host_files = {str(perf): _stat_key(perf)}
    for _guest, host in libs:
        host_files[str(host)] = _stat_key(host)
    tools = []
    for spec in recipe.tools:
        host, version = find_tool(spec)
        tool = Tool(spec, host, version, ldd_libraries(host))
        tools.append(tool)
        versions[spec.package] = version
        for f in [host] + [h for _g, h in tool.libs]:
            host_files[str(f)] = _stat_key(f)
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
        "builder": _sha256_file(Path(__file__)),
        "recipe": _hash_tree(recipe.directory),
        "packages": {p: versions[p] for p in sorted(versions)},
        "kernel_package": kpkg,
        "host_files": host_files,
        "tools": {t.spec.guest: str(t.host) for t in tools},
        "driver": (hashlib.sha256(driver_bytes).hexdigest()
                   if driver_bytes is not None else None),
    }
    return Inputs(recipe, kpkg, versions, perf, libs, driver_ko,
                  driver_bytes, data, tools)


def _default_driver(driver_ko) -> Path | None:
    if driver_ko is _DEFAULT:
        return DEFAULT_DRIVER_KO if DEFAULT_DRIVER_KO.is_file() else None
    return Path(driver_ko) if driver_ko is not None else None


def _gather(name: str, driver_ko) -> Inputs:
    """gather_inputs with the default driver; the default one may vanish
    while guest_kernel_patch/ is being rebuilt: then build without it."""
    driver = _default_driver(driver_ko)
    try:
        return gather_inputs(name, driver)
    except ImageError:
        if driver_ko is _DEFAULT and driver and not driver.exists():
            return gather_inputs(name, None)
        raise


# ---------------------------------------------------------------------------
# status

def _image_from_dir(name: str, d: Path) -> GuestImage | None:
    try:
        manifest = json.loads((d / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    img = GuestImage(name=name, vmlinux=d / "vmlinux",
                     initramfs=d / "initramfs.cpio",
                     system_map=d / "System.map", root=d / "root",
                     kernel_version=manifest.get("kernel_version", ""))
    if not all(p.exists() for p in (img.vmlinux, img.initramfs,
                                    img.system_map, img.root)):
        return None
    return img


def image_status(name: str = "default", *, driver_ko=_DEFAULT
                 ) -> GuestImage | None:
    """The cached image if it exists and matches the current inputs
    (apt-cache, dpkg-query, ldd and a few hashes; no network, no build)."""
    d = image_dir(name)
    img = _image_from_dir(name, d)
    if img is None:
        return None
    inputs = _gather(name, driver_ko)
    manifest = json.loads((d / "manifest.json").read_text())
    return img if manifest.get("input_hash") == inputs.hash else None


# ---------------------------------------------------------------------------
# build steps

def _deb_filename(pkg: str, version: str) -> str:
    return f"{pkg}_{version.replace(':', '%3a')}_"


def apt_sha256(pkg: str, version: str) -> str | None:
    out = _run(["apt-cache", "show", f"{pkg}={version}"],
               f"cannot look up {pkg} {version}", _APT_HINT).stdout
    m = re.search(r"^SHA256:\s*([0-9a-f]{64})", out, re.M)
    return m.group(1) if m else None


def fetch_deb(pkg: str, version: str, debs: Path) -> Path:
    """``apt-get download`` a package version into ``debs`` (cached and
    verified against apt's SHA-256)."""
    debs.mkdir(parents=True, exist_ok=True)
    want = apt_sha256(pkg, version)
    prefix = _deb_filename(pkg, version)
    for f in sorted(debs.glob(prefix + "*.deb")):
        if want is None or _sha256_file(f) == want:
            return f
        f.unlink()                           # truncated or corrupt
    tmp = Path(tempfile.mkdtemp(prefix=".download-", dir=debs))
    try:
        _run(["apt-get", "download", f"{pkg}={version}"],
             f"cannot download {pkg} {version}",
             "check network access to the Debian mirror, or run "
             "`apt-get update` if the version is no longer on it", cwd=tmp)
        got = sorted(tmp.glob(prefix + "*.deb"))
        if not got:
            raise ImageError(f"cannot download {pkg} {version}",
                             "apt-get download produced no .deb",
                             "run it by hand to see why")
        if want is not None and _sha256_file(got[0]) != want:
            raise ImageError(f"cannot download {pkg} {version}",
                             "SHA-256 mismatch against the apt lists",
                             "run `apt-get update` and retry")
        final = debs / got[0].name
        os.replace(got[0], final)
        return final
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _dpkg_x(deb: Path, dest: Path) -> None:
    _run(["dpkg-deb", "-x", str(deb), str(dest)], f"cannot unpack {deb.name}",
         f"delete {deb} so it is downloaded again")


def _busybox_applets(busybox: Path) -> list[str]:
    """Applet paths (relative, e.g. 'bin/sh') from ``busybox --list-full``
    (the static busybox is an x86_64 binary like the host)."""
    out = _run([str(busybox), "--list-full"], "cannot list busybox applets",
               "delete the busybox-static .deb from the cache and retry")
    applets = [a.strip() for a in out.stdout.splitlines() if a.strip()]
    # /init is ours; busybox's init/linuxrc applets must not shadow it.
    return [a for a in applets if modname(a) not in ("init", "linuxrc")]


def _ksym_params(ko: bytes, path: Path | None = None) -> list[str]:
    """Symbols the driver wants resolved: parameters named ksym_<symbol>."""
    try:
        info = read_modinfo(ko)
    except (ValueError, struct.error, IndexError) as e:
        raise ImageError("the guest PMU driver is not a kernel module",
                         f"{path}: {e}", "rebuild it") from e
    names = {p.split(":", 1)[0] for p in info.get("parmtype", [])}
    return sorted(n[len(KSYM_PARAM_PREFIX):] for n in names
                  if n.startswith(KSYM_PARAM_PREFIX))


def _install(src: Path, dst: Path, mode: int | None = None) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.is_symlink():             # never write through an applet link
        dst.unlink()
    shutil.copyfile(src, dst)
    os.chmod(dst, mode if mode is not None else
             stat.S_IMODE(os.stat(src).st_mode))


def _populate_root(root: Path, inputs: Inputs, kdir: Path, kver: str,
                   busybox_dir: Path, report: Callable[[int, str], None]
                   ) -> list[str]:
    """Fill the guest root tree; returns the module load order."""
    recipe = inputs.recipe
    for d in ("bin", "sbin", "usr/bin", "usr/sbin", "lib", "lib64", "etc",
              "etc/pvperf", "proc", "sys", "dev", "tmp", "run", "root",
              "mnt/host", f"lib/modules/{kver}"):
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
    packed = [db.paths[n] for n in order if not db.paths[n].endswith(".ko")]
    if packed:         # bookworm's 6.1 has CONFIG_MODULE_COMPRESS_NONE=y
        raise ImageError("cannot collect kernel modules",
                         f"compressed modules are not supported: {packed[0]}",
                         "use a kernel with uncompressed modules, or teach "
                         "pyhost/image.py to decompress them")
    for name in order:
        _install(moddir / db.paths[name], gmod / db.paths[name], 0o644)
    (gmod / "modules.dep").write_text(db.modules_dep_text(order))
    (gmod / "modules.order").write_text(
        "".join(db.paths[n] + "\n" for n in order))
    for f in ("modules.builtin", "modules.builtin.modinfo"):
        if (moddir / f).exists():
            _install(moddir / f, gmod / f, 0o644)
    (root / GUEST_MODULE_LIST).write_text(
        "".join(f"/lib/modules/{kver}/{db.paths[n]}\n" for n in order))

    # busybox and its applets
    names = ", ".join(["perf"] + [os.path.basename(t.spec.guest)
                                  for t in inputs.tools])
    report(6, f"collecting busybox, {names} and "
              f"{len(inputs.libraries())} shared libraries")
    bb_src = busybox_dir / "bin" / "busybox"
    if not bb_src.is_file():
        raise ImageError("cannot install busybox",
                         f"{recipe.busybox_package} has no /bin/busybox",
                         "check the recipe's busybox package")
    _install(bb_src, root / "bin" / "busybox", 0o755)
    for applet in _busybox_applets(bb_src):
        link = root / applet
        if link.exists() or link.is_symlink():
            continue
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath("/bin/busybox", "/" + str(Path(applet).parent)),
                   link)

    install_programs(root, inputs)

    # /init, recipe overlay, identification
    _install(recipe.init, root / "init", 0o755)
    if recipe.overlay and recipe.overlay.is_dir():
        for src in sorted(recipe.overlay.rglob("*")):
            rel = src.relative_to(recipe.overlay)
            if src.is_dir():
                (root / rel).mkdir(parents=True, exist_ok=True)
            else:
                _install(src, root / rel)

    _install_driver(root, inputs)
    return order


def install_programs(root: Path, inputs: Inputs) -> None:
    """perf and the recipe's tools (over any busybox applet of the same
    name), their libraries and the dynamic loader at the paths ldd
    printed."""
    for guest, host in inputs.programs():
        _install(host, root / guest.lstrip("/"), 0o755)
    for guest, host in inputs.libraries():
        dst = root / guest.lstrip("/")
        if not dst.exists():
            _install(host, dst, 0o755)


def _install_driver(root: Path, inputs: Inputs) -> None:
    """Put (or remove) the guest PMU driver and its ksym list."""
    ko, ksyms = root / GUEST_DRIVER_PATH, root / GUEST_DRIVER_KSYMS
    for f in (ko, ksyms):
        if f.exists():
            f.unlink()
    if ko.parent.is_dir() and not any(ko.parent.iterdir()):
        ko.parent.rmdir()
    if inputs.driver_bytes is not None:
        ko.parent.mkdir(parents=True, exist_ok=True)
        ko.write_bytes(inputs.driver_bytes)
        syms = _ksym_params(inputs.driver_bytes, inputs.driver_ko)
        ksyms.write_text("".join(s + "\n" for s in syms))


def _write_image_json(root: Path, inputs: Inputs, kver: str) -> None:
    (root / "etc/pvperf").mkdir(parents=True, exist_ok=True)
    (root / "etc/pvperf/image.json").write_text(json.dumps(
        {"name": inputs.recipe.name, "kernel_version": kver,
         "input_hash": inputs.hash,
         "driver": inputs.data["driver"]}, indent=1) + "\n")


def write_initramfs(root: Path, out: Path) -> None:
    """The root tree plus the device nodes the kernel needs before /init
    mounts devtmpfs (it opens /dev/console for init's stdio)."""
    with open(out, "wb", buffering=1 << 20) as f:
        w = CpioWriter(f)
        w.add_tree(root)
        w.add_device("dev/console", 5, 1, 0o600)
        w.add_device("dev/null", 1, 3, 0o666)
        w.add_device("dev/ttyS0", 4, 64, 0o600)
        w.close()


QEMU = "qemu-system-x86_64"
SMOKE_TIMEOUT = 180.0


def _first_load_vaddr(elf: bytes) -> int | None:
    phoff, = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    for i in range(phnum):
        p_type, _f, _off, vaddr = struct.unpack_from("<IIQQ", elf,
                                                      phoff + i * phentsize)
        if p_type == 1:                               # PT_LOAD
            return vaddr
    return None


def system_map_from_kallsyms(text: str) -> str:
    """System.map lines (address-sorted, core kernel only) from the text of
    /proc/kallsyms read with kptr_restrict=0; module symbols dropped."""
    rows = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and re.fullmatch(r"[0-9a-f]{16}", parts[0]):
            rows.append((int(parts[0], 16), parts[1], parts[2]))
    rows.sort(key=lambda r: r[0])
    return "".join(f"{a:016x} {t} {n}\n" for a, t, n in rows)


def smoke_command(tools: Iterable[str] = ()) -> str:
    """The test boot's command: every dynamically linked tool (guest path)
    must load (the dynamic loader's --list exits non-zero when a library
    is missing), then /proc/kallsyms, then perf's version on stderr."""
    checks = "".join(f"{LOADER} --list {t} >&2 && " for t in tools)
    return checks + "cat /proc/kallsyms && perf --version >&2"


LOADER = "/lib64/ld-linux-x86-64.so.2"


def smoke_boot(vmlinux: Path, initramfs: Path, work: Path,
               timeout: float = SMOKE_TIMEOUT,
               tools: Iterable[str] = ()) -> tuple[str, str]:
    """Boot the new image once in run mode (no share, no PMU) to prove it
    works and to read /proc/kallsyms: Debian's linux-image packages ship a
    placeholder System.map (the real one is in the ~860 MB -dbg package).
    ``tools``: guest paths of dynamically linked recipe tools whose
    libraries must all load.  Returns (kallsyms text, perf version line)."""
    out, err, ctl = work / "smoke.out", work / "smoke.err", work / "smoke.ctl"
    console = work / "smoke.console"
    cmd = smoke_command(tools).replace(",", ",,")   # fw_cfg string= escaping
    args = [QEMU, "-machine", "pc,accel=tcg", "-cpu", "max", "-m", "512M",
            "-smp", "1", "-nodefaults", "-no-user-config", "-display", "none",
            "-no-reboot", "-monitor", "none", "-serial", f"file:{console}",
            "-kernel", str(vmlinux), "-initrd", str(initramfs),
            "-append", "console=ttyS0 quiet panic=-1 nokaslr pvperf.mode=run",
            "-fw_cfg", f"name=opt/org.pvperf/cmd,string={cmd}",
            "-device", "virtio-serial-pci"]
    for name, path in (("control", ctl), ("stdout", out), ("stderr", err)):
        args += ["-chardev", f"file,id={name},path={path}",
                 "-device", f"virtserialport,chardev={name},"
                            f"name=org.pvperf.{name}"]
    hint = "run `python3 -m pyhost.image build --force`; if it fails " \
           "again, boot the image by hand (images/README.md) and read the console"
    try:
        proc = subprocess.run(args, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError as e:
        raise ImageError("cannot test-boot the new image",
                         f"{QEMU} is not installed",
                         "apt-get install qemu-system-x86", exc=e) from e
    except subprocess.TimeoutExpired as e:    # run() killed QEMU already
        raise ImageError("the new image did not boot",
                         f"no power-off within {timeout:.0f} s", hint,
                         exc=e, details=_tail(console)) from e
    status = ctl.read_text(errors="replace") if ctl.exists() else ""
    if proc.returncode != 0 or status != "READY\nEXIT 0\n":
        why = (f"QEMU exited with {proc.returncode}: "
               f"{proc.stderr.strip()[-300:]}" if proc.returncode else
               f"control port said {status!r}, expected READY and EXIT 0")
        raise ImageError("the new image did not boot", why, hint,
                         details=_tail(console) + "\n" + _tail(err))
    version = err.read_text(errors="replace").strip().splitlines()
    return out.read_text(errors="replace"), (version[-1] if version else "")


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


@dataclass
class _Lock:
    path: Path

    def __enter__(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"pvperf: image: waiting for another build ({self.path})",
                  file=sys.stderr, flush=True)
            fcntl.flock(self._fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)


def build_image(name: str = "default", *, driver_ko=_DEFAULT,
                force: bool = False,
                progress: Progress | None = stderr_progress) -> GuestImage:
    """Build (or reuse) the guest image ``name``; see the module docstring.

    driver_ko: path of the guest PMU driver to put at
    /lib/modules/pvperf/pvperf.ko; by default guest_kernel_patch/pvperf.ko
    of this repository if it exists; None for an image without it.
    force: rebuild everything even if the inputs did not change.
    progress: called as progress(step, total, message) per step (default:
    a line on stderr); None for silence.
    Raises ImageError with what failed, why, and what to do.
    """
    report = (lambda step, msg: progress(step, TOTAL_STEPS, msg)) \
        if progress else (lambda step, msg: None)
    images = cache_dir() / "images"
    with _Lock(images / f".lock-{name}"):
        report(1, "resolving packages")
        inputs = _gather(name, driver_ko)
        final = image_dir(name)
        current = _image_from_dir(name, final)
        if current and not force:
            try:
                old = json.loads(current.manifest.read_text())
            except (OSError, ValueError):
                old = {}
            if old.get("input_hash") == inputs.hash:
                report(TOTAL_STEPS, f"image {name} is up to date ({final})")
                return current
        else:
            old = {}
        for stale in images.glob(f".build-{name}-*"):
            shutil.rmtree(stale, ignore_errors=True)   # interrupted builds
        work = Path(tempfile.mkdtemp(prefix=f".build-{name}-", dir=images))
        try:
            if old.get("base_hash") == inputs.base_hash:
                img = _update_driver(work, final, inputs, old, report)
            else:
                img = _build_into(work, final, inputs, report)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return img


def _build_into(work: Path, final: Path, inputs: Inputs,
                report: Callable[[int, str], None]) -> GuestImage:
    recipe = inputs.recipe
    debs = cache_dir() / "debs"
    kpkg, bbpkg = inputs.kernel_package, recipe.busybox_package
    report(2, f"fetching {kpkg} {inputs.versions[kpkg]} and {bbpkg} "
              f"{inputs.versions[bbpkg]}")
    kdeb = fetch_deb(kpkg, inputs.versions[kpkg], debs)
    bbdeb = fetch_deb(bbpkg, inputs.versions[bbpkg], debs)

    report(3, f"unpacking {kpkg}")
    kdir, bbdir = work / "kernel-deb", work / "busybox-deb"
    _dpkg_x(kdeb, kdir)
    _dpkg_x(bbdeb, bbdir)
    vers = sorted(p.name for p in (kdir / "lib" / "modules").iterdir())
    if len(vers) != 1:
        raise ImageError(f"unexpected layout of {kdeb.name}",
                         f"expected one /lib/modules/<version>, found {vers}",
                         "check the recipe's kernel package")
    kver = vers[0]

    out = work / "image"
    out.mkdir()
    vmlinuz = kdir / "boot" / f"vmlinuz-{kver}"
    report(4, f"extracting vmlinux from {vmlinuz.name}")
    try:
        elf = extract_vmlinux(vmlinuz.read_bytes())
        entry = pvh_entry(elf)
    except (OSError, ValueError) as e:
        raise ImageError("cannot extract vmlinux", str(e),
                         f"delete {kdeb} and retry; report a bug if it "
                         "persists") from e
    if entry is None:
        raise ImageError("cannot use this kernel", f"{vmlinuz.name} has no "
                         "PVH entry point (CONFIG_PVH)",
                         "choose a kernel built with CONFIG_PVH=y")
    (out / "vmlinux").write_bytes(elf)
    banner = kernel_banner(elf)
    load_vaddr = _first_load_vaddr(elf)
    del elf

    root = out / "root"
    root.mkdir()
    order = _populate_root(root, inputs, kdir, kver, bbdir, report)
    _write_image_json(root, inputs, kver)
    shutil.rmtree(kdir)
    shutil.rmtree(bbdir)

    report(7, "writing initramfs.cpio")
    write_initramfs(root, out / "initramfs.cpio")
    size = (out / "initramfs.cpio").stat().st_size

    report(8, "test-booting the image (System.map from /proc/kallsyms)")
    t0 = time.monotonic()
    kallsyms, perf_version = smoke_boot(
        out / "vmlinux", out / "initramfs.cpio", work,
        tools=[t.spec.guest for t in inputs.tools if t.libs])
    smoke_seconds = round(time.monotonic() - t0, 2)
    system_map = system_map_from_kallsyms(kallsyms)
    m = re.search(r"^([0-9a-f]{16}) T _text$", system_map, re.M)
    if not m or int(m.group(1), 16) != load_vaddr:
        raise ImageError("cannot make System.map",
                         "the kernel's /proc/kallsyms does not match its "
                         f"link address (_text {m and m.group(1)}, first "
                         f"PT_LOAD {load_vaddr and hex(load_vaddr)})",
                         "report a bug: the kernel was relocated (KASLR?)")
    (out / "System.map").write_text(system_map)

    manifest = {
        "name": recipe.name,
        "kernel_version": kver,
        "kernel_banner": banner,
        "kernel_package": kpkg,
        "pvh_entry": f"{entry:#x}",
        "packages": inputs.data["packages"],
        "modules": order,
        "driver_ko": str(inputs.driver_ko) if inputs.driver_ko else None,
        "input_hash": inputs.hash,
        "base_hash": inputs.base_hash,
        "inputs": inputs.data,
        "initramfs_size": size,
        "perf_version": perf_version,
        "driver_only_update": False,
        "system_map": "from /proc/kallsyms of a test boot (nokaslr); "
                      "Debian's package ships a placeholder",
        "test_boot_seconds": smoke_seconds,
        "build_time": _dt.datetime.now(_dt.timezone.utc).isoformat(
            timespec="seconds"),
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")

    report(9, f"installing image into {final} "
              f"(initramfs {size / 1e6:.1f} MB, kernel {kver})")
    return _install_image(out, final, recipe.name)


def _install_image(out: Path, final: Path, name: str) -> GuestImage:
    """Move a finished image into place (two renames; a concurrent reader
    sees the old image, nothing, or the new one, never a mix)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    old = None
    if final.exists() or final.is_symlink():
        old = Path(tempfile.mkdtemp(prefix=f".old-{name}-", dir=final.parent))
        os.replace(final, old / "image")
    os.replace(out, final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    img = _image_from_dir(name, final)
    assert img is not None
    return img


def _update_driver(work: Path, final: Path, inputs: Inputs, old: dict,
                   report: Callable[[int, str], None]) -> GuestImage:
    """Only the driver changed: reuse the current image's kernel, System.map
    and tree (no unpacking, no test boot), swap the driver, rewrite the cpio."""
    report(2, "only the PMU driver changed: reusing kernel and tree")
    out = work / "image"
    out.mkdir()
    for f in ("vmlinux", "System.map"):
        try:
            os.link(final / f, out / f)
        except OSError:
            shutil.copyfile(final / f, out / f)
    shutil.copytree(final / "root", out / "root", symlinks=True)
    _install_driver(out / "root", inputs)
    _write_image_json(out / "root", inputs, old["kernel_version"])
    report(7, "writing initramfs.cpio")
    write_initramfs(out / "root", out / "initramfs.cpio")
    size = (out / "initramfs.cpio").stat().st_size
    manifest = dict(old)
    manifest.update({
        "driver_ko": str(inputs.driver_ko) if inputs.driver_ko else None,
        "input_hash": inputs.hash,
        "inputs": inputs.data,
        "initramfs_size": size,
        "build_time": _dt.datetime.now(_dt.timezone.utc).isoformat(
            timespec="seconds"),
        "driver_only_update": True,
    })
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    report(9, f"installing image into {final} (initramfs {size / 1e6:.1f} MB)")
    return _install_image(out, final, inputs.recipe.name)


# ---------------------------------------------------------------------------
# CLI (the lead wires `pvperf image build` to build_image)

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m pyhost.image",
                                 description="Build the pvperf guest image.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build the image if an input changed")
    b.add_argument("--force", action="store_true", help="rebuild anyway")
    s = sub.add_parser("status", help="say whether the image is up to date")
    for p in (b, s):
        p.add_argument("--name", default="default")
        g = p.add_mutually_exclusive_group()
        g.add_argument("--driver-ko", type=Path,
                       help=f"guest PMU driver (default {DEFAULT_DRIVER_KO} "
                            "if it exists)")
        g.add_argument("--no-driver", action="store_true",
                       help="build without the guest PMU driver")
    args = ap.parse_args(argv)
    driver = None if args.no_driver else (args.driver_ko or _DEFAULT)
    try:
        if args.cmd == "build":
            t0 = time.monotonic()
            img = build_image(args.name, driver_ko=driver, force=args.force)
            print(f"pvperf: image: {img.name} ready in "
                  f"{time.monotonic() - t0:.1f} s: {img.vmlinux.parent}",
                  file=sys.stderr)
            return 0
        img = image_status(args.name, driver_ko=driver)
        print(f"{args.name}: " + (f"up to date ({img.vmlinux.parent})" if img
                                  else "missing or out of date"))
        return 0 if img else 1
    except ImageError as e:
        print(f"pvperf: {e}", file=sys.stderr)
        if getattr(e, "details", ""):
            print(e.details, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
