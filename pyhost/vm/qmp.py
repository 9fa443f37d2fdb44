"""QMP helpers on top of qemu.qmp (asyncio).

QEMU listens on a private abstract-namespace unix socket (nothing on disk);
``connect`` retries until QEMU has created it or the deadline passes.
"""
from __future__ import annotations

import asyncio
import logging
import time

from qemu.qmp import QMPClient
from qemu.qmp.error import QMPError

from ..errors import VMError

# qemu.qmp logs each refused connect attempt (expected while QEMU starts)
# and QEMU's exit at ERROR; pvperf reports failures itself.
logging.getLogger("qemu.qmp").setLevel(logging.CRITICAL)


async def connect(name: str, timeout: float, alive=lambda: True) -> QMPClient:
    """Connect to QEMU's QMP socket ``name`` (abstract namespace)."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline and alive():
        client = QMPClient("pvperf")
        try:
            await client.connect("\0" + name)
            return client
        except (QMPError, OSError) as e:
            last = e
            await asyncio.sleep(0.02)
    raise VMError("connecting to QEMU's QMP socket",
                  str(last) if last else "QEMU exited during start-up",
                  "see the console lines below", exc=last)


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
