"""The VM launcher: QEMU's system emulator under TCG, driven to a result.

The machine, CPU, firmware and serial console are the architecture's
(``VMConfig.arch``, pyhost/arch/); the rest is the same everywhere.

What it sets up, and how each piece is cleaned up:

  guest RAM   /dev/shm/pvperf-<pid>-<rand>, a memory-backend-file shared
              with the host service; unlinked as soon as QEMU (and the
              plugin) have mapped it, so even a SIGKILL leaves nothing.
  channels    QMP, the three virtio-serial ports (and a restore's gdbstub:
              vm/gdbstub.py) are socketpairs whose other ends QEMU
              inherits; the service's socket is in a 0700
              run directory, removed once every vCPU's plugin connection
              is in (vm/channels.py): no other user can reach any of them.
  QEMU        spawned under pexpect (its stdio is the serial console) with
              PR_SET_PDEATHSIG, so it dies with us; terminate()+wait() in
              ``finally``.
  service     the paravirtual PMU service's threads (pmu/service.py),
              stopped in ``finally``.
  interrupts  sampling's overflow interrupt: pmu.doorbell.Doorbell (an
              ivshmem-doorbell on a socketpair), or (deterministic runs,
              overflow_irq="qmp", where the machine has NMIs) a
              pmu.nmi.NmiInjector bound to QMP once connected, closed
              before QMP goes away (pmu.doorbell.uses_doorbell).

Control channel (images/README.md; the names: guest_contract.py): the
guest writes ``READY`` and then ``EXIT <status>`` to the virtio-serial
port org.pvperf.control; the command's stdout and stderr come over
org.pvperf.stdout / .stderr.  The console is never parsed for status.

Runstate:  IDLE -> STARTING -> RUNNING -> STOPPING -> IDLE
           (any failure during a session returns to IDLE via STOPPING)
"""
from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import guest_contract as guest
from ..arch import Arch, host
from ..errors import GuestPanicError, GuestStatusError, GuestTimeoutError, \
    SetupError, VMError
from ..paths import PLUGIN_PATH
from ..pmu.guestmem import GuestMemory
from ..pmu.hypercall import PerfBackend
from ..pmu.doorbell import Doorbell, check_overflow_irq, uses_doorbell
from ..pmu.nmi import NmiInjector
from ..pmu.service import PluginService
from ..pmu import snapshot
from . import channels, determinism, gdbstub, hostmem, qmp
from .boot import BootImage, boot_timeout, check_smp
from .console import Console
from .qemu import check_qemu_for_plugin, find_qemu, qemu_escape, \
    set_pdeathsig, tcg_machine_args

log = logging.getLogger("pvperf.vm")

# Ports that write into files in deterministic runs (vm/channels.py).
OUTPUT_PORTS = ("stdout", "stderr")
PLUGIN_CONNECT_TIMEOUT = 10.0
POWEROFF_TIMEOUT = 15.0
def preflight(config: "VMConfig") -> None:
    """The checks that need no guest: RAM size, QEMU, the plugin.  The CLI
    runs them before any slow step (the image check or build)."""
    hostmem.check_mem(config.mem_mb)
    if config.deterministic:
        determinism.check(config.smp)
    check_smp(config.smp, config.arch)
    check_overflow_irq(config.arch, config.overflow_irq)
    if config.pmu and config.arch.pmu_missing:
        raise SetupError(f"cannot count or sample on "
                         f"{config.arch.name} guests yet",
                         config.arch.pmu_missing,
                         "`pvperf run --no-pmu` runs QEMU and the guest alone")
    qemu = find_qemu(config.qemu, config.arch)
    if config.pmu:
        check_qemu_for_plugin(qemu)
        if not PLUGIN_PATH.exists():
            raise SetupError("TCG plugin not built",
                             f"{PLUGIN_PATH} missing",
                             "run `make -C qemu_plugin` or scripts/setup.sh, "
                             "or use --no-pmu")


class Runstate(enum.Enum):
    IDLE = "idle"
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"


def require(*states: Runstate):
    """Decorator: the method may only run in one of ``states``."""
    def deco(fn):
        @functools.wraps(fn)
        async def wrapper(self, *a, **kw):
            if self.runstate not in states:
                raise VMError(f"VM.{fn.__name__}",
                              f"not allowed while {self.runstate.value}")
            return await fn(self, *a, **kw)
        return wrapper
    return deco


@dataclass
class VMConfig:
    image: BootImage
    # What the guest does once booted: guest.RUN (``command``, then power
    # off) or guest.SHELL (an interactive shell on the console).
    guest_action: str = guest.RUN
    command: str = ""                  # shell command line (guest.RUN)
    smp: int = 1
    mem_mb: int = 1024
    share: Path | None = None
    pmu: bool = True
    timeout: float | None = None       # command timeout (guest.RUN)
    boot_timeout: float | None = None  # None: boot_timeout(smp)
    echo_console: bool = False
    plugin_options: dict[str, str] = field(default_factory=dict)
    timing: bool = False               # cycles from the timing model
    accounting: str = "cpu"            # cycles: cpu or domain (events.py)
    devices: tuple[str, ...] = ()      # more QEMU -device specs (--device)
    kernel_args: tuple[str, ...] = ()  # more of the kernel command line
    deterministic: bool = False        # replayable run (determinism.py)
    # newc archives appended to the image's initramfs: the share staged in
    # guest RAM (deterministic runs: determinism.py, /init's
    # pvperf.staged=1), the PMU driver built for --kernel (userkernel.py).
    initrd_overlay: bytes = b""
    # The share is in initrd_overlay (image/stage.py) and 9p is mounted
    # only after the command: deterministic runs, and checkpoints (QEMU
    # refuses to migrate a guest with 9p mounted).
    staged: bool = False
    # Checkpoints (vm/checkpoint.py): where the plugin saves its state at
    # exit; and, to resume one, QEMU's migration stream, the plugin's
    # state and the service's (pmu/snapshot.py).
    state_out: Path | None = None
    incoming: Path | None = None
    state_in: Path | None = None
    pmu_state: dict | None = None
    arch: Arch = field(default_factory=host)
    qemu: str | None = None            # the QEMU binary (None: the arch's)
    # -accel tcg,OPTS (qemu.parse_tcg_options): options that change how
    # TCG translates, the translation experiments' axes.
    tcg: tuple[str, ...] = ()
    data_dirs: tuple[str, ...] = ()    # -L: where QEMU looks for firmware
    # The overflow interrupt: "doorbell" (pmu/doorbell.py) or "qmp"
    # (inject-nmi; deterministic runs always: QMP answers once raised).
    overflow_irq: str = "doorbell"


class VM:
    """One guest run: ``async with VM(config) as vm``, or run_command()
    and run_shell() below."""

    def __init__(self, config: VMConfig):
        self.config = config
        self.runstate = Runstate.IDLE
        self.transitions: list[Runstate] = [Runstate.IDLE]
        tag = f"{os.getpid()}-{os.urandom(4).hex()}"
        self.ram_path = channels.SHM_DIR / f"{channels.SHM_PREFIX}{tag}"
        self.channels: channels.SocketPairs | None = None
        self.output_files: channels.OutputFiles | None = None
        self.run_dir: Path | None = None
        self.initrd_path = channels.SHM_DIR / f"{channels.SHM_PREFIX}{tag}-initrd"
        self.console: Console | None = None
        self.qmp = None
        self.memory: GuestMemory | None = None
        self.service: PluginService | None = None
        self.backend: PerfBackend | None = None
        self.irq: Doorbell | NmiInjector | None = None  # overflow irq
        self._ports: dict[str, tuple] = {}
        self._tasks: list[asyncio.Task] = []
        self.status: int | None = None
        self.ready_at: float | None = None
        self.started_at: float | None = None

    # -- state ---------------------------------------------------------------

    def _set_state(self, state: Runstate) -> None:
        self.runstate = state
        self.transitions.append(state)

    # -- command line --------------------------------------------------------

    def qemu_argv(self) -> list[str]:
        c = self.config
        arch = c.arch
        # cryptomgr.notests: the crypto self-tests make the boot wait
        # ~0.3 s (for initramfs unpacking, via request_module) and test
        # nothing a profiling VM relies on.
        append = [f"console={arch.console}", "quiet", "panic=-1",
                  "cryptomgr.notests", *arch.kernel_args,
                  guest.kernel_arg(guest.ACTION_KEY, c.guest_action),
                  *c.kernel_args]
        firmware = [a for d in c.data_dirs for a in ("-L", d)]
        firmware += ["-bios", arch.firmware] if arch.firmware else []
        # debug-threads: QEMU names its threads ("CPU 0/TCG"), so that the
        # host's /proc, top and perf tell the vCPUs from the I/O threads.
        argv = [find_qemu(c.qemu, arch), "-nodefaults", "-no-user-config",
                "-name", "pvperf,debug-threads=on", *firmware,
                *tcg_machine_args(arch.machine_for(c.smp), c.tcg),
                "-cpu", arch.cpu, "-smp", str(c.smp), "-m", f"{c.mem_mb}M",
                "-object", f"memory-backend-file,id=ram,size={c.mem_mb}M,"
                           f"mem-path={self.ram_path},share=on",
                "-display", "none", "-serial", "stdio", "-no-reboot",
                "-kernel", str(c.image.vmlinux),
                "-initrd", str(self.initrd_path if c.initrd_overlay
                               else c.image.initramfs)]
        argv += self._chardev("qmp") + ["-mon", "chardev=qmp,mode=control"]
        argv += ["-device", "virtio-serial-pci,id=vser"]
        for port in guest.PORTS:
            argv += self._chardev(port)
            argv += ["-device", f"virtserialport,bus=vser.0,chardev={port},"
                                f"name={guest.port_name(port)}"]
        if c.staged and c.initrd_overlay:
            append.append(guest.kernel_arg(guest.STAGED_KEY, 1))
        if c.share is not None:
            append.append(guest.kernel_arg(guest.SHARE_KEY, 1))
            argv += ["-fsdev", f"local,id=host,security_model=none,"
                               f"path={qemu_escape(str(c.share))}",
                     "-device", "virtio-9p-pci,fsdev=host,"
                                f"mount_tag={guest.SHARE_TAG}"]
        for device in c.devices:
            argv += ["-device", device]
        if c.guest_action == guest.RUN:
            argv += ["-fw_cfg", f"name={guest.COMMAND_FW_CFG},string="
                     + qemu_escape(c.command)]
        if c.pmu:
            append.append(guest.kernel_arg(guest.PMU_KEY, 1))
            argv += ["-plugin", self._plugin_arg()]
        if isinstance(self.irq, Doorbell):
            argv += self.irq.qemu_args()
        if c.deterministic:
            append += determinism.KERNEL_ARGS
            argv += determinism.QEMU_ARGS
        if c.incoming is not None:
            # Held until every channel is up again, like -S runs above.
            argv += ([] if c.deterministic else ["-S"]) + \
                ["-incoming", f"file:{c.incoming}"]
        if gdbstub.wanted(c):
            argv += self._chardev("gdb") + ["-gdb", "chardev:gdb"]
        argv += ["-append", " ".join(append)]
        return argv

    def _chardev(self, port: str) -> list[str]:
        if self.channels is None:           # qemu_argv() before start()
            files = OUTPUT_PORTS if self.config.deterministic else ()
            self.output_files = channels.OutputFiles(files)
            self.channels = channels.SocketPairs(
                [p for p in (*guest.PORTS, "qmp") if p not in files] +
                (["gdb"] if gdbstub.wanted(self.config) else []))
        if port in self.output_files:
            return self.output_files.chardev(port)
        return self.channels.chardev(port)

    def _plugin_arg(self) -> str:
        c = self.config
        opts = {"sock": self.service.plugin_address, "ram": str(self.ram_path),
                **c.plugin_options,     # --debug: the plugin's summary too
                **({"verbose": "on"} if log.isEnabledFor(logging.DEBUG) else {})}
        opts |= {k: str(p) for k, p in (("state_in", c.state_in),
                                         ("state_out", c.state_out)) if p}
        return ",".join([str(PLUGIN_PATH)] +
                        [f"{k}={qemu_escape(v)}" for k, v in opts.items()])

    # -- lifecycle -----------------------------------------------------------

    async def __aenter__(self) -> "VM":
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    @require(Runstate.IDLE)
    async def start(self) -> None:
        """Launch QEMU and connect every channel; on failure clean up."""
        self._set_state(Runstate.STARTING)
        try:
            await self._start()
        except BaseException:
            await self.stop()
            raise
        self._set_state(Runstate.RUNNING)

    async def _start(self) -> None:
        c = self.config
        preflight(c)
        channels.sweep_stale_shm()
        channels.sweep_run_dirs()
        self._create_ram()
        if c.initrd_overlay:
            determinism.write_initrd(self.initrd_path, c.image.initramfs,
                                     c.initrd_overlay)
        if c.pmu:
            self.memory = GuestMemory.open_file(
                str(self.ram_path), c.arch.ram_layout(c.mem_mb << 20))
            # The doorbell, or NMIs over QMP (bound below, once QMP is up).
            self.irq = Doorbell(c.smp) if uses_doorbell(
                c.arch, c.overflow_irq, c.deterministic) else NmiInjector()
            self.backend = PerfBackend(self.memory, max_vcpus=c.smp,
                                       nmi=self.irq, timing=c.timing,
                                       accounting=c.accounting,
                                       deterministic=c.deterministic,
                                       kernel_half_start=c.arch.kernel_half_start)
            if c.pmu_state is not None:
                self._restore_pmu(c.pmu_state)
            self.run_dir = channels.make_run_dir()
            self.service = PluginService(self.backend, self.run_dir / "svc")
            self.service.start()
        argv = self.qemu_argv()
        log.debug("qemu: %s", " ".join(argv))
        self.started_at = time.monotonic()
        self.console = Console.spawn(argv, echo=c.echo_console,
                                     preexec_fn=functools.partial(
                                         set_pdeathsig, os.getpid()),
                                     pass_fds=(*self.channels.pass_fds,
                                               *self.output_files.pass_fds,
                                               *getattr(self.irq, "pass_fds",
                                                        ())))
        self.channels.spawned()
        getattr(self.irq, "spawned", lambda: None)()    # the doorbell's
        if self.service is not None:
            self.service.allow_peer(self.console.child.pid)
        if c.guest_action == guest.RUN:
            self._tasks.append(asyncio.create_task(self.console.watch()))
        self.qmp = await self._connect_qmp()
        if isinstance(self.irq, NmiInjector):
            client = self.qmp
            self.irq.bind(asyncio.get_running_loop(),
                          lambda: qmp.inject_nmi(client))
        # QEMU and the plugin have the RAM file mapped by now.
        self._unlink_ram()
        if self.service is not None:
            await self._wait_plugin_connected()
        for port in guest.PORTS:
            if port in self.output_files:
                self._ports[port] = (self.output_files.tail(
                    port, self.console.alive), None)
                continue
            self._ports[port] = await asyncio.open_unix_connection(
                sock=self.channels.ours(port))
        if c.incoming is not None:
            await qmp.wait_migration(self.qmp, "restoring the checkpoint")
        if c.deterministic or c.incoming is not None:
            # Held (-S) until now, so the guest finds every port open
            # instead of seeing the host connect at a host-timed moment.
            await qmp.wait_connected(self.qmp, [
                p for p in guest.PORTS if p not in self.output_files])
            if gdbstub.wanted(c):
                await gdbstub.rewrite_registers(
                    self.channels.ours("gdb"), c.arch.rewrite_on_restore,
                    c.smp)
            await qmp.cont(self.qmp)
        if c.incoming is not None and self.backend is not None:
            with self.backend.lock:     # raised before the save, maybe
                self.backend.sampler.rering()   # not in the stream

    def _restore_pmu(self, state: dict) -> None:
        """The service's state from a checkpoint, before QEMU starts: a
        bad one stops everything here, nothing applied."""
        try:
            snapshot.restore(self.backend, state, self.config.smp)
        except snapshot.StateError as e:
            raise VMError("restoring the checkpoint", f"PMU state: {e}",
                          "the checkpoint is damaged: take it again") from e

    async def _wait_plugin_connected(self) -> None:
        """The plugin connects every vCPU at install; then nobody needs
        the service's socket any more: remove it and the run directory."""
        deadline = time.monotonic() + PLUGIN_CONNECT_TIMEOUT
        while self.service.accepted < self.config.smp:
            if time.monotonic() > deadline or not self.console.alive():
                raise VMError("the TCG plugin did not connect to the "
                              "service", f"{self.service.accepted} of "
                              f"{self.config.smp} vCPUs connected",
                              "see the console lines below",
                              details=self.console.log.tail())
            await asyncio.sleep(0.01)
        self.service.stop_listening()
        self._remove_run_dir()

    def _remove_run_dir(self) -> None:
        channels.remove_run_dir(self.run_dir)
        self.run_dir = None

    async def _connect_qmp(self):
        try:
            return await qmp.connect(self.channels.ours("qmp"), timeout=10)
        except VMError as e:
            # QEMU (or the plugin) refused to start: show what it said.
            if self._tasks:         # the console watcher reads to EOF
                await asyncio.wait(self._tasks[:1], timeout=2)
            else:
                self.console.drain()
            e.details = self.console.log.tail() or "(QEMU printed nothing)"
            raise

    def _create_ram(self) -> None:
        fd = os.open(self.ram_path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, self.config.mem_mb << 20)
        finally:
            os.close(fd)

    def _unlink_ram(self) -> None:
        """Unlink the RAM file and the staged initrd (QEMU has read it)."""
        for path in (self.ram_path, self.initrd_path):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    async def stop(self) -> None:
        """Tear everything down; safe to call in any state, twice."""
        if self.runstate is Runstate.IDLE:
            return
        self._set_state(Runstate.STOPPING)
        try:
            await self._teardown()
        finally:
            self._set_state(Runstate.IDLE)

    async def _teardown(self) -> None:
        if isinstance(self.irq, NmiInjector):
            self.irq.close()            # no NMI after QMP is gone
        await qmp.close(self.qmp)
        self.qmp = None
        for _, writer in self._ports.values():
            if writer is not None:      # None: an output file's tail
                writer.close()
        self._ports.clear()
        if self.console is not None:
            self.console.terminate()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self.service is not None:
            self.service.stop()
            sm = self.backend.sampler
            log.debug("samples: %s; %s; %s", sm.stats, sm.raise_summary(),
                      self.service.overflow_summary())
        if isinstance(self.irq, Doorbell):
            self.irq.close()            # no service thread rings it now
        if self.memory is not None:
            self.memory.close()
            self.memory = None
        self._unlink_ram()
        self._remove_run_dir()
        if self.channels is not None:
            self.channels.close()
            self.channels = None
        if self.output_files is not None:
            self.output_files.close()
            self.output_files = None

    # -- running -------------------------------------------------------------

    @require(Runstate.RUNNING)
    async def wait_ready(self) -> None:
        """Wait for READY on the control port (boot finished)."""
        line = await self._control_line(self.config.boot_timeout or
                                        boot_timeout(self.config.smp), "boot")
        if line != guest.READY:
            raise GuestStatusError("guest boot", f"unexpected control "
                                   f"message {line!r}",
                                   "the image's /init is out of date: "
                                   "run `pvperf image build --force`")
        self.ready_at = time.monotonic()

    @require(Runstate.RUNNING)
    async def wait_exit(self, timeout: float | None) -> int:
        """Wait for ``EXIT <status>``, then for QEMU to power off."""
        line = await self._control_line(timeout, "command")
        parts = line.split()
        if len(parts) != 2 or parts[0] != guest.EXIT or not parts[1].isdigit():
            raise GuestStatusError("guest command", f"bad status {line!r}",
                                   "VM did not return status")
        self.status = int(parts[1])
        await self._wait_poweroff()
        return self.status

    async def _control_line(self, timeout: float | None, what: str) -> str:
        reader, _ = self._ports["control"]
        try:
            raw = await asyncio.wait_for(self._readline_or_death(reader),
                                         timeout)
        except asyncio.TimeoutError:
            raise GuestTimeoutError(f"guest {what}",
                                    f"no answer within {timeout:g} s",
                                    "raise --timeout or look at the console "
                                    "lines below",
                                    details=self.console.log.tail()) from None
        if not raw:
            self._raise_died(what)
        return raw.decode("utf-8", "replace").strip()

    async def _readline_or_death(self, reader) -> bytes:
        """readline() that also returns b'' when QEMU exits first."""
        read = asyncio.ensure_future(reader.readline())
        try:
            return await self._read_or_death(read)
        except asyncio.CancelledError:
            read.cancel()       # or it would take a later line
            raise

    async def _read_or_death(self, read) -> bytes:
        while not read.done():
            await asyncio.wait([read], timeout=0.1)
            if not read.done() and not self.console.alive():
                # Let a last message arrive before giving up.
                await asyncio.wait([read], timeout=0.5)
                if not read.done():
                    read.cancel()
                    return b""
        return read.result()

    def _raise_died(self, what: str):
        tail = self.console.log.tail()
        if self.console.panic or "Kernel panic" in tail:
            raise GuestPanicError(f"guest {what}",
                                  self.console.panic or "kernel panic",
                                  "see the console lines below",
                                  details=tail)
        raise GuestStatusError(f"guest {what}",
                               "VM did not return status (QEMU exited "
                               f"with {self.console.exit_status()})",
                               "see the console lines below", details=tail)

    async def _wait_poweroff(self) -> None:
        deadline = time.monotonic() + POWEROFF_TIMEOUT
        while self.console.alive() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)

    async def pump_output(self, stdout, stderr) -> list[asyncio.Task]:
        """Stream the command's stdout/stderr ports to host file objects."""
        tasks = [asyncio.create_task(self._pump(self._ports[p][0], f))
                 for p, f in (("stdout", stdout), ("stderr", stderr))]
        self._tasks.extend(tasks)
        return tasks

    @staticmethod
    async def _pump(reader, out) -> None:
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                return
            out.write(chunk)
            out.flush()


async def run_command(config: VMConfig, stdout=None, stderr=None) -> int:
    """Boot, run ``config.command`` in the guest, return its exit status."""
    stdout = stdout or sys.stdout.buffer
    stderr = stderr or sys.stderr.buffer
    async with VM(config) as vm:
        pumps = await vm.pump_output(stdout, stderr)
        if config.incoming is None:     # a restored guest is past it
            await vm.wait_ready()
        status = await vm.wait_exit(config.timeout)
        # QEMU has exited: the port sockets are at EOF; drain them.
        await asyncio.wait(pumps, timeout=5)
        return status


async def run_shell(config: VMConfig) -> int:
    """Boot and hand the serial console to the user until the guest stops.

    Ctrl-] leaves the console (and stops the VM); Ctrl-C goes to the guest.
    """
    async with VM(config) as vm:
        loop = asyncio.get_running_loop()
        # interact() blocks; run it in a thread so QMP and the ports live on.
        session = loop.run_in_executor(None, functools.partial(
            vm.console.child.interact, escape_character=chr(29)))
        try:
            await vm.wait_ready()
        except BaseException:
            vm.console.terminate()
            await asyncio.wait([session], timeout=5)
            raise
        await session
        try:
            return await vm.wait_exit(POWEROFF_TIMEOUT)
        except GuestStatusError:
            return 0
