"""QMP helpers on top of qemu.qmp (asyncio).

QMP runs over a socketpair whose other end QEMU inherited as a connected
client chardev (vm/channels.py): no name anyone else could connect to, no
retry.  The session is up once QEMU's main loop runs (QEMU answers
qmp_capabilities there: the machine and the plugin are set up by then);
QEMU's exit before that is EOF.
"""
from __future__ import annotations

import asyncio
import logging
import socket
import time

from qemu.qmp import QMPClient
from qemu.qmp.error import QMPError

from ..errors import VMError

# qemu.qmp logs a failed session and QEMU's exit at ERROR; pvperf reports
# failures itself.
logging.getLogger("qemu.qmp").setLevel(logging.CRITICAL)


async def connect(sock: socket.socket, timeout: float) -> QMPClient:
    """Open the QMP session on pvperf's end ``sock`` of QEMU's monitor."""
    client = QMPClient("pvperf")
    try:
        await asyncio.wait_for(client.connect(sock), timeout)
        return client
    except (QMPError, OSError, EOFError, asyncio.TimeoutError) as e:
        inner = e.__cause__ if isinstance(e, QMPError) and e.__cause__ \
            else e
        if isinstance(inner, EOFError):
            cause = "QEMU exited during start-up"
        elif isinstance(inner, asyncio.TimeoutError):
            cause = f"no QMP greeting within {timeout:g} s"
        else:
            cause = str(inner)
        raise VMError("connecting to QEMU's QMP", cause,
                      "see the console lines below", exc=e) from e


async def inject_nmi(client: QMPClient) -> None:
    """Raise an NMI on every vCPU (x86 QMP semantics)."""
    await client.execute("inject-nmi")


async def wait_connected(client: QMPClient, labels, timeout: float = 5):
    """Wait until QEMU has accepted a client on each socket chardev in
    ``labels`` (query-chardev names an unaccepted one "disconnected:...")."""
    deadline = time.monotonic() + timeout
    while True:
        pending = [c["label"] for c in await client.execute("query-chardev")
                   if c["label"] in labels and
                   c["filename"].startswith("disconnected:")]
        if not pending:
            return
        if time.monotonic() > deadline:
            raise VMError("connecting to the guest's ports",
                          f"QEMU did not accept {', '.join(pending)}",
                          "run again with --debug")
        await asyncio.sleep(0.005)


async def cont(client: QMPClient) -> None:
    """Start a VM that QEMU was told to hold (-S)."""
    await client.execute("cont")


async def close(client: QMPClient | None) -> None:
    if client is None:
        return
    try:
        await asyncio.wait_for(client.disconnect(), timeout=2)
    except (QMPError, OSError, EOFError, asyncio.TimeoutError):
        # disconnect() re-raises what ended the connection: after the
        # guest powered off, QEMU closing the socket (EOFError) is normal.
        pass


async def stop(client: QMPClient) -> None:
    """Pause every vCPU (returns once they are all stopped)."""
    await client.execute("stop")


async def migrate_to_file(client: QMPClient, path) -> None:
    """Migrate the (stopped) VM into the file ``path`` and wait for it."""
    try:
        await client.execute("migrate", {"uri": f"file:{path}"})
    except QMPError as e:
        raise VMError("taking the checkpoint", f"QEMU refused to migrate: "
                      f"{e}", "see docs/checkpoints.md") from e
    await wait_migration(client, "taking the checkpoint")


async def wait_migration(client: QMPClient, what: str,
                         timeout: float = 600) -> None:
    """Until the outgoing or incoming migration completes."""
    deadline = time.monotonic() + timeout
    while True:
        info = await client.execute("query-migrate")
        status = info.get("status", "none")
        if status == "completed":
            return
        if status in ("failed", "cancelled") or \
                time.monotonic() > deadline:
            raise VMError(what, f"migration {status}: "
                          f"{info.get('error-desc', 'no reason given')}",
                          "run again with --debug")
        await asyncio.sleep(0.02)


async def quit(client: QMPClient) -> None:
    """Make QEMU exit (its plugins' atexit callbacks run)."""
    try:
        await client.execute("quit")
    except (QMPError, OSError, EOFError):
        pass        # QEMU may close the socket before answering
