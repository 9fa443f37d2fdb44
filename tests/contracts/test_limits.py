"""Each limit is one number: the guest RAM limit is PVPERF_MAX_RAM_MB in
pvperf_abi.h, mirrored once by pyhost/abi.py, used by the plugin
through the header, and enforced by the CLI before any slow step; below
it the host's memory is the limit (vm/hostmem.py), refused as early."""
from __future__ import annotations

import os
import re
import time

import click
import pytest

from pyhost import abi
from pyhost.cli import EXIT_USAGE, parse_mem
from pyhost.vm import hostmem

from support import REPO, run_pvperf
from test_abi import c_int, header_defines


def test_ram_limit_is_the_abi_header_constant():
    assert c_int(header_defines()["PVPERF_MAX_RAM_MB"]) == abi.MAX_RAM_MB


def test_python_defines_the_ram_limit_once():
    defs = []
    for path in sorted((REPO / "pyhost").rglob("*.py")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.match(r"\s*(\w+_)?(MAX_(\w+_)?(RAM|MEM)|(RAM|MEM)_(\w+_)?MAX)"
                        r"(_\w+)?\s*=", line):
                defs.append(f"{path.relative_to(REPO)}:{n}")
    assert defs == ["pyhost/abi.py:" + str(next(
        n for n, line in enumerate(
            (REPO / "pyhost/abi.py").read_text().splitlines(), 1)
        if line.startswith("MAX_RAM_MB =")))]


def test_plugin_takes_the_ram_limit_from_the_header():
    """The plugin has no RAM limit of its own (a #define of a RAM or
    memory size, or a literal GiB limit) and uses PVPERF_MAX_RAM_MB."""
    sources = sorted(p for d in ("pvperf", "rmap")
                     for p in (REPO / "qemu_plugin" / d).glob("*.[ch]"))
    used = False
    for path in sources:
        text = path.read_text()
        used |= "PVPERF_MAX_RAM_MB" in text
        for n, line in enumerate(text.splitlines(), 1):
            assert not re.search(r"#define\s+(\w+_)?(RAM|MEM)(_\w+)?\s+\(?\d",
                                 line), \
                f"{path.relative_to(REPO)}:{n}: {line.strip()}"
            assert not re.search(r"\b[23]ULL\s*<<\s*30\b|\b[23]\s*<<\s*30\b",
                                 line), \
                f"{path.relative_to(REPO)}:{n}: {line.strip()}"
    assert used, "no qemu_plugin source uses PVPERF_MAX_RAM_MB"


def test_cli_accepts_up_to_the_limit_and_no_more(monkeypatch):
    big = hostmem.HostMemory(available_mb=abi.MAX_RAM_MB * 2,
                             shm_free_mb=abi.MAX_RAM_MB)
    monkeypatch.setattr(hostmem, "host_memory", lambda: big)
    assert parse_mem(f"{abi.MAX_RAM_MB}M") == abi.MAX_RAM_MB
    assert parse_mem(f"{abi.MAX_RAM_MB // 1024}G") == abi.MAX_RAM_MB
    for too_big in (f"{abi.MAX_RAM_MB + 1}M",
                    f"{abi.MAX_RAM_MB // 1024 + 1}G"):
        with pytest.raises(click.BadParameter, match=str(abi.MAX_RAM_MB)):
            parse_mem(too_big)


def test_too_much_ram_is_refused_before_boot_in_one_line(tmp_path):
    """With an empty image cache, reaching the image step would start a
    build: the refusal must come first, fast, in one line."""
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path))
    t0 = time.monotonic()
    r = run_pvperf(["run", "--mem", f"{abi.MAX_RAM_MB // 1024 + 1}G", "--",
                    "true"], env=env, timeout=60)
    assert time.monotonic() - t0 < 20
    assert r.returncode == EXIT_USAGE, r.stderr
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pvperf: "), r.stderr
    assert "--mem" in lines[0] and str(abi.MAX_RAM_MB) in lines[0]
    assert not (tmp_path / "pvperf").exists()


MEMINFO = """MemTotal:       24683652 kB
MemFree:        20000000 kB
MemAvailable:   23712060 kB
Buffers:          123456 kB
"""


def test_host_limit_is_available_memory_less_the_reserve_and_shm():
    assert hostmem.mem_available_mb(MEMINFO) == 23712060 >> 10
    with pytest.raises(ValueError):
        hostmem.mem_available_mb("MemTotal: 1 kB\n")
    roomy_shm = hostmem.HostMemory(available_mb=8192, shm_free_mb=1 << 20)
    assert roomy_shm.limit_mb == 8192 - hostmem.RESERVE_MB
    small_shm = hostmem.HostMemory(available_mb=1 << 20, shm_free_mb=3000)
    assert small_shm.limit_mb == 3000
    assert hostmem.HostMemory(100, 100).limit_mb == 0


def test_more_than_the_host_has_is_refused_naming_what_it_has():
    host = hostmem.HostMemory(available_mb=8192, shm_free_mb=6000)
    hostmem.check_host(6000, host)
    with pytest.raises(Exception) as e:
        hostmem.check_host(6001, host)
    text = str(e.value)
    assert "MemAvailable 8192 MiB" in text and "6000 MiB free" in text
    assert "6000M" in text


def test_more_ram_than_this_host_has_is_refused_before_boot(tmp_path):
    """A size under the ABI's ceiling that this host cannot give: one
    line naming the host's figures, before any image step."""
    host = hostmem.host_memory()
    want = host.limit_mb + 1024
    if want > abi.MAX_RAM_MB:
        pytest.skip(f"this host can give {host.limit_mb} MiB, near the "
                    "ABI's ceiling")
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path))
    r = run_pvperf(["run", "--mem", f"{want}M", "--", "true"], env=env,
                   timeout=60)
    assert r.returncode == EXIT_USAGE, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pvperf: "), r.stderr
    assert "--mem" in lines[0] and "MemAvailable" in lines[0] and \
        "/dev/shm" in lines[0]
    assert not (tmp_path / "pvperf").exists()
