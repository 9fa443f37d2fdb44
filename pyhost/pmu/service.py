"""The host service the TCG plugin talks to (one unix socket per VM).

Threads, not asyncio, on purpose: a hypercall stalls its vCPU until the
reply arrives, so the round trip is the guest-visible latency; a blocking
recv/send per vCPU connection costs least.  Each connection thread runs
``PerfBackend.handle`` (which serialises on the backend's lock).

Runstate:  IDLE --start()--> RUNNING --stop()--> IDLE
"""
from __future__ import annotations

import enum
import logging
import os
import socket
import threading

from . import plugin_protocol as proto
from ..errors import ServiceError
from .hypercall import PerfBackend

log = logging.getLogger("pvperf.service")


class Runstate(enum.Enum):
    IDLE = "idle"
    RUNNING = "running"


def abstract_name(tag: str) -> str:
    """A unique abstract-namespace socket name (nothing on disk to clean)."""
    return f"pvperf-{os.getpid()}-{os.urandom(4).hex()}-{tag}"


class PluginService:
    """Accepts plugin connections on an abstract unix socket."""

    def __init__(self, backend: PerfBackend, name: str | None = None):
        self.backend = backend
        self.name = name or abstract_name("svc")
        self.runstate = Runstate.IDLE
        self._listener: socket.socket | None = None
        self._threads: list[threading.Thread] = []
        self._conns: list[socket.socket] = []
        self._stopping = threading.Event()

    @property
    def plugin_address(self) -> str:
        """The plugin's ``sock=`` option ('@' marks the abstract namespace)."""
        return "@" + self.name

    def start(self) -> None:
        if self.runstate is not Runstate.IDLE:
            raise ServiceError("service start", f"already {self.runstate.value}")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            sock.bind("\0" + self.name)
            sock.listen(64)
        except OSError as e:
            sock.close()
            raise ServiceError("service start", str(e), exc=e) from e
        self._listener = sock
        self._stopping.clear()
        self._spawn(self._accept_loop, "pvperf-accept")
        self.runstate = Runstate.RUNNING

    def stop(self) -> None:
        if self.runstate is not Runstate.RUNNING:
            return
        self._stopping.set()
        # shutdown() wakes the threads blocked in accept()/recv().
        for s in [self._listener, *self._conns]:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in self._threads:
            t.join(timeout=5)
        for s in [self._listener, *self._conns]:
            s.close()
        self._threads.clear()
        self._conns.clear()
        self._listener = None
        self.runstate = Runstate.IDLE

    def _spawn(self, target, name, *args) -> None:
        t = threading.Thread(target=target, args=args, name=name, daemon=True)
        self._threads.append(t)
        t.start()

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self._conns.append(conn)
            self._spawn(self._serve, "pvperf-vcpu", conn)

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
            slots = []
            try:
                msg = proto.unpack_message(raw)
                if isinstance(msg, proto.OverflowMessage):
                    self._overflow(msg)
                    # Only a SYNC overflow's vCPU waits for an (empty)
                    # answer: the NMI was injected before it, so the guest
                    # takes it at the next TB boundary, in the frame that
                    # overflowed (callchain events).  Others go on at once.
                    if not msg.flags & proto.SYNC:
                        continue
                    flags, slots = 0, []
                else:
                    flags, slots = self.backend.handle_reply(msg)
            except proto.ProtocolError as e:
                log.warning("plugin protocol error: %s", e)
                return
            except Exception:  # never let one hypercall kill the service
                log.exception("hypercall failed")
                flags = 0
            try:
                conn.send(proto.pack_reply(flags, slots))
            except OSError:
                return
