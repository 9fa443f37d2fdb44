"""What the Arch entries' tests share: a QEMU command line built for an
architecture without starting anything."""
import pytest

from pyhost.image.store import GuestImage
from pyhost.vm.launcher import VM, VMConfig


@pytest.fixture
def fake_image_files(tmp_path):
    """A GuestImage whose files need not exist."""
    return GuestImage("t", tmp_path / "vmlinux", tmp_path / "initramfs",
                      tmp_path / "System.map", tmp_path / "root", "6.1.0-t")


@pytest.fixture
def argv_of(fake_image_files):
    """argv_of(arch) -> the launcher's QEMU argv for that architecture
    (no PMU; QEMU is not run)."""
    def argv_of(arch):
        machine = VM(VMConfig(image=fake_image_files, pmu=False, arch=arch,
                              qemu="true"))
        argv = machine.qemu_argv()
        machine.channels.close()
        return argv
    return argv_of
