"""NMI injection: the service's thread-safe path to QMP ``inject-nmi``.

Wiring (vm/launcher.py, in this order): the VM creates one
``NmiInjector`` with the PMU backend, before QEMU runs; once QMP is
connected it ``bind``s the injector to its asyncio loop and an inject
coroutine; before QMP goes away it ``close``s it.  Requests outside that
window (a sample before QMP is up, or while shutting down) are counted in
``dropped``: the guest driver recovers on the next NMI, and a late NMI
only costs accuracy.

Context hop: the service calls the injector from its per-vCPU threads
(while the vCPU thread that sent the overflow runs on), but the QMP client
belongs to the VM's asyncio loop and must only be used there; so the
request is handed to that loop with run_coroutine_threadsafe and, unless
``wait`` is set, not awaited.  Failures (QEMU gone at shutdown) are
counted, not raised.
"""
from __future__ import annotations

import asyncio
from typing import Awaitable, Callable

# How long a callchain sample waits for its NMI to be raised.
NMI_WAIT_S = 1.0


class NmiInjector:
    """Thread-safe NMI requests, bound to the VM's loop once QMP is up."""

    def __init__(self):
        # (loop, inject) or None; replaced as a whole, so a service thread
        # never sees half of a binding.
        self._target: tuple[asyncio.AbstractEventLoop,
                            Callable[[], Awaitable[None]]] | None = None
        self.sent = self.failed = self.dropped = 0
        self._last = None       # the future of the latest request

    def bind(self, loop: asyncio.AbstractEventLoop,
             inject: Callable[[], Awaitable[None]]) -> None:
        """From now on, requests run ``inject()`` on ``loop``."""
        self._target = (loop, inject)

    def close(self) -> None:
        """No NMI after this (QMP is about to go away)."""
        self._target = None

    # inject-nmi reaches every vCPU (sampling.py counts it in every ring).
    broadcast = True

    def __call__(self, wait: bool = False, inject: bool = True,
                 vcpu: int = 0) -> None:
        """Inject; with ``wait``, block this service thread until QEMU has
        raised the NMI (bounded: a late NMI only costs callchain accuracy).
        ``inject`` False with ``wait``: no new NMI, only wait for the
        latest one (a vCPU held back until its ring will be drained).
        ``vcpu``: ignored, an NMI reaches every vCPU."""
        if not inject:
            if wait and self._last is not None:
                self._wait(self._last)
            return
        target = self._target
        if target is None:
            self.dropped += 1
            return
        loop, inject_nmi = target
        self.sent += 1
        fut = asyncio.run_coroutine_threadsafe(inject_nmi(), loop)
        fut.add_done_callback(self._done)
        self._last = fut
        if wait:
            self._wait(fut)

    async def settle(self, timeout: float = NMI_WAIT_S) -> None:
        """On the bound loop: until the latest request has reached QEMU
        (a checkpoint must not migrate the VM before its NMIs are in)."""
        last = self._last
        if last is not None and not last.done():
            await asyncio.wait([asyncio.wrap_future(last)], timeout=timeout)

    @staticmethod
    def _wait(fut) -> None:
        try:
            fut.result(timeout=NMI_WAIT_S)
        except Exception:   # counted by _done; never fail the sample
            pass

    def _done(self, fut) -> None:
        if fut.cancelled() or fut.exception() is not None:
            self.failed += 1
