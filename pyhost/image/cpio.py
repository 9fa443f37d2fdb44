"""newc cpio archives: the "new ASCII" format the kernel's initramfs
unpacker reads (Documentation/driver-api/early-userspace/buffer-format.rst).

The writer sets owners and modes itself (root:root by default), so an
image is built without fakeroot; the reader verifies builds and tests.
"""
from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ..arch import Arch

_NEWC_MAGIC = b"070701"
_NEWC_HEADER = 110
_TRAILER = "TRAILER!!!"
#: Every entry's mtime: what the guest's stat() says of each file (a .pyc
#: header records its source's; maintainer.py).
ARCHIVE_MTIME = 0


def _pad4(n: int) -> int:
    return (4 - n % 4) % 4


class CpioWriter:
    """Write an uncompressed newc archive; owners and modes are exactly
    what the caller asks for (root:root by default), so no fakeroot.

    Entries are written in call order: add a directory before its
    contents.  Every entry gets nlink 1 (directories 2) and a fresh inode
    number, so the kernel never treats two entries as hard links.
    """

    def __init__(self, out: BinaryIO, mtime: int = ARCHIVE_MTIME):
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


def write_initramfs(root: Path, out: Path, arch: Arch) -> None:
    """The root tree plus the device nodes the kernel needs before /init
    mounts devtmpfs (it opens /dev/console for init's stdio; the serial
    console is the architecture's)."""
    with open(out, "wb", buffering=1 << 20) as f:
        w = CpioWriter(f)
        w.add_tree(root)
        w.add_device("dev/console", 5, 1, 0o600)
        w.add_device("dev/null", 1, 3, 0o666)
        w.add_device(f"dev/{arch.console}", *arch.console_rdev, 0o600)
        w.close()

