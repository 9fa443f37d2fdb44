"""The share staged in guest RAM, for deterministic runs.

A 9p request completes in a QEMU worker thread at a host-timed moment, so
every file access over the share makes the guest's kernel work (and the
virtual time) differ from run to run (vm/determinism.py).  For
``--deterministic`` the share directory goes into a newc archive that the
launcher appends to the image's initramfs: the kernel unpacks it at
``/mnt/host`` before /init runs, and the command runs on that RAM copy.
After the command /init mounts the 9p share and copies back the regular
files the command created or changed (mtime newer than the stamp file,
images/README.md); deletions are not copied back.

Every staged entry has the same mtime (determinism.STAGED_MTIME) and
root ownership, so what the guest sees does not depend on when or by whom
the host files were written.
"""
from __future__ import annotations

import io
import os
from pathlib import Path

from ..errors import ImageError
from ..guest_contract import SHARE_MOUNT, STAGED_STAMP, in_root
from ..vm.determinism import STAGED_MTIME
from .cpio import CpioWriter

GUEST_DIR = in_root(SHARE_MOUNT)
STAMP = in_root(STAGED_STAMP)


def share_bytes(share: Path) -> int:
    """Bytes of the regular files below ``share`` (symlinks not followed)."""
    total = 0
    for dirpath, _, filenames in os.walk(share):
        for name in filenames:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                total += os.lstat(path).st_size
    return total


def share_state(share: Path) -> dict[str, tuple[int, int]]:
    """(size, mtime in ns) of every regular file below ``share``, by
    relative path: what a run's copy-back may change (symlinks not
    followed)."""
    state = {}
    for dirpath, _, filenames in os.walk(share):
        for name in filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if not os.path.islink(path):
                state[os.path.relpath(path, share)] = (st.st_size,
                                                       st.st_mtime_ns)
    return state


def stage_share(share: Path, limit: int) -> bytes:
    """The newc archive that puts ``share`` at /mnt/host in the guest;
    refuses more than ``limit`` bytes of files (they live in guest RAM)."""
    size = share_bytes(share)
    if size > limit:
        raise ImageError("staging the share for --deterministic",
                         f"{share} holds {size >> 20} MiB of files, more "
                         f"than {limit >> 20} MiB",
                         "share a directory with only what the command "
                         "needs (--share DIR), or raise --mem")
    buf = io.BytesIO()
    cpio = CpioWriter(buf, mtime=STAGED_MTIME)
    cpio.add_dir(os.path.dirname(GUEST_DIR))
    cpio.add_dir(GUEST_DIR)
    try:
        cpio.add_tree(share, prefix=GUEST_DIR + "/")
    except (ValueError, OSError) as e:
        raise ImageError("staging the share for --deterministic", str(e),
                         "share a directory of regular files, directories "
                         "and symlinks") from e
    cpio.add_file(STAMP, b"")
    cpio.close()
    return buf.getvalue()
