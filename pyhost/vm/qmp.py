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
