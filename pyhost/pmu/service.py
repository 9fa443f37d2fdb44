"""The host service the TCG plugin talks to (one unix socket per VM).

Threads, not asyncio, on purpose: a hypercall stalls its vCPU until the
reply arrives, so the round trip is the guest-visible latency; a blocking
recv/send per vCPU connection costs least.  Each connection thread runs
``PerfBackend.handle`` (which serialises on the backend's lock).

Who may connect.  The socket is a filesystem path that the caller puts in
a directory only its user can enter (vm/channels.py: the run directory,
mode 0700), so no other user reaches it; and every accepted connection
must come, by SO_PEERCRED, from our effective uid and from the one
process named by ``allow_peer`` (the QEMU child, whose plugin connects
every vCPU at install).  Anything else is closed unserved and logged
once.  Once every vCPU has connected, ``stop_listening`` closes the
listener and unlinks the socket: nobody can connect any more.

Runstate:  IDLE --start()--> RUNNING --stop()--> IDLE
"""
from __future__ import annotations

import contextlib
import enum
import logging
import os
import select
import socket
import struct
import threading
import time

from . import plugin_protocol as proto
from ..errors import ServiceError
from .hypercall import PerfBackend

log = logging.getLogger("pvperf.service")

# How long an accepted connection waits for allow_peer() (the launcher
# calls it right after spawning QEMU, whose plugin connects only later).
PEER_WAIT = 30.0
_OVERFLOW_MAGIC = proto.OVERFLOW_MAGIC.to_bytes(4, "little")
_UCRED = struct.Struct("3i")        # struct ucred: pid, uid, gid


class Runstate(enum.Enum):
    IDLE = "idle"
    RUNNING = "running"


def peer_cred(conn: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process that connected ``conn``."""
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    return _UCRED.unpack(raw)


class PluginService:
    """Accepts the plugin's connections on the unix socket ``path``."""

    def __init__(self, backend: PerfBackend, path: str):
        self.backend = backend
        self.path = str(path)
        self.runstate = Runstate.IDLE
        self.accepted = 0               # connections served
        self.refused = 0                # foreign peers closed unserved
        self._listener: socket.socket | None = None
        self._threads: list[threading.Thread] = []
        self._conns: list[socket.socket] = []
        self._stopping = threading.Event()
        self._peer_pid: int | None = None
        self._peer_known = threading.Event()
        # Messages received and not yet served (idle() below).
        self._busy = 0
        self._busy_lock = threading.Lock()
        # Overflow messages served and the thread CPU seconds they took.
        self.overflow_cpu = [0, 0.0]

    def overflow_summary(self) -> str:
        """What each overflow message cost the service (the debug log)."""
        n, cpu = self.overflow_cpu
        return f"{n} overflow messages, {cpu / max(n, 1) * 1e6:.0f} us " \
               f"of service CPU each"

    @property
    def plugin_address(self) -> str:
        """The plugin's ``sock=`` option."""
        return self.path

    def allow_peer(self, pid: int) -> None:
        """Serve connections from process ``pid`` (and our uid) only."""
        self._peer_pid = pid
        self._peer_known.set()

    def start(self) -> None:
        if self.runstate is not Runstate.IDLE:
            raise ServiceError("service start", f"already {self.runstate.value}")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            sock.bind(self.path)
            sock.listen(64)
        except OSError as e:
            sock.close()
            raise ServiceError("service start", str(e), exc=e) from e
        self._listener = sock
        self._stopping.clear()
        self._spawn(self._accept_loop, "pvperf-accept")
        self.runstate = Runstate.RUNNING

    def stop_listening(self) -> None:
        """No new connection from now on: close the listener, unlink the
        socket; the connections already served go on."""
        listener, self._listener = self._listener, None
        if listener is not None:
            # shutdown() wakes the thread blocked in accept().
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def stop(self) -> None:
        if self.runstate is not Runstate.RUNNING:
            return
        self._stopping.set()
        self._peer_known.set()          # wakes a pending peer check
        self.stop_listening()
        # shutdown() wakes the threads blocked in recv().
        for s in self._conns:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        for t in self._threads:
            t.join(timeout=5)
        for s in self._conns:
            s.close()
        self._threads.clear()
        self._conns.clear()
        self.runstate = Runstate.IDLE

    def idle(self) -> bool:
        """No message waiting in any connection and none being served.

        With every vCPU stopped no new message can come, so two idle()
        a few milliseconds apart mean every overflow sent before the stop
        has been delivered (checkpoints: vm/checkpoint.py).  Two, because
        a thread that has just received a message counts itself busy only
        once it holds the GIL again."""
        conns = [c for c in self._conns if c.fileno() >= 0]
        try:
            readable, _, _ = select.select(conns, [], [], 0)
        except (OSError, ValueError):
            readable = []
        with self._busy_lock:
            return not readable and not self._busy

    def _spawn(self, target, name, *args) -> None:
        t = threading.Thread(target=target, args=args, name=name, daemon=True)
        self._threads.append(t)
        t.start()

    def _accept_loop(self) -> None:
        listener = self._listener
        while not self._stopping.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            if not self._trusted(conn):
                conn.close()
                continue
            self._conns.append(conn)
            self.accepted += 1
            self._spawn(self._serve, "pvperf-vcpu", conn)

    def _trusted(self, conn: socket.socket) -> bool:
        """Is the peer the allowed process, running as our user?"""
        pid, uid, _ = peer_cred(conn)
        self._peer_known.wait(PEER_WAIT)
        if uid == os.geteuid() and pid == self._peer_pid:
            return True
        if not self.refused:            # once: a foreigner may retry
            log.warning("refused a connection to %s from pid %d uid %d "
                        "(only pid %s uid %d may connect)", self.path, pid,
                        uid, self._peer_pid, os.geteuid())
        self.refused += 1
        return False

    def _serve(self, conn: socket.socket) -> None:
        try:
            self._serve_loop(conn)
        finally:
            # A bad or finished connection ends here; stop() closes the rest.
            if not self._stopping.is_set():
                conn.close()

    def _overflow(self, msg) -> None:
        try:
            self.backend.overflow(msg)
        except Exception:  # never let one sample kill the service
            log.exception("overflow failed")

    def _serve_loop(self, conn: socket.socket) -> None:
        while not self._stopping.is_set():
            try:
                raw = conn.recv(max(proto.HCALL_MSG.size,
                                    proto.OVERFLOW_MSG.size) + 1)
            except OSError:
                return
            if not raw:
                return
            with self._busy_lock:
                self._busy += 1
            t0 = time.thread_time()
            try:
                if not self._serve_one(conn, raw):
                    return
            finally:
                with self._busy_lock:
                    self._busy -= 1
                    if raw[:4] == _OVERFLOW_MAGIC:
                        self.overflow_cpu[0] += 1
                        self.overflow_cpu[1] += time.thread_time() - t0

    def _serve_one(self, conn: socket.socket, raw: bytes) -> bool:
        """Serve one message; False once the connection is done for."""
        slots, fd, ring = [], None, None
        try:
            msg = proto.unpack_message(raw)
            if isinstance(msg, proto.OverflowMessage):
                self._overflow(msg)
                # Only a SYNC overflow's vCPU waits for an (empty)
                # answer: the NMI was injected before it, so the guest
                # takes it at the next TB boundary, in the frame that
                # overflowed (callchain events).  Others go on at once.
                if not msg.flags & proto.SYNC:
                    return True
                flags = proto.REPLY_RING if self._doorbell_due(msg.vcpu) \
                    else 0
            else:
                flags, slots = self.backend.handle_reply(msg)
                fd = self._doorbell_handover(msg.vcpu, conn)
                ring = self._ring_handover(msg.vcpu, conn)
        except proto.ProtocolError as e:
            log.warning("plugin protocol error: %s", e)
            return False
        except Exception:  # never let one hypercall kill the service
            log.exception("hypercall failed")
            flags = 0
        try:
            reply = proto.pack_reply(flags, slots, ring)
            if fd is None:
                conn.send(reply)
            else:
                conn.sendmsg([reply], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                        struct.pack("i", fd))])
        except OSError:
            return False
        return True

    # The doorbell (pmu/doorbell.py): the plugin rings it for the SYNC
    # overflows of a vCPU once it holds that vCPU's eventfd.

    def _doorbell(self):
        return self.backend.doorbell()

    def _doorbell_handover(self, vcpu: int, conn) -> int | None:
        door = self._doorbell()
        return door.handover(vcpu, conn) if door is not None else None

    def _ring_handover(self, vcpu: int, conn) -> proto.Ring | None:
        """The vCPU's ring for its plugin to write, if that connection
        holds the vCPU's doorbell (it then delivers samples itself)."""
        door = self._doorbell()
        if door is None or not door.holds(vcpu, conn):
            return None
        return self.backend.ring_for(vcpu)

    def _doorbell_due(self, vcpu: int) -> bool:
        door = self._doorbell()
        return door is not None and door.take_due(vcpu)
