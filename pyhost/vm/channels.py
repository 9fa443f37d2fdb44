"""pvperf's private channels to its QEMU: nothing another user can reach.

  QMP and the virtio-serial ports (control, stdout, stderr)
              one socketpair each; QEMU inherits its end as an already
              connected client chardev (``-chardev socket,fd=N``, QEMU
              >= 10.0 checked), pvperf keeps the other.  No name exists:
              not on disk, not in the abstract namespace (the names there
              are listed in /proc/net/unix and carry no permissions).
              QEMU's QMP server would otherwise serve whoever connects
              first, and QMP can make QEMU run host commands.
  service     the plugin connects by path (one connection per vCPU, at
              install), so its socket lives in a run directory,
              $XDG_RUNTIME_DIR/pvperf-<pid>-<rand> (or /tmp/...), mode
              0700; the service checks SO_PEERCRED too (pmu/service.py).
              The launcher removes the directory as soon as every vCPU
              has connected, and again in ``finally``: after start-up
              nothing is on disk, so even a SIGKILL then leaves nothing;
              one killed during start-up is swept by a later run
              (``sweep_run_dirs``), like the RAM files in /dev/shm.
  output files
              deterministic runs only: the command's stdout and stderr
              ports write into anonymous in-memory files (memfd, ``-chardev
              file``) instead of sockets.  A socket fills when the host
              reads late (load, a slow terminal) and the guest then waits
              on the host: how long is host time, and the guest's idle
              jumps to its next timer deadline while it waits change every
              later count.  A file write never waits; pvperf tails it.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import stat
import tempfile
from pathlib import Path

from ..errors import SetupError

PREFIX = "pvperf-"
SUN_PATH_MAX = 107          # sizeof(sun_path) minus the NUL


def process_gone(pid: int) -> bool:
    """No process ``pid`` (and it is not us)."""
    return pid != os.getpid() and not Path(f"/proc/{pid}").exists()


def owner_pid(path: Path) -> int | None:
    """The <pid> of a path named pvperf-<pid>-..., if it is one."""
    try:
        return int(path.name.split("-")[1])
    except (IndexError, ValueError):
        return None


# Guest RAM and initrd files (the launcher's), named for their owner.
SHM_DIR = Path("/dev/shm")
SHM_PREFIX = "pvperf-"


def sweep_stale_shm() -> list[str]:
    """Remove RAM files of pvperf processes that no longer exist."""
    removed = []
    for path in SHM_DIR.glob(SHM_PREFIX + "*"):
        if dead_owner(path):
            with contextlib.suppress(OSError):
                os.unlink(path)
                removed.append(str(path))
    return removed


def dead_owner(path: Path) -> bool:
    """``path`` is named pvperf-<pid>-... and that process is gone (and
    it is not us)."""
    pid = owner_pid(path)
    return pid is not None and process_gone(pid)


def run_dir_parent() -> Path:
    """$XDG_RUNTIME_DIR when it is ours and private, else /tmp."""
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        with contextlib.suppress(OSError):
            st = os.stat(xdg)
            if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() \
                    and not st.st_mode & 0o077:
                return Path(xdg)
    return Path(tempfile.gettempdir())


def run_dir_parents() -> list[Path]:
    return sorted({run_dir_parent(), Path(tempfile.gettempdir())})


def make_run_dir() -> Path:
    """A new private (0700) run directory for this process."""
    try:
        path = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-",
                                     dir=run_dir_parent()))
    except OSError as e:
        raise SetupError("creating the run directory", str(e),
                         "check that /tmp (or $XDG_RUNTIME_DIR) is "
                         "writable", exc=e) from e
    if len(str(path / "svc")) > SUN_PATH_MAX:
        remove_run_dir(path)
        raise SetupError("creating the run directory", f"{path} is too long "
                         "for a unix socket path",
                         "set XDG_RUNTIME_DIR (or TMPDIR) to a shorter "
                         "directory")
    return path


def remove_run_dir(path: Path | None) -> None:
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)


def remove_orphaned_dir(path: Path, owner_pid: int) -> bool:
    """Remove ``path`` if it is a directory of ours (never through a link,
    never another user's) whose owner process ``owner_pid`` is gone."""
    with contextlib.suppress(OSError):
        st = path.lstat()
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() \
                and process_gone(owner_pid):
            shutil.rmtree(path)
            return True
    return False


def sweep_run_dirs() -> list[str]:
    """Remove run directories of pvperf processes that no longer exist."""
    removed = []
    for parent in run_dir_parents():
        for path in parent.glob(PREFIX + "*"):
            pid = owner_pid(path)
            if pid is not None and remove_orphaned_dir(path, pid):
                removed.append(str(path))
    return removed


class SocketPairs:
    """One connected socketpair per chardev: QEMU inherits one end."""

    def __init__(self, names):
        self._ours: dict[str, socket.socket] = {}
        self._theirs: dict[str, socket.socket] = {}
        for name in names:
            ours, theirs = socket.socketpair(socket.AF_UNIX,
                                             socket.SOCK_STREAM)
            theirs.set_inheritable(True)
            self._ours[name], self._theirs[name] = ours, theirs

    def chardev(self, name: str) -> list[str]:
        """QEMU's -chardev for ``name``: a client already connected."""
        return ["-chardev",
                f"socket,id={name},fd={self._theirs[name].fileno()}"]

    @property
    def pass_fds(self) -> tuple[int, ...]:
        return tuple(s.fileno() for s in self._theirs.values())

    def spawned(self) -> None:
        """QEMU has its ends: close ours of them (so that QEMU's exit is
        EOF here)."""
        for s in self._theirs.values():
            s.close()
        self._theirs.clear()

    def ours(self, name: str) -> socket.socket:
        """pvperf's end of ``name`` (a stream transport built on it closes
        the same object: close() below is then a no-op for it)."""
        return self._ours[name]

    def close(self) -> None:
        for s in (*self._ours.values(), *self._theirs.values()):
            s.close()
        self._ours.clear()
        self._theirs.clear()


class OutputFiles:
    """One anonymous in-memory file per port that QEMU writes into
    (``-chardev file`` on /dev/fd/N: QEMU reopens the inherited memfd, so
    the file has no name on disk); pvperf reads each with ``tail``."""

    def __init__(self, names):
        self._fds = {name: os.memfd_create(PREFIX + name) for name in names}
        for fd in self._fds.values():
            os.set_inheritable(fd, True)    # as SocketPairs' QEMU ends

    def __contains__(self, name: str) -> bool:
        return name in self._fds

    def chardev(self, name: str) -> list[str]:
        return ["-chardev", f"file,id={name},path=/dev/fd/{self._fds[name]}"]

    @property
    def pass_fds(self) -> tuple[int, ...]:
        return tuple(self._fds.values())

    def tail(self, name: str, writer_alive) -> "FileTail":
        return FileTail(self._fds[name], writer_alive)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


class FileTail:
    """A file another process appends to, read as a stream: ``read`` waits
    for more while ``writer_alive()``, and returns b"" once the writer has
    exited and everything it wrote was read (the StreamReader.read shape
    the port pumps expect)."""

    POLL_S = 0.02

    def __init__(self, fd: int, writer_alive):
        self.fd, self.offset, self.writer_alive = fd, 0, writer_alive

    async def read(self, n: int) -> bytes:
        while True:
            # Asked before reading: a writer that was gone then has
            # written everything this read can see.
            alive = self.writer_alive()
            chunk = os.pread(self.fd, n, self.offset)
            if chunk or not alive:
                self.offset += len(chunk)
                return chunk
            await asyncio.sleep(self.POLL_S)
