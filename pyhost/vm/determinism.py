"""Deterministic runs (``pvperf run --deterministic``): what makes a guest
run replayable, in one place (measurements: docs/determinism.md).

A run is deterministic when the guest executes the same instructions in
the same order every time, so that every count and every sample repeats,
kernel included.  What would otherwise differ between runs, and what
removes it:

  guest time     TCG's virtual clock follows the host's, so timer
                 interrupts land at other instructions each run.
                 ``-icount shift=0,sleep=off``: time advances 1 ns per
                 instruction and, when the vCPU idles, jumps to the next
                 timer deadline instead of waiting for the host (shift=auto
                 and align=on follow host speed: QEMU refuses them with
                 sleep=off).  The RTC starts at a fixed date and follows
                 the virtual clock (``-rtc base=...,clock=vm``).
  device I/O     a virtio doorbell is an ioeventfd that QEMU's main loop
                 serves at a host-timed moment (the guest's virtio_console
                 probe spins for the answer: 2 us more or less per boot);
                 ``ioeventfd=off`` serves it in the vCPU thread, at once.
                 The host connects to the virtio-serial ports while QEMU
                 holds the guest (``-S``, then QMP ``cont``), so the guest
                 never sees a port open at a host-timed moment.  A 9p
                 request still completes in a QEMU worker thread whenever
                 the host gets there, so the share is staged in guest RAM
                 (image/stage.py: appended to the initramfs) and 9p is used
                 only after the command, to copy its files back.  The
                 command's stdout and stderr ports write into files, not
                 sockets (vm/channels.py): a socket fills when the host
                 reads late and the guest would wait for the host.
  randomness     RDRAND under TCG comes from QEMU's guest RNG, seeded
                 (``-seed``); no KASLR, no user address-space randomization
                 (``norandmaps``: a dynamically linked program's libraries
                 and stack sit at the same addresses, so the same sample
                 IPs), no per-syscall kernel stack offset.
  samples        sampling NMIs go through QMP from another thread and land
                 wherever the vCPU happens to be; here every sampling
                 overflow waits for the service's answer (PMU SYNC slots),
                 which raises the NMI first when one is due (a machine
                 without NMIs, Arch.qmp_nmi False: the plugin rings the
                 doorbell and waits until QEMU has raised the vector), so
                 it lands at the next translation-block boundary; an
                 unanswered NMI is
                 re-sent after a number of overflows, not of host seconds
                 (pmu.sampling).  perf's throttle counts samples per tick;
                 its limits are lifted (sysctl) so none depends on where
                 ticks fall.
  vCPUs          icount runs TCG single-threaded, round-robin, where the
                 plugin counts one vCPU only (its scoreboard index is folded
                 into the code): ``--smp`` must be 1.

Not deterministic: anything the command reads from outside the guest
while it runs (there is no network; the host's stdin is not forwarded),
and kernel messages on the serial console when the host reads it late.

Inputs, not leaks: the image, the command line and the share's content.
The guest unpacks the staged share while it boots, so one more file (a
``perf stat -o`` the previous run copied back) makes the boot take a few
microseconds more; the ticks then fall elsewhere in the command and its
kernel-inclusive counts move by a few instructions (user-space counts
do not).  The run names what it staged at its start (start_note) and
says at its end when the command changed the share (end_note).
"""
from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from ..errors import VMError

# 2^0 ns per instruction: 1 GHz of virtual time, about what TCG runs at.
ICOUNT_SHIFT = 0
SEED = 1
RTC_BASE = "2020-01-01T00:00:00"
# Staged files (image/stage.py) carry this mtime, a day before the guest's
# clock starts, so /init copies back exactly what the command wrote.
STAGED_MTIME = 1577836800 - 86400      # RTC_BASE - 1 day, Unix time

QEMU_ARGS = ("-S", "-icount", f"shift={ICOUNT_SHIFT},sleep=off,align=off",
             "-rtc", f"base={RTC_BASE},clock=vm",
             "-seed", str(SEED),
             "-global", "virtio-serial-pci.ioeventfd=off",
             "-global", "virtio-9p-pci.ioeventfd=off")
KERNEL_ARGS = ("nokaslr", "norandmaps", "randomize_kstack_offset=off",
               # perf's sample-rate throttle counts samples per tick, so
               # where ticks fall would decide which samples survive:
               # a limit no fixed period reaches, then no dynamic lowering
               # (the kernel takes the rate only while the percent is set).
               "sysctl.kernel.perf_event_max_sample_rate=10000000",
               "sysctl.kernel.perf_cpu_time_max_percent=0")


def write_initrd(path: Path, initramfs: Path, overlay: bytes) -> None:
    """The image's initramfs followed by ``overlay`` (the kernel unpacks
    concatenated newc archives in order), in a new private file."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out, open(initramfs, "rb") as src:
        shutil.copyfileobj(src, out, 1 << 20)
        out.write(overlay)


def check(smp: int) -> None:
    """Refuse what deterministic runs cannot do (one line)."""
    if smp != 1:
        raise VMError("bad --smp for --deterministic",
                      f"--smp {smp}: QEMU runs icount single-threaded and "
                      "the plugin counts one vCPU there",
                      "use --smp 1 (the default)")


def start_note(share: Path, overlay: bytes) -> str:
    """The line a deterministic run prints first: the staged share, by the
    digest of its archive (every entry's name, mode, mtime and content)."""
    digest = hashlib.sha256(overlay).hexdigest()[:16]
    return (f"pvperf: deterministic run: share {share} staged "
            f"({len(overlay)} bytes, sha256 {digest}); counts with a kernel "
            "part repeat for the same share, command and image")


def end_note(before: dict, after: dict) -> str | None:
    """What a deterministic run prints last when the command changed the
    share (``before``/``after``: image.stage.share_state), else None."""
    changed = sorted(p for p in after if after[p] != before.get(p))
    if not changed:
        return None
    names = ", ".join(changed[:3]) + (", ..." if len(changed) > 3 else "")
    return (f"pvperf: deterministic run: {len(changed)} file(s) copied "
            f"back into the share ({names}): the next run stages another "
            "share, and its kernel-inclusive counts may differ by a few "
            "instructions (write outputs elsewhere, or restore the share)")
