"""Host processes the tests watch: a process tree, its resident memory
over time, the QEMU vCPU thread's CPU time (re-exported by support.py)."""
from __future__ import annotations

import re
import threading
import time
from pathlib import Path


def rss_kib(pid: int) -> int | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    m = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
    return int(m.group(1)) if m else None


class RssSampler(threading.Thread):
    """The resident memory of a process (pvperf: its service, QMP client
    and launcher) every ``period`` seconds until it exits."""

    def __init__(self, pid: int, period: float = 0.25):
        super().__init__(daemon=True)
        self.pid, self.period, self.samples = pid, period, []

    def run(self) -> None:
        t0 = time.monotonic()
        while (kib := rss_kib(self.pid)) is not None:
            self.samples.append((time.monotonic() - t0, kib))
            time.sleep(self.period)

    def growth_kib(self, after: float) -> tuple[int, int, int]:
        """(at ``after`` of the run's duration, peak since, last)."""
        end = self.samples[-1][0]
        later = [k for t, k in self.samples if t >= after * end]
        return later[0], max(later), later[-1]


def descendants(root: int) -> list[int]:
    """Process root and every process below it."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue                        # gone
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def qemu_vcpu_thread(root: int) -> Path:
    """The task directory of the vCPU thread of the QEMU below process
    root (QEMU names it "CPU 0/TCG": pvperf starts it with
    debug-threads=on)."""
    for pid in descendants(root):
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                if (task / "comm").read_text().strip() == "CPU 0/TCG":
                    return task
            except OSError:
                pass
    raise AssertionError("no QEMU vCPU thread under pvperf")


def thread_ns(task: Path) -> int:
    return int((task / "schedstat").read_text().split()[0])
