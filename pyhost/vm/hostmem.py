"""How much guest RAM this host can give.

Guest RAM is a file in /dev/shm (the launcher's memory-backend-file):
each page the guest touches becomes a tmpfs page, host memory that
cannot be swapped out or reclaimed while QEMU runs.  A guest larger than
the host's available memory or than /dev/shm's free space runs until it
touches the page that is not there: then QEMU dies of SIGBUS, or the host
swaps or kills something else.  So --mem is refused up front beyond
what both can give, less RESERVE_MB for QEMU itself (its TCG code buffer
grows to 1 GiB), the plugin and the service.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from .. import abi
from ..errors import VMError

# What QEMU, the plugin and the service need beside guest RAM (MiB).
RESERVE_MB = 1024
MEMINFO = "/proc/meminfo"
SHM_DIR = "/dev/shm"
# the smallest guest RAM pvperf boots (MiB)
MIN_MEM_MB = 64


@dataclass(frozen=True)
class HostMemory:
    available_mb: int       # /proc/meminfo MemAvailable
    shm_free_mb: int        # free space in /dev/shm (statvfs)

    @property
    def limit_mb(self) -> int:
        """The largest guest RAM the host can give."""
        return max(0, min(self.available_mb - RESERVE_MB, self.shm_free_mb))


def mem_available_mb(meminfo: str) -> int:
    """MemAvailable (MiB) from the text of /proc/meminfo."""
    for line in meminfo.splitlines():
        key, _, value = line.partition(":")
        if key == "MemAvailable":
            kib, unit = value.split()
            if unit != "kB":
                break
            return int(kib) >> 10
    raise ValueError("no MemAvailable in /proc/meminfo")


def host_memory() -> HostMemory:
    with open(MEMINFO) as f:
        available = mem_available_mb(f.read())
    st = os.statvfs(SHM_DIR)
    return HostMemory(available, st.f_bavail * st.f_frsize >> 20)


def check_host(mem_mb: int, host: HostMemory | None = None) -> None:
    """Refuse guest RAM this host cannot give, naming what it has."""
    host = host or host_memory()
    if mem_mb > host.limit_mb:
        raise VMError(
            "bad --mem", f"{mem_mb} MiB is more than this host can give "
            f"(MemAvailable {host.available_mb} MiB less {RESERVE_MB} MiB "
            f"for QEMU; {SHM_DIR} {host.shm_free_mb} MiB free)",
            f"use at most {host.limit_mb}M")


def check_mem(mem_mb: int, host: "HostMemory | None" = None) -> None:
    """Refuse guest RAM outside MIN_MEM_MB..abi.MAX_RAM_MB (what pvperf's
    RAM layouts describe, pvperf_abi.h PVPERF_MAX_RAM_MB) or beyond what
    this host can give (check_host; ``host``: its figures, default read
    now)."""
    if not MIN_MEM_MB <= mem_mb <= abi.MAX_RAM_MB:
        raise VMError("bad --mem", f"{mem_mb} MiB is outside "
                      f"{MIN_MEM_MB}M..{abi.MAX_RAM_MB}M",
                      f"use at most {abi.MAX_RAM_MB}M "
                      f"({abi.MAX_RAM_MB // 1024}G)")
    check_host(mem_mb, host)
