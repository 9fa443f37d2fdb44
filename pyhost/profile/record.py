"""System-wide profile of QEMU and its guest, step 1: record.

record:  boot the guest under plain TCG (the paravirtual PMU is not needed)
         with QEMU's ``-jitdump`` (``jit-<qemu pid>.dump`` in the output
         directory: QEMU writes it into its current directory, so QEMU
         starts there through ``env -C``) and the translation-time plugin
         ``qemu_plugin/pvperf-rmap.so`` (per TB its guest code bytes and
         the translating address space; the timeline of address spaces with
         the guest task behind every switch, named through offsets from the
         guest kernel's BTF, kernel_layout.py), and sample the QEMU process
         with the host's ``perf record -e cpu-clock -k mono --call-graph
         dwarf -p <qemu pid>`` (a software event: hardware events are not
         supported on these hosts).  The guest runs CMD under a small shell
         wrapper that waits for a ``go`` file in the share (created once
         perf runs), snapshots the maps and comm of every guest process
         (one busybox grep, 0.1 s after the start, then every second:
         processes living less than that have none), writes ``done`` when
         CMD exits and only then captures the module lines of
         /proc/kallsyms.  Samples outside [go, done] (host CLOCK_MONOTONIC)
         are dropped.
With ``perfmap=True`` QEMU also writes ``-perfmap`` (/tmp/perf-PID.map,
moved into the output directory when QEMU is gone) for resolve.py's
comparison.  The raw data is a ``Recording``; resolve.py turns it into a
session (session.py).
"""
from __future__ import annotations

import asyncio
import logging
import os
import shlex
import shutil
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from ..arch import Arch
from ..errors import SetupError, VMError
from ..guest_contract import SHARE_MOUNT
from ..paths import RMAP_PLUGIN_PATH
from ..vm import channels
from ..vm.launcher import VM, VMConfig
from ..vm.qemu import qemu_escape
from . import hostperf, kernel_layout

log = logging.getLogger("pvperf.profile")

RMAP_FILE = "rmap.bin"
QEMU_PERFMAP = "qemu-perf.map"
GUEST_WORKDIR = ".pvperf-profile"
SNAPSHOT_FIRST_S, SNAPSHOT_EVERY_S = 0.1, 1


def preflight() -> None:
    """What ``pvperf profile`` needs besides the VM: the rmap plugin and
    the host's perf (checked before the image and the boot)."""
    if not RMAP_PLUGIN_PATH.exists():
        raise SetupError("reverse-map plugin not built",
                         f"{RMAP_PLUGIN_PATH} missing",
                         "run `make -C qemu_plugin pvperf-rmap.so`")
    hostperf.find_perf()


def guest_task_layout(image, arch) -> kernel_layout.TaskLayout | None:
    """The plugin's task= offsets for the image's kernel, or None."""
    try:
        return kernel_layout.task_layout(image.vmlinux,
                                         image.system_map.read_text(), arch)
    except (OSError, kernel_layout.LayoutError) as e:
        log.warning("guest processes will be named by code bytes only: %s",
                    e)
        return None


def with_tb_size(argv: list[str], tb_size_mb: int) -> list[str]:
    """QEMU's argv with a code buffer of tb_size_mb MiB: ``-accel
    tcg,tb-size=N`` (QEMU refuses it together with -machine accel=)."""
    argv = list(argv)
    if "-accel" in argv:            # --tcg: add to its options
        i = argv.index("-accel") + 1
        argv[i] = ",".join([o for o in argv[i].split(",")
                            if not o.startswith("tb-size=")] +
                           [f"tb-size={tb_size_mb}"])
        return argv
    i = argv.index("-machine") + 1
    opts = argv[i].split(",")
    if "accel=tcg" not in opts:
        raise SetupError("setting the TCG code buffer size",
                         f"no accel=tcg in -machine {argv[i]}",
                         "update profile.with_tb_size for the launcher")
    opts.remove("accel=tcg")
    argv[i] = ",".join(opts)
    return argv + ["-accel", f"tcg,tb-size={tb_size_mb}"]


class ProfiledVM(VM):
    """A VM whose QEMU runs in ``outdir`` with -jitdump (and optionally
    -perfmap) and pvperf-rmap.so writing ``outdir/rmap.bin`` (``plugin``
    False: without it, for bench_rmap.py's jitdump-only figure)."""

    def __init__(self, config: VMConfig, outdir: Path,
                 task: kernel_layout.TaskLayout | None = None,
                 tb_size_mb: int | None = None, perfmap: bool = False,
                 plugin: bool = True, verbose: bool = False,
                 counts: bool = True):
        super().__init__(config)
        self.outdir = outdir
        self.rmap_path = outdir / RMAP_FILE
        self.task = task
        self.tb_size_mb = tb_size_mb
        self.perfmap = perfmap
        self.plugin = plugin
        self.verbose = verbose          # the plugin's summary at exit
        # TB execution counts for the translation table (bt_table.py):
        # an inline add per TB, 1.07x task-clock on hotcold's tight loop
        # (bench/bench_rmap.py, 2 rounds, 2026-11-29), so it can be off
        self.counts = counts
        self.pid: int | None = None

    def plugin_arg(self) -> str:
        opts = [str(RMAP_PLUGIN_PATH),
                f"out={qemu_escape(str(self.rmap_path))}",
                f"counts={'on' if self.counts else 'off'}"]
        if self.task is not None:
            opts.append(f"task={self.task.plugin_option()}")
        if self.verbose:
            opts.append("verbose=on")
        return ",".join(opts)

    def qemu_argv(self) -> list[str]:
        argv = super().qemu_argv() + ["-jitdump"]
        if self.plugin:
            argv += ["-plugin", self.plugin_arg()]
        if self.perfmap:
            argv.append("-perfmap")
        if self.tb_size_mb:
            argv = with_tb_size(argv, self.tb_size_mb)
        # QEMU writes jit-PID.dump into its current directory; env execs
        # QEMU, which keeps env's pid.
        return ["env", "-C", str(self.outdir), *argv]

    async def start(self) -> None:
        try:
            await super().start()
        finally:
            if self.console is not None:
                self.pid = self.console.child.pid

    @property
    def qemu_pid(self) -> int:
        return self.pid

    @property
    def jitdump_path(self) -> Path:
        return self.outdir / f"jit-{self.pid}.dump"

    def keep_perfmap(self) -> Path | None:
        """Move QEMU's /tmp/perf-PID.map into outdir (QEMU is gone)."""
        if self.pid is None:
            return None
        src = Path(f"/tmp/perf-{self.pid}.map")
        if not src.exists():
            return None
        dst = self.outdir / QEMU_PERFMAP
        shutil.move(str(src), dst)
        return dst


def guest_wrapper(command: str, workdir: str) -> str:
    """The guest shell script that runs ``command`` between go and done,
    snapshotting every process's maps and comm (one grep per round:
    lines "/proc/PID/maps:..." and "/proc/PID/comm:NAME")."""
    d = shlex.quote(workdir)
    return (
        f"while [ ! -e {d}/go ]; do sleep 0.02; done; "
        f"( {command} ) & p=$!; "
        f"( sleep {SNAPSHOT_FIRST_S}; n=0; while [ -e /proc/$p/maps ]; do "
        f"n=$((n+1)); grep -H '' /proc/[0-9]*/comm /proc/[0-9]*/maps "
        f"> {d}/snap.tmp 2>/dev/null; mv {d}/snap.tmp {d}/snap.$n; "
        f"sleep {SNAPSHOT_EVERY_S}; done ) & "
        f"wait $p; rc=$?; touch {d}/done; "
        f"grep '\\]$' /proc/kallsyms > {d}/modsyms 2>/dev/null; "
        f"exit $rc")


@dataclass
class Recording:
    """What record() leaves for resolve()."""
    workdir: Path                   # host side of the guest's workdir
    perf_data: Path
    rmap_path: Path
    jitdump_path: Path
    perfmap_path: Path | None       # QEMU's -perfmap, if asked for
    qemu_pid: int
    qemu_maps: str
    window: tuple[float, float]     # host CLOCK_MONOTONIC seconds
    status: int
    command: str
    smp: int
    arch: Arch
    perf_stderr: str = ""


async def _wait_file(path: Path, vm: VM, timeout: float | None) -> None:
    deadline = None if timeout is None else time.monotonic() + timeout
    while not path.exists():
        if not vm.console.alive():
            raise VMError("profiled command", "QEMU exited before the "
                          "command finished", "see --console output")
        if deadline is not None and time.monotonic() > deadline:
            raise VMError("profiled command", f"not done within {timeout:g}"
                          " s", "raise --timeout")
        await asyncio.sleep(0.005)


def sweep_workdirs(share: Path) -> list[Path]:
    """Remove the work directories that `pvperf profile` processes which
    no longer exist left in ``share`` (one killed by SIGKILL could not)."""
    removed = []
    for path in share.glob(f"{GUEST_WORKDIR}-*-*"):
        pid = path.name[len(GUEST_WORKDIR) + 1:].split("-")[0]
        if pid.isdigit() and channels.remove_orphaned_dir(path, int(pid)):
            removed.append(path)
    return removed


def remove_workdir(workdir: Path) -> None:
    """A recording's work directory in the share, once read or failed."""
    shutil.rmtree(workdir, ignore_errors=True)


async def record(config: VMConfig, outdir: Path, tb_size_mb: int | None = None,
                 perfmap: bool = False, stdout=None, stderr=None,
                 counts: bool = True) -> Recording:
    """Boot, run config.command while sampling QEMU; keep the raw data."""
    stdout = stdout or sys.stdout.buffer
    stderr = stderr or sys.stderr.buffer
    share = config.share
    sweep_workdirs(share)
    workdir = share / f"{GUEST_WORKDIR}-{os.getpid()}-{os.urandom(3).hex()}"
    workdir.mkdir()
    guest_dir = f"{SHARE_MOUNT}/{workdir.name}"
    # The kernel at its link address: its symbols and the task= layout
    # come from System.map, and a kernel booted from a flat Image with a
    # KASLR seed in its device tree would move away from it.
    wrapped = replace(config, command=guest_wrapper(config.command,
                                                    guest_dir),
                      kernel_args=(*config.kernel_args, "nokaslr"))
    perf_data = outdir / "perf.data"
    perf, vm = None, ProfiledVM(wrapped, outdir,
                                guest_task_layout(config.image,
                                                  config.arch),
                                tb_size_mb, perfmap, counts=counts)
    try:
        async with vm:
            pumps = await vm.pump_output(stdout, stderr)
            await vm.wait_ready()
            pid = vm.qemu_pid
            qemu_maps = Path(f"/proc/{pid}/maps").read_text()
            perf = hostperf.start_record(pid, perf_data)
            await asyncio.to_thread(hostperf.enable, perf)
            t_go = time.monotonic()
            (workdir / "go").touch()
            await _wait_file(workdir / "done", vm, config.timeout)
            t_done = time.monotonic()
            perf_err = hostperf.stop_record(perf)
            perf = None
            status = await vm.wait_exit(60)
            await asyncio.wait(pumps, timeout=5)
    except BaseException:       # Ctrl-C, SIGTERM, QEMU gone: no recording
        remove_workdir(workdir)
        raise
    finally:
        if perf is not None:
            hostperf.stop_record(perf)
        perfmap_path = vm.keep_perfmap()
    return Recording(workdir=workdir, perf_data=perf_data,
                     rmap_path=vm.rmap_path, jitdump_path=vm.jitdump_path,
                     perfmap_path=perfmap_path, qemu_pid=pid,
                     qemu_maps=qemu_maps, window=(t_go, t_done),
                     status=status, command=config.command, smp=config.smp,
                     arch=config.arch, perf_stderr=perf_err)

