"""The overflow interrupt without QMP: pvperf as the ivshmem server of
QEMU's ``ivshmem-doorbell`` device.

QEMU's protocol (docs/specs/ivshmem-spec.rst in QEMU's source): the server
sends little-endian int64 messages over a unix stream socket, file
descriptors by SCM_RIGHTS: the protocol version (0), the client's own id,
-1 with the shared memory, then the client's id once per vector, each with
that vector's eventfd.  QEMU watches its own vectors' eventfds in its main
loop and raises MSI-X vector N when eventfd N is written.  pvperf gives
one vector per vCPU; the guest driver binds vector N to CPU N
(guest_kernel_patch/pvperf_doorbell.c), whose handler drains CPU N's
sample ring.

Privacy (docs/design/design.md, "Clean-up"): the channel is a socketpair whose
other end QEMU inherits as an already connected chardev (as QMP's), the
shared memory an anonymous memfd (nothing in /dev/shm), the eventfds
anonymous too: all of it exists only as descriptors of pvperf and of its
QEMU, and goes when they exit, killed or not.  Every message is sent
before QEMU starts, one ``sendmsg`` each (QEMU reads 8 bytes at a time,
so each descriptor stays with its message).

Raising: ``Doorbell(vcpu=N)`` writes eventfd N from a service thread: one
syscall, no JSON, no QEMU main-loop command under the big lock (QMP
``inject-nmi`` took ~270 us a sample).  QEMU acknowledges nothing, so a
waiter (``wait``: the SYNC overflows of callchain events and of flow
control) polls until QEMU has read the eventfd, which it does right
before it raises the vector in the same main-loop handler.

Handover: the service gives vCPU N's eventfd to the plugin's connection
for that vCPU (SCM_RIGHTS, on a hypercall's reply; pvperf_proto.h,
PVPERF_REPLY_RING), and with it vCPU N's sample ring: from then on the
plugin writes that vCPU's records and rings the eventfd itself, at the
overflow (qemu_plugin/pvperf/ring.c), and nothing here is raised for it.
Without the ring (PVPERF_SERVICE_WRITES=1, or before a restored
checkpoint's first hypercall) a SYNC overflow of that vCPU is not raised
nor waited for here either: its answer says whether an interrupt is due
(``take_due``), and the plugin writes the eventfd and waits on the vCPU's
own thread, in C, without a second trip through the service.
"""
from __future__ import annotations

import asyncio
import os
import select
import socket
import struct
import time

PROTOCOL_VERSION = 0
CLIENT_ID = 0           # QEMU's id; the server has none of its own
SHM_SIZE = 4096         # BAR2; unused, but the protocol hands one over
WAIT_S = 1.0            # how long a waiter waits for QEMU to take a ring
MSG = struct.Struct("<q")


def uses_doorbell(arch, overflow_irq: str, deterministic: bool) -> bool:
    """Whether a run's overflow interrupt is the doorbell: asked for and
    not deterministic (those keep QMP's NMI, whose answer comes once it is
    raised), or the machine has no NMI to inject (then deterministic runs
    rely on the plugin's wait, qemu_plugin/pvperf/ring.c)."""
    return arch.overflow_doorbell and (
        not arch.qmp_nmi or
        overflow_irq == "doorbell" and not deterministic)


def check_overflow_irq(arch, overflow_irq: str) -> None:
    """--overflow-irq qmp needs a machine that provides NMIs."""
    if overflow_irq == "qmp" and not arch.qmp_nmi:
        from ..errors import VMError
        raise VMError("--overflow-irq qmp", f"{arch.machine} ({arch.name}) "
                      "provides no NMI to inject",
                      "use --overflow-irq doorbell")


class Doorbell:
    """One ivshmem-doorbell device's server: a vector per vCPU."""

    # Each vector reaches one vCPU (sampling.py bumps no other ring).
    broadcast = False

    def __init__(self, vectors: int):
        self.vectors = vectors
        self.sent = 0
        # Per vCPU, touched only by the service thread of its connection:
        # the connection holding its eventfd, and whether the answer to
        # the SYNC overflow being served must say RING.
        self._holder: dict[int, object] = {}
        self._due: dict[int, bool] = {}
        self._ours, self._theirs = socket.socketpair(socket.AF_UNIX,
                                                     socket.SOCK_STREAM)
        self._theirs.set_inheritable(True)
        self._efds = [os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
                      for _ in range(vectors)]
        shm = os.memfd_create("pvperf-doorbell", os.MFD_CLOEXEC)
        try:
            os.ftruncate(shm, SHM_SIZE)
            self._handshake(shm)
        finally:
            os.close(shm)       # QEMU has its copy in the socket's queue

    def _send(self, value: int, fd: int | None = None) -> None:
        anc = [] if fd is None else \
            [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", fd))]
        self._ours.sendmsg([MSG.pack(value)], anc)

    def _handshake(self, shm: int) -> None:
        self._send(PROTOCOL_VERSION)
        self._send(CLIENT_ID)
        self._send(-1, shm)
        for efd in self._efds:
            self._send(CLIENT_ID, efd)

    # -- QEMU's command line -------------------------------------------------

    def qemu_args(self, chardev: str = "doorbell") -> list[str]:
        """master=on: the device migrates (checkpoints); a "peer" device
        blocks migration."""
        return ["-chardev", f"socket,id={chardev},fd={self._theirs.fileno()}",
                "-device", f"ivshmem-doorbell,chardev={chardev},"
                           f"vectors={self.vectors},master=on"]

    @property
    def pass_fds(self) -> tuple[int, ...]:
        return (self._theirs.fileno(),)

    def spawned(self) -> None:
        """QEMU has its end."""
        self._theirs.close()

    # -- raising (service threads) -------------------------------------------

    def __call__(self, wait: bool = False, inject: bool = True,
                 vcpu: int = 0) -> None:
        """Raise ``vcpu``'s vector; with ``wait``, return once QEMU took
        it (``inject`` False: only wait for the one already raised)."""
        if not 0 <= vcpu < self.vectors:
            return
        if wait and vcpu in self._holder:
            # A SYNC overflow: its answer carries the ring to the plugin.
            self._due[vcpu] = self._due.get(vcpu, False) or inject
            return
        efd = self._efds[vcpu]
        if inject:
            self.sent += 1
            try:
                os.eventfd_write(efd, 1)
            except OSError:     # closed at shutdown: the guest is gone
                return
        if wait:
            self._wait_taken(efd, time.monotonic() + WAIT_S)

    def handover(self, vcpu: int, conn: object) -> int | None:
        """The eventfd to pass with the reply on ``conn`` (vCPU ``vcpu``'s
        plugin connection), once per connection; None otherwise."""
        if not 0 <= vcpu < self.vectors or self._holder.get(vcpu) is conn:
            return None
        self._holder[vcpu] = conn
        return self._efds[vcpu]

    def holds(self, vcpu: int, conn: object) -> bool:
        """Whether ``conn`` holds ``vcpu``'s eventfd (handed over)."""
        return self._holder.get(vcpu) is conn

    def take_due(self, vcpu: int) -> bool:
        """Whether the SYNC overflow just served must ring (and forget)."""
        return self._due.pop(vcpu, False)

    @staticmethod
    def _pending(efd: int) -> bool:
        try:
            return bool(select.select([efd], [], [], 0)[0])
        except (OSError, ValueError):
            return False

    def _wait_taken(self, efd: int, deadline: float) -> None:
        # Yield, never spin: QEMU's main loop, which takes the eventfd,
        # needs a CPU, and the waiting vCPU's thread may hold the other.
        while self._pending(efd) and time.monotonic() < deadline:
            time.sleep(0)       # (a late interrupt costs accuracy only)

    async def settle(self, timeout: float = WAIT_S) -> None:
        """Until QEMU has taken every raised vector (a checkpoint must not
        migrate the VM before its interrupts are in the guest's state)."""
        deadline = time.monotonic() + timeout
        while any(self._pending(e) for e in self._efds) and \
                time.monotonic() < deadline:
            await asyncio.sleep(0.001)

    def close(self) -> None:
        self.vectors = 0        # service threads raise nothing from now
        efds, self._efds = self._efds, []
        for efd in efds:
            os.close(efd)
        self._ours.close()
        self._theirs.close()
