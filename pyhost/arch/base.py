"""The description of a guest architecture, below the modules that fill
it in (x86_64.py, aarch64.py, ...) and the registry that lists them
(``__init__``): an architecture module imports this, never the registry.
"""
from __future__ import annotations

import platform
from dataclasses import dataclass
from typing import Callable

from .. import abi
from ..ram import RamLayout


class UnbootableKernel(Exception):
    """A kernel image QEMU cannot boot on this architecture's machine."""

    def __init__(self, cause: str, hint: str):
        super().__init__(cause)
        self.cause, self.hint = cause, hint


@dataclass(frozen=True)
class BootKernel:
    """The kernel ``qemu -kernel`` boots, made from the Debian package's."""
    image: bytes                 # what QEMU boots (an ELF vmlinux, an Image)
    manifest: dict[str, str]     # what the image manifest records of it
    # (symbol, address) the kernel is linked at, which the test boot's
    # /proc/kallsyms (nokaslr) must agree with; None when unknown
    anchor: tuple[str, int] | None = None


@dataclass(frozen=True)
class StubRegister:
    """A vCPU register as QEMU's gdbstub numbers it (vm/gdbstub.py):
    ``offset`` from the base of the target-description feature
    ``feature``, whose base is the number the feature gives the register
    ``anchor`` minus ``anchor_offset``."""
    feature: str
    anchor: str
    anchor_offset: int
    offset: int


@dataclass(frozen=True)
class TaskPath:
    """How pvperf-rmap.so finds the task a CPU switches to, at the write
    of the page-table base (qemu_plugin/rmap/rmap.c, option task=): from
    the register its arch file names, ``path`` offsets to follow
    (v = *(v + off) each), and the linear map's ``linear`` base: a number
    (a table's physical address is its pgd pointer minus it) or "@ADDR",
    the address where the kernel keeps it."""
    path: tuple[int, ...]
    linear: str


def curr_of_current_rq(member_offset) -> tuple[int, ...]:
    """The offsets from ``current`` (a register's task) to the task its
    CPU switches to, current->se.cfs_rq->rq->curr (CONFIG_FAIR_GROUP_SCHED):
    where the kernel's data symbols (per-cpu ``runqueues``) are not in
    kallsyms, the path starts from the register that holds ``current``."""
    return (member_offset("task_struct", "se")
            + member_offset("sched_entity", "cfs_rq"),
            member_offset("cfs_rq", "rq"), member_offset("rq", "curr"))


# (offset of a member in a struct, by the kernel's BTF; address of a
# symbol, by System.map) -> TaskPath.  Either raises when the kernel
# lacks what the architecture needs.
TaskPathFn = Callable[[Callable[[str, str], int], Callable[[str], int]],
                      TaskPath]

# --smp's limit where the machine allows more: what is checked on a 2-core
# host (tests/vm/test_smp.py: exact per-task counts, no lost samples).
# Nothing in pvperf's code stops here: the plugin's counter store holds
# 4096 vCPUs, the service, the doorbell and the driver size everything by
# the vCPU count; what grows is the boot's host CPU (docs/options.md).
MAX_SMP = 16


@dataclass(frozen=True)
class Arch:
    name: str                    # platform.machine() of hosts it runs on
    # QEMU
    qemu: str                    # the system emulator binary
    qemu_package: str            # the Debian package that ships it
    machine: str                 # -machine type (the launcher adds accel)
    cpu: str                     # -cpu model
    firmware: str                # -bios file ("": none, -kernel boots alone)
    # the overflow interrupt is an ivshmem-doorbell MSI-X vector
    # (pmu/doorbell.py; the driver's pvperf_doorbell.c binds it); False:
    # the architecture's own (x86: the NMI over QMP) or none yet
    overflow_doorbell: bool
    # QMP inject-nmi reaches the guest (x86); without it every run uses
    # the doorbell, deterministic ones too (docs/design/design.md)
    qmp_nmi: bool
    # the guest kernel
    console: str                 # serial console: console= and its /dev node
    console_rdev: tuple[int, int]  # that node's (major, minor)
    kernel_args: tuple[str, ...]   # on every kernel command line (may be ())
    kernel_half_start: int       # guest addresses from here up are kernel's
    # guest physical address of the first byte of RAM, i.e. of the RAM
    # file's offset 0 (one contiguous range from there)
    ram_base: int
    # the package's compressed kernel -> BootKernel; ValueError if nothing
    # bootable is found in it, UnbootableKernel if it lacks what QEMU needs
    boot_kernel: Callable[[bytes], BootKernel]
    # the ELF kernel inside a compressed boot image (ValueError if none),
    # and where QEMU enters an ELF kernel (None: it cannot boot it)
    extract_vmlinux: Callable[[bytes], bytes]
    boot_entry: Callable[[bytes], int | None]
    # the guest userland
    debian_arch: str             # dpkg's name for it
    elf_machine: str             # e_machine of its ELF files (pyelftools' name)
    default_recipe: str          # images/<this>/: the image "default" stands for
    dynamic_loader: str          # ld.so of dynamically linked programs
    # disassembly (annotate): capstone's CS_ARCH_* and CS_MODE_* names
    capstone: tuple[str, str]
    # host profiles: naming the guest task behind an address-space switch
    task_path: TaskPathFn
    # bytes of a lazy-binding PLT stub (after the PLT's header), to name
    # samples in the stubs NAME@plt
    plt_entry: int
    # the boot image's name in the kernel package's /boot, before
    # "-<release>"
    kernel_file: str = "vmlinuz"
    # the gpa range [start, end) RAM skips if it reaches start (the
    # machine's hole below 4 GiB; ram.py), or None: one range
    ram_hole: tuple[int, int] | None = None
    # what pvperf still lacks to be this architecture's guest PMU (the
    # plugin's table, the guest driver); "": nothing, runs may use it
    pmu_missing: str = ""
    # vCPUs its machine serves with pvperf's devices (at most MAX_SMP)
    max_smp: int = MAX_SMP
    # (n, machine): above n vCPUs, this -machine instead of ``machine``
    # (one that serves more CPUs at a cost the smaller guests need not
    # pay); None: ``machine`` for every size
    machine_above: tuple[int, str] | None = None
    # registers a restored checkpoint's vCPUs get written back with their
    # own values (QEMU's gdbstub) before they run: state QEMU's migration
    # restores without what a write of it sets up (vm/gdbstub.py
    # rewrite_registers); (): nothing to do
    rewrite_on_restore: tuple[StubRegister, ...] = ()

    def machine_for(self, smp: int) -> str:
        """The -machine type for a guest of ``smp`` vCPUs."""
        if self.machine_above and smp > self.machine_above[0]:
            return self.machine_above[1]
        return self.machine

    def is_kernel(self, guestpc: int) -> bool:
        """Is ``guestpc`` in the guest kernel's half of the address space?"""
        return guestpc >= self.kernel_half_start

    def runs_on_host(self) -> bool:
        """Can the host run this architecture's programs (busybox, ldd)?"""
        return self.name == platform.machine()

    def ram_layout(self, size: int) -> RamLayout:
        """Where ``size`` bytes of guest RAM sit in guest physical
        memory (ram.py)."""
        return RamLayout(self.ram_base, size, self.ram_hole)

    def ram_offset(self, gpa: int) -> int | None:
        """The RAM file offset of guest physical address ``gpa`` in the
        largest RAM pvperf serves (None: not RAM)."""
        return self.ram_layout(abi.MAX_RAM_MB << 20).offset(gpa)

    def disassembler(self):
        """A capstone disassembler for this architecture's code (capstone
        is imported here: only annotation needs it)."""
        import capstone
        arch_name, modes = self.capstone
        mode = 0
        for name in modes.split("|"):      # e.g. a base mode | an extension
            mode |= getattr(capstone, name)
        return capstone.Cs(getattr(capstone, arch_name), mode)
