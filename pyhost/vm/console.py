"""The guest's serial console, driven with pexpect.

QEMU runs under pexpect with the serial port on its stdio (a pty).  The
console is for people (``pvperf shell``, ``--console``) and for diagnosis:
the last lines are kept for error messages and a kernel panic is detected.
Exit status and readiness never come from here (see vm: control port).
"""
from __future__ import annotations

import collections
import re
import sys

import pexpect
import ptyprocess

PANIC_RE = re.compile(rb"Kernel panic - not syncing[^\r\n]*")


class ConsoleLog:
    """A file-like sink for pexpect that keeps the last ``keep`` lines."""

    def __init__(self, keep: int = 40, echo=None):
        self.lines: collections.deque[str] = collections.deque(maxlen=keep)
        self._partial = ""
        self.echo = echo

    def write(self, data) -> None:
        text = data.decode("utf-8", "replace") if isinstance(data, bytes) \
            else data
        if self.echo is not None:
            self.echo.write(text)
            self.echo.flush()
        text = (self._partial + text).replace("\r", "")
        *full, self._partial = text.split("\n")
        self.lines.extend(full)

    def flush(self) -> None:
        pass

    def tail(self, n: int = 15) -> str:
        lines = list(self.lines)[-n:]
        if self._partial:
            lines.append(self._partial)
        return "\n".join(lines)


class _Spawn(pexpect.spawn):
    """pexpect.spawn that leaves ``pass_fds`` open in the child (pexpect
    4.9 does not pass ptyprocess's pass_fds on; ptyprocess closes every
    other descriptor before preexec_fn runs)."""

    def __init__(self, *args, pass_fds=(), **kw):
        self._pass_fds = tuple(pass_fds)
        super().__init__(*args, **kw)

    def _spawnpty(self, args, **kwargs):
        return ptyprocess.PtyProcess.spawn(args, pass_fds=self._pass_fds,
                                           **kwargs)


class Console:
    """pexpect around the QEMU process whose stdio is the serial port."""

    def __init__(self, child: pexpect.spawn, log: ConsoleLog):
        self.child = child
        self.log = log
        self.panic: str | None = None

    @classmethod
    def spawn(cls, argv: list[str], echo: bool = False,
              preexec_fn=None, pass_fds=()) -> "Console":
        log = ConsoleLog(echo=sys.stderr if echo else None)
        child = _Spawn(argv[0], argv[1:], timeout=None,
                       preexec_fn=preexec_fn, echo=False,
                       dimensions=(50, 200), pass_fds=pass_fds)
        child.logfile_read = log
        return cls(child, log)

    async def watch(self) -> None:
        """Consume console output until EOF; remember a kernel panic."""
        while True:
            i = await self.child.expect([PANIC_RE, pexpect.EOF],
                                        timeout=None, async_=True)
            if i == 1:
                return
            if self.panic is None:
                self.panic = self.child.after.decode("utf-8", "replace")

    def drain(self, timeout: float = 2.0) -> None:
        """Read what QEMU still prints until it exits (or ``timeout``)."""
        try:
            self.child.expect(pexpect.EOF, timeout=timeout)
        except pexpect.ExceptionPexpect:
            pass

    def alive(self) -> bool:
        return self.child.isalive()

    def terminate(self) -> None:
        """Stop QEMU for good and reap it."""
        if self.child.isalive():
            self.child.terminate(force=True)
        try:
            self.child.wait()
        except pexpect.ExceptionPexpect:
            pass
        self.child.close(force=True)

    def exit_status(self) -> int | None:
        return self.child.exitstatus
