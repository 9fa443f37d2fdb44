"""The launcher's pieces, without booting (boots are in test_e2e_run.py)."""
import asyncio
import os
import subprocess

import pytest

from pyhost.vm import launcher as vm_mod
from pyhost.errors import SetupError, VMError
from pyhost.image.store import GuestImage
from pyhost.vm.launcher import VM, Runstate, VMConfig, sweep_stale_shm


def fake_image(tmp_path) -> GuestImage:
    return GuestImage("t", tmp_path / "vmlinux", tmp_path / "initramfs.cpio",
                      tmp_path / "System.map", tmp_path / "root", "6.1.0-t")


def test_argv_has_shared_ram_private_sockets_and_escaped_command(tmp_path):
    cfg = VMConfig(image=fake_image(tmp_path), command="echo a,b",
                   share=tmp_path, pmu=False, smp=2, mem_mb=512)
    argv = VM(cfg).qemu_argv()
    joined = " ".join(argv)
    assert "memory-backend-file,id=ram,size=512M,mem-path=/dev/shm/pvperf-" \
        in joined and "share=on" in joined
    assert joined.count("abstract=on,server=on,wait=off") == 4
    assert "name=opt/org.pvperf/cmd,string=echo a,,b" in argv
    assert "-plugin" not in argv and "pvperf.pmu=1" not in joined
    assert argv[argv.index("-smp") + 1] == "2"
    assert f"path={tmp_path}" in joined


def test_sweep_removes_only_dead_owners_files(tmp_path, monkeypatch):
    monkeypatch.setattr(vm_mod, "SHM_DIR", tmp_path)
    dead = subprocess.Popen(["true"])
    dead.wait()
    live = tmp_path / f"pvperf-{os.getppid()}-aa"
    stale = tmp_path / f"pvperf-{dead.pid}-bb"
    other = tmp_path / "unrelated"
    for p in (live, stale, other):
        p.write_text("")
    assert sweep_stale_shm() == [str(stale)]
    assert live.exists() and other.exists() and not stale.exists()


def test_failed_start_returns_to_idle_and_leaves_nothing(tmp_path):
    cfg = VMConfig(image=fake_image(tmp_path), share=tmp_path, pmu=False,
                   qemu="no-such-qemu-binary")
    machine = VM(cfg)
    with pytest.raises(SetupError, match="not found"):
        asyncio.run(machine.start())
    assert machine.transitions == [Runstate.IDLE, Runstate.STARTING,
                                   Runstate.STOPPING, Runstate.IDLE]
    assert not machine.ram_path.exists()


def test_bad_mem_is_refused_before_anything_starts(tmp_path):
    cfg = VMConfig(image=fake_image(tmp_path), share=tmp_path, pmu=False,
                   mem_mb=8192)
    machine = VM(cfg)
    with pytest.raises(VMError, match="--mem"):
        asyncio.run(machine.start())
    assert machine.runstate is Runstate.IDLE


def test_methods_require_their_state(tmp_path):
    machine = VM(VMConfig(image=fake_image(tmp_path), pmu=False))
    with pytest.raises(VMError, match="not allowed while idle"):
        asyncio.run(machine.wait_ready())
