"""The launcher's pieces, without booting (boots are in test_e2e_run.py)."""
import asyncio
import os
import stat
import subprocess
import tempfile

import pytest

from pyhost import abi
from pyhost.vm import channels, hostmem, launcher as vm_mod
from pyhost.errors import SetupError, VMError
from pyhost.image.store import GuestImage
from pyhost.vm.channels import sweep_stale_shm
from pyhost.vm.launcher import VM, Runstate, VMConfig


def fake_image(tmp_path) -> GuestImage:
    return GuestImage("t", tmp_path / "vmlinux", tmp_path / "initramfs.cpio",
                      tmp_path / "System.map", tmp_path / "root", "6.1.0-t")


def test_argv_has_shared_ram_private_sockets_and_escaped_command(tmp_path):
    cfg = VMConfig(image=fake_image(tmp_path), command="echo a,b",
                   share=tmp_path, pmu=False, smp=2, mem_mb=512)
    machine = VM(cfg)
    argv = machine.qemu_argv()
    joined = " ".join(argv)
    assert "memory-backend-file,id=ram,size=512M,mem-path=/dev/shm/pvperf-" \
        in joined and "share=on" in joined
    # every chardev is an inherited, already connected socket: no name
    chardevs = [argv[i + 1] for i, a in enumerate(argv) if a == "-chardev"]
    assert [c.split(",")[:2] for c in chardevs] == [
        ["socket", f"id={p}"] for p in ("qmp", "control", "stdout", "stderr")]
    fds = [int(c.split("fd=")[1]) for c in chardevs]
    assert sorted(fds) == sorted(machine.channels.pass_fds)
    assert all(os.get_inheritable(fd) for fd in fds)
    assert "path=" not in " ".join(chardevs) and "abstract" not in joined
    machine.channels.close()
    assert "name=opt/org.pvperf/cmd,string=echo a,,b" in argv
    assert "-plugin" not in argv and "pvperf.pmu=1" not in joined
    assert argv[argv.index("-smp") + 1] == "2"
    assert f"path={tmp_path}" in joined


def test_sweep_removes_only_dead_owners_files(tmp_path, monkeypatch):
    monkeypatch.setattr(channels, "SHM_DIR", tmp_path)
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


@pytest.mark.parametrize("beyond", ["abi", "host"])
def test_bad_mem_is_refused_before_anything_starts(tmp_path, monkeypatch,
                                                    beyond):
    """Above the ABI's ceiling, or above what the host can give."""
    mem_mb = abi.MAX_RAM_MB + 1
    if beyond == "host":
        small = hostmem.HostMemory(available_mb=4096, shm_free_mb=4096)
        monkeypatch.setattr(hostmem, "host_memory", lambda: small)
        mem_mb = 4096
    cfg = VMConfig(image=fake_image(tmp_path), share=tmp_path, pmu=False,
                   mem_mb=mem_mb)
    machine = VM(cfg)
    with pytest.raises(VMError, match="--mem"):
        asyncio.run(machine.start())
    assert machine.runstate is Runstate.IDLE


def test_methods_require_their_state(tmp_path):
    machine = VM(VMConfig(image=fake_image(tmp_path), pmu=False))
    with pytest.raises(VMError, match="not allowed while idle"):
        asyncio.run(machine.wait_ready())


def _dead_pid() -> int:
    dead = subprocess.Popen(["true"])
    dead.wait()
    return dead.pid


def test_run_dir_is_private_and_swept_only_for_dead_owners(tmp_path,
                                                           monkeypatch):
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    mine = channels.make_run_dir()
    assert mine.parent == tmp_path and mine.name.startswith(
        f"pvperf-{os.getpid()}-")
    assert stat.S_IMODE(mine.stat().st_mode) == 0o700
    dead = _dead_pid()
    stale = tmp_path / f"pvperf-{dead}-aa"
    (stale / "sub").mkdir(parents=True)
    (stale / "svc").write_text("")
    foreign = tmp_path / f"pvperf-{dead}-bb"        # another user's
    foreign.mkdir()
    os.chown(foreign, 65534, 65534)
    link = tmp_path / f"pvperf-{dead}-cc"           # never followed
    target = tmp_path / "target"
    target.mkdir()
    (target / "keep").write_text("")
    link.symlink_to(target)
    live = tmp_path / f"pvperf-{os.getppid()}-dd"
    live.mkdir()
    assert channels.sweep_run_dirs() == [str(stale)]
    assert mine.exists() and foreign.exists() and live.exists()
    assert (target / "keep").exists() and link.is_symlink()
    channels.remove_run_dir(mine)
    assert not mine.exists()


def test_run_dir_prefers_a_private_xdg_runtime_dir(tmp_path, monkeypatch):
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(xdg))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert channels.run_dir_parent() == xdg
    xdg.chmod(0o755)                    # not private: not used
    assert channels.run_dir_parent() == tmp_path


def test_too_long_run_dir_is_a_clear_error(tmp_path, monkeypatch):
    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    with pytest.raises(SetupError, match="too long for a unix socket"):
        channels.make_run_dir()
    assert list(deep.iterdir()) == []


def test_smp_limits_are_the_architectures():
    from pyhost.arch import aarch64, x86_64
    from pyhost.vm.boot import check_smp
    check_smp(16, x86_64.ARCH)
    check_smp(16, aarch64.ARCH)
    for smp, arch in ((0, x86_64.ARCH), (17, x86_64.ARCH), (17, aarch64.ARCH)):
        with pytest.raises(VMError, match=f"{smp} vCPUs"):
            check_smp(smp, arch)


def test_arm64_takes_gicv3_only_above_gicv2s_eight_cpus():
    """virt's GICv2 serves 8 CPUs and its GICv2m frame carries the
    doorbell's MSI-X with shorter round trips than GICv3's ITS: GICv3 only
    where GICv2 cannot serve."""
    from pyhost.arch import aarch64, x86_64
    assert aarch64.ARCH.machine_for(8) == "virt"
    assert aarch64.ARCH.machine_for(9) == "virt,gic-version=3"
    assert x86_64.ARCH.machine_for(16) == x86_64.ARCH.machine


def test_boot_timeout_grows_with_vcpus_per_host_core(monkeypatch):
    from pyhost.vm.boot import BOOT_TIMEOUT, boot_timeout
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert boot_timeout(1) == boot_timeout(2) == BOOT_TIMEOUT
    assert boot_timeout(16) == 8 * BOOT_TIMEOUT
