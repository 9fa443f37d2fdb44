"""Checkpoints: a running guest, its PMU state included, saved to a
directory and resumed later (``pvperf run --checkpoint DIR
--checkpoint-after S`` or ``--checkpoint-on-output TEXT``, ``pvperf
restore DIR``; docs/checkpoints.md).

When to take one (a ``Trigger``): S seconds into the command, or as soon
as the command's output contains TEXT, which the command prints once it
has reached the state worth saving: that one does not depend on how
fast the host runs the guest.

Taking one (``take``): QMP ``stop``; wait until the service has
delivered every overflow sent before the stop and QEMU has every NMI it
asked for; save the service's state; ``migrate`` the VM to a file;
``quit`` QEMU, whose plugin writes its own state at exit (counts, armed
thresholds, held overflows: qemu_plugin/pvperf/state.c).  The three parts are
taken at the same instant: the vCPUs do not run in between.

The directory:

  manifest.json    what the checkpoint is: format version, the QEMU that
                   took it, the run's configuration (to rebuild the same
                   machine), the SHA-256 of every file below and of the
                   guest image's kernel and initramfs; written last, so a
                   directory without it is an unfinished checkpoint
  vmstate          QEMU's migration stream (RAM, devices, CPUs)
  plugin.state     the plugin's part (pvperf_proto.h pvperf_state_*)
  pmu.json         the service's part (pmu/snapshot.py)
  initrd-overlay   the staged share (and driver), as the guest booted

Resuming (``load`` then launcher.run_command): everything is checked
before anything starts (format, versions, hashes, the plugin state as the
plugin reads it, the service state when the service is built, before
QEMU); then QEMU starts with the same machine and ``-incoming``, the
plugin loads its state before any vCPU runs, and the guest goes on where
it stopped, its command's output streaming here again.

Why the share is staged: QEMU refuses to migrate a guest that has its
9p share mounted, so checkpointing runs get the share in guest RAM, as
deterministic runs do (image/stage.py), and 9p only after the command.
"""
from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import logging
import os
import sys
import time
from pathlib import Path

from .. import __version__, abi
from .. import arch as arches
from ..arch.base import MAX_SMP
from .. import guest_contract as guest
from ..digest import sha256_file
from ..errors import SetupError, VMError
from ..pmu import plugin_protocol as proto
from ..pmu import snapshot
from ..pmu.guestmem import GuestMemory
from ..pmu.hypercall import PerfBackend
from . import qmp
from .boot import BootFiles
from .hostmem import MIN_MEM_MB
from .launcher import POWEROFF_TIMEOUT, VM, Runstate, \
    VMConfig
from .qemu import find_qemu, version_line

log = logging.getLogger("pvperf.checkpoint")

FORMAT = "pvperf-checkpoint"
VERSION = 2
MANIFEST = "manifest.json"
VMSTATE = "vmstate"
PLUGIN_STATE = "plugin.state"
PMU_STATE = "pmu.json"
OVERLAY = "initrd-overlay"
# The run's configuration a restore rebuilds the machine from: manifest
# key -> type.  Each key names the VMConfig field, except "mode", which
# manifests use for VMConfig.guest_action (VERSION 2: with accounting and
# devices, which migration needs to be the same).
VM_FIELDS = {"mode": str, "command": str, "smp": int, "mem_mb": int,
             "pmu": bool, "timing": bool, "deterministic": bool,
             "staged": bool, "accounting": str}
CONFIG_FIELD = {"mode": "guest_action"}
OVERFLOW_IRQS = ("doorbell", "qmp")     # VMConfig.overflow_irq


def _config_field(key: str) -> str:
    """The VMConfig field a VM_FIELDS manifest key holds."""
    return CONFIG_FIELD.get(key, key)


# The models' plugin options (cli/options.py make_config).
MODEL_OPTIONS = ("I1", "D1", "LL", "iTLB", "dTLB", "compat")


class CheckpointError(VMError):
    """A checkpoint that cannot be taken or restored."""


def qemu_identity(config: VMConfig) -> str:
    """The first line of `qemu --version`: a checkpoint resumes only
    under the QEMU that took it (machine types and device state change
    between versions)."""
    return version_line(find_qemu(config.qemu, config.arch))


def prepare(directory: Path, config: VMConfig) -> None:
    """Make ``directory`` (new or empty) and point the plugin at it."""
    directory = directory.resolve()
    if directory.exists() and (not directory.is_dir() or
                               any(directory.iterdir())):
        raise CheckpointError(f"--checkpoint {directory}", "exists and is "
                              "not an empty directory",
                              "name a new directory")
    if not config.pmu:
        raise CheckpointError("--checkpoint", "needs the PMU (the plugin "
                              "saves the counters)", "drop --no-pmu")
    directory.mkdir(parents=True, exist_ok=True)
    config.state_out = directory / PLUGIN_STATE


def discard(directory: Path) -> None:
    """Remove what an untaken checkpoint left (the plugin's state of a
    run that ended by itself)."""
    for name in (PLUGIN_STATE, VMSTATE, PMU_STATE, OVERLAY, MANIFEST):
        with contextlib.suppress(FileNotFoundError):
            (directory / name).unlink()
    with contextlib.suppress(OSError):
        directory.rmdir()


class Trigger:
    """When ``run_with_checkpoint`` takes the checkpoint."""

    def watch(self, out):
        """``out`` (a binary file the command's output goes to), as the
        trigger sees it."""
        return out

    async def wait(self) -> None:
        """Return when the checkpoint is due."""
        raise NotImplementedError

    def describe(self) -> str:
        """When, as a phrase: "5 s into COMMAND"."""
        raise NotImplementedError

    def manifest(self) -> dict:
        """The manifest's record of the trigger."""
        raise NotImplementedError


class AfterSeconds(Trigger):
    """S seconds of wall time into the command (as the host runs it)."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    async def wait(self) -> None:
        await asyncio.sleep(self.seconds)

    def describe(self) -> str:
        return f"{self.seconds:g} s into COMMAND"

    def manifest(self) -> dict:
        return {"after_s": self.seconds}


class OnOutput(Trigger):
    """As soon as the command's stdout or stderr contains ``text`` (the
    command says it reached the state to save); the guest runs on for
    the moment it takes the host to read the line and stop it."""

    def __init__(self, text: str):
        if not text:
            raise ValueError("empty trigger text")
        self.text = text
        self.needle = text.encode()
        self.seen = asyncio.Event()

    def watch(self, out):
        return _Watched(out, self.needle, self.seen.set)

    async def wait(self) -> None:
        await self.seen.wait()

    def describe(self) -> str:
        return f"when COMMAND printed {self.text!r}"

    def manifest(self) -> dict:
        return {"on_output": self.text}


class _Watched:
    """A binary file that calls ``found`` once what was written through
    it contains ``needle``, also across two writes."""

    def __init__(self, out, needle: bytes, found):
        self.out, self.needle, self.found = out, needle, found
        self.tail = b""

    def write(self, chunk: bytes) -> None:
        self.out.write(chunk)
        if self.found is None:
            return
        seen = self.tail + chunk
        if self.needle in seen:
            self.found()
            self.found = None
        self.tail = seen[-(len(self.needle) - 1):] if len(self.needle) > 1 \
            else b""

    def flush(self) -> None:
        self.out.flush()


async def run_with_checkpoint(config: VMConfig, directory: Path,
                              trigger: Trigger, stdout=None,
                              stderr=None) -> int | None:
    """Run ``config.command``; when ``trigger`` says so, checkpoint the
    guest into ``directory``.  The command's exit status if it ended
    first, else None (the checkpoint is complete)."""
    stdout = trigger.watch(stdout or sys.stdout.buffer)
    stderr = trigger.watch(stderr or sys.stderr.buffer)
    directory = directory.resolve()
    async with VM(config) as vm:
        pumps = await vm.pump_output(stdout, stderr)
        await vm.wait_ready()
        began = time.monotonic()
        ended = asyncio.ensure_future(vm.wait_exit(config.timeout))
        done = set() if await _due_first(trigger, ended) else {ended}
        if not done:
            into = time.monotonic() - began
            ended.cancel()
            await asyncio.gather(ended, return_exceptions=True)
            try:
                state = await take(vm, directory / VMSTATE)
            except VMError as e:
                # Nothing lost: the guest was let go on.
                log.warning("no checkpoint: %s; the command goes on",
                            e.one_line())
                ended = asyncio.ensure_future(vm.wait_exit(config.timeout))
                done = {ended}
                await ended
        await asyncio.wait(pumps, timeout=5)
        if done:
            return ended.result()
    _write(directory, config, state, trigger, into)
    return None


async def _due_first(trigger: Trigger, ended: asyncio.Future) -> bool:
    """Wait for the trigger or the command's end, whichever comes first;
    True if the trigger did and the command still runs."""
    due = asyncio.ensure_future(trigger.wait())
    await asyncio.wait([ended, due], return_when=asyncio.FIRST_COMPLETED)
    due.cancel()
    await asyncio.gather(due, return_exceptions=True)
    return not ended.done()


async def take(vm: VM, vmstate: Path) -> dict:
    """Stop the guest, migrate it to the file ``vmstate`` and quit QEMU,
    whose plugin then writes config.state_out; returns the service's
    state at the stop (pmu/snapshot.py).  On failure the guest runs on
    and VMError says why."""
    if vm.runstate is not Runstate.RUNNING:
        raise CheckpointError("taking the checkpoint", "the VM is "
                              f"{vm.runstate.value}")
    await qmp.stop(vm.qmp)
    try:
        state = await _quiesced_state(vm)
        await qmp.migrate_to_file(vm.qmp, vmstate)
    except BaseException:
        with contextlib.suppress(Exception):
            await qmp.cont(vm.qmp)
        raise
    await qmp.quit(vm.qmp)
    deadline = time.monotonic() + POWEROFF_TIMEOUT
    while vm.console.alive() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    return state


async def _quiesced_state(vm: VM) -> dict:
    """The PMU state once every overflow sent before the stop has been
    delivered and its NMI requested (PluginService.idle)."""
    calm, deadline = 0, time.monotonic() + 5
    while calm < 2:
        calm = calm + 1 if vm.service.idle() else 0
        if time.monotonic() > deadline:
            raise CheckpointError("taking the checkpoint", "the PMU service "
                                  "did not go idle", "run again with --debug")
        await asyncio.sleep(0.02)
    await vm.irq.settle()
    with vm.backend.lock:
        return snapshot.save(vm.backend)


def _write(directory: Path, config: VMConfig, pmu_state: dict,
           trigger: Trigger, into: float) -> None:
    plugin_state = directory / PLUGIN_STATE
    if not plugin_state.exists():
        raise CheckpointError("taking the checkpoint", "the plugin did not "
                              "save its state", "run again with --debug")
    (directory / PMU_STATE).write_text(json.dumps(pmu_state, indent=1))
    if config.initrd_overlay:
        (directory / OVERLAY).write_bytes(config.initrd_overlay)
    names = [VMSTATE, PLUGIN_STATE, PMU_STATE] + \
        ([OVERLAY] if config.initrd_overlay else [])
    manifest = {
        "format": FORMAT, "version": VERSION, "pvperf": __version__,
        "created": datetime.datetime.now(datetime.timezone.utc)
        .isoformat(timespec="seconds"),
        "trigger": trigger.manifest(), "after_s": round(into, 3),
        "qemu": qemu_identity(config),
        "firmware": config.arch.firmware,
        "vm": {**{k: getattr(config, _config_field(k)) for k in VM_FIELDS},
               "arch": config.arch.name,
               "share": str(config.share) if config.share else None,
               # The device the migration stream carries (absent: "qmp",
               # checkpoints taken before the doorbell existed).
               "overflow_irq": config.overflow_irq,
               "kernel_args": list(config.kernel_args),
               "devices": list(config.devices),
               "plugin_options": dict(config.plugin_options),
               "vmlinux": str(config.image.vmlinux),
               "initramfs": str(config.image.initramfs)},
        "sha256": {**{n: sha256_file(directory / n) for n in names},
                   "vmlinux": sha256_file(config.image.vmlinux),
                   "initramfs": sha256_file(config.image.initramfs)},
    }
    tmp = directory / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1) + "\n")
    os.replace(tmp, directory / MANIFEST)


def load(directory: Path, timeout: float | None = None,
         echo_console: bool = False) -> VMConfig:
    """The VMConfig that resumes the checkpoint in ``directory``, every
    part checked; CheckpointError (one line) if any is not right."""
    directory = directory.resolve()
    what = f"restoring {directory}"
    manifest = _manifest(directory, what)
    vm = manifest["vm"]
    files = manifest["sha256"]
    for name in (VMSTATE, PLUGIN_STATE, PMU_STATE) + \
            ((OVERLAY,) if OVERLAY in files else ()):
        _check_hash(directory / name, files.get(name), what)
    image = BootFiles(Path(vm["vmlinux"]), Path(vm["initramfs"]))
    for key in ("vmlinux", "initramfs"):
        _check_hash(Path(vm[key]), files.get(key), what,
                    hint="the guest image changed since the checkpoint")
    try:
        proto.parse_plugin_state((directory / PLUGIN_STATE).read_bytes(),
                                 vm["smp"])
        pmu_state = json.loads((directory / PMU_STATE).read_text())
    except (proto.ProtocolError, ValueError) as e:
        raise CheckpointError(what, str(e), "the checkpoint is damaged: "
                              "take it again") from e
    try:
        # Checkpoints older than a second architecture name none: they
        # hold guests of the host's own, the only one there was.
        guest_arch = arches.get(vm["arch"]) if "arch" in vm else \
            arches.host()
    except SetupError as e:
        raise CheckpointError(what, str(e), "resume it with the pvperf "
                              "that took it") from e
    config = VMConfig(
        image=image, arch=guest_arch,
        **{_config_field(k): vm[k] for k in VM_FIELDS},
        share=Path(vm["share"]) if vm["share"] else None,
        kernel_args=tuple(vm["kernel_args"]),
        overflow_irq=vm.get("overflow_irq", "qmp"),
        devices=tuple(vm["devices"]),
        plugin_options=dict(vm["plugin_options"]), timeout=timeout,
        echo_console=echo_console,
        initrd_overlay=(directory / OVERLAY).read_bytes()
        if OVERLAY in files else b"",
        incoming=directory / VMSTATE, state_in=directory / PLUGIN_STATE,
        pmu_state=pmu_state)
    _check_pmu_state(config, what)
    have = qemu_identity(config)
    if have != manifest["qemu"]:
        raise CheckpointError(what, f"taken under {manifest['qemu']!r}, "
                              f"this is {have!r}",
                              "resume it with the QEMU that took it")
    if manifest.get("firmware") != config.arch.firmware:
        raise CheckpointError(what, f"taken with firmware "
                              f"{manifest.get('firmware')!r}, pvperf now "
                              f"boots {config.arch.firmware!r}",
                              "resume it with the pvperf that took it")
    if config.share is not None and not config.share.is_dir():
        raise CheckpointError(what, f"the share {config.share} is gone",
                              "put it back where it was")
    return config


def _check_pmu_state(config: VMConfig, what: str) -> None:
    """Restore the service's state into a throwaway backend of the same
    shape (the launcher does it again for real): refused here, it is
    refused before anything is printed or started."""
    memory = GuestMemory(b"", config.arch.ram_layout(config.mem_mb << 20))
    backend = PerfBackend(memory, max_vcpus=config.smp, timing=config.timing,
                          deterministic=config.deterministic,
                          kernel_half_start=config.arch.kernel_half_start)
    try:
        snapshot.restore(backend, config.pmu_state, config.smp)
    except snapshot.StateError as e:
        raise CheckpointError(what, f"PMU state: {e}", "the checkpoint is "
                              "damaged: take it again") from e


def _manifest(directory: Path, what: str) -> dict:
    path = directory / MANIFEST
    if not path.exists():
        raise CheckpointError(what, f"no {MANIFEST}",
                              "not a checkpoint, or one that was not "
                              "finished")
    try:
        manifest = json.loads(path.read_text())
        ok = manifest.get("format") == FORMAT
        version = manifest.get("version")
        if ok and version != VERSION:
            # before its fields: another version has other ones
            raise CheckpointError(what, f"checkpoint format {version!r}, "
                                  f"this pvperf reads {VERSION}",
                                  "resume it with the pvperf that took it")
        vm, files = manifest["vm"], manifest["sha256"]
        ok = ok and isinstance(vm, dict) and isinstance(files, dict) and \
            all(type(vm[k]) is t for k, t in VM_FIELDS.items()) and \
            isinstance(vm["share"], (str, type(None))) and \
            vm.get("overflow_irq", "qmp") in OVERFLOW_IRQS and \
            all(isinstance(a, str) for a in vm["kernel_args"]) and \
            all(isinstance(a, str) for a in vm["devices"]) and \
            all(isinstance(k, str) and isinstance(v, str)
                for k, v in vm["plugin_options"].items()) and \
            isinstance(vm["vmlinux"], str) and \
            isinstance(vm["initramfs"], str) and vm["pmu"] and \
            vm["mode"] == guest.RUN and 1 <= vm["smp"] <= MAX_SMP and \
            MIN_MEM_MB <= vm["mem_mb"] <= abi.MAX_RAM_MB and \
            all(_model_option(k) for k in vm["plugin_options"])
    except (ValueError, KeyError, AttributeError, TypeError) as e:
        raise CheckpointError(what, f"{MANIFEST} unreadable ({e})",
                              "the checkpoint is damaged") from e
    if not ok:
        raise CheckpointError(what, f"{MANIFEST} is not a pvperf "
                              "checkpoint manifest", "the checkpoint is "
                              "damaged")
    return manifest


def _model_option(key: str) -> bool:
    """A plugin option a run's configuration may carry: the models' (the
    launcher adds sock, ram and the state paths itself)."""
    return key in MODEL_OPTIONS or key.startswith("penalty_")


def _check_hash(path: Path, want: str | None, what: str,
                hint: str = "the checkpoint is damaged: take it again"):
    if not path.exists():
        raise CheckpointError(what, f"{path} is missing", hint)
    if sha256_file(path) != want:
        raise CheckpointError(what, f"{path.name} does not match its "
                              "SHA-256 in the manifest", hint)
