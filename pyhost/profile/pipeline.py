"""``pvperf profile`` in one call: record -> resolve -> write -> render.

The CLI checks the host (``preflight``) before any slow step, makes the
VM configuration, then calls ``profile``; bench/bench_rmap.py drives the
steps one by one instead (record.record, resolve.resolve).
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Coroutine

from ..vm.launcher import VMConfig
from . import record, resolve, session
from .record import preflight

__all__ = ["Profiled", "preflight", "profile"]


@dataclass(frozen=True)
class Profiled:
    status: int            # the guest command's exit status
    report: str            # the report, as `pvperf report` prints it


def profile(config: VMConfig, output: Path, *, tb_size_mb: int | None = None,
            perfmap: bool = False, table_sort: str = "host",
            counts: bool = True,
            run: Callable[[Coroutine], Any] = asyncio.run) -> Profiled:
    """Run ``config``'s command while sampling QEMU, resolve every sample
    and write session.json and its renderings into ``output``.  ``run``
    runs the recording coroutine (the CLI's also stops it on SIGTERM);
    resolving runs after it, outside the event loop, where Ctrl-C
    interrupts it at once."""
    output.mkdir(parents=True, exist_ok=True)
    rec = run(record.record(config, output.resolve(), tb_size_mb=tb_size_mb,
                            perfmap=perfmap, counts=counts))
    try:
        sess = resolve.resolve(rec, config.image, config.share)
    finally:
        record.remove_workdir(rec.workdir)
    session.write_session(sess, output)
    return Profiled(rec.status, session.render_all(sess, output,
                                                   table_sort))
