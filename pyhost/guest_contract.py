"""What pyhost and the guest image's /init agree on, defined once.

/init (the recipes' ``init``, one file they share) is a busybox shell
script and cannot import this module: tests/unit/test_guest_contract.py
checks that it uses exactly these names.  images/README.md describes the boot they take part in.

  SHARE_MOUNT      where /init mounts the --share directory (9p, tag
                   SHARE_TAG), or where a staged share is unpacked
  PORTS            the virtio-serial ports: QEMU names each port_name(p),
                   /init finds it as /dev/virtio-ports/<that name>;
                   control carries READY, then EXIT <status>
  COMMAND_FW_CFG   the fw_cfg file that holds a run's command
  DRIVER_PATH      the guest PMU driver inside the image
  MODULE_LIST      the kernel modules /init loads, in order
  STAGED_STAMP     a staged share's stamp: files newer than it go back
  *_KEY            kernel command-line keys /init reads (KEY=value)

ACTION_KEY keeps the name pvperf.mode that /init has always read: the
boot-by-hand line in images/README.md and scripts that boot an image
themselves (bench/bench_boot.py) pass it.  The image builder hashes this
file: an image is rebuilt when a name in it changes.
"""
from __future__ import annotations

SHARE_MOUNT = "/mnt/host"
SHARE_TAG = "pvperf-host"

PORTS = ("control", "stdout", "stderr")
PORT_PREFIX = "org.pvperf."
READY = "READY"
EXIT = "EXIT"

COMMAND_FW_CFG = "opt/org.pvperf/cmd"
DRIVER_PATH = "/lib/modules/pvperf/pvperf.ko"
MODULE_LIST = "/etc/pvperf/modules.load"
STAGED_STAMP = "/etc/pvperf/staged"

# What /init does once booted: run the command and power off, or give an
# interactive shell on the console.
ACTION_KEY = "pvperf.mode"
RUN = "run"
SHELL = "shell"
ACTIONS = (RUN, SHELL)
SHARE_KEY = "pvperf.share"          # =1: mount the share
STAGED_KEY = "pvperf.staged"        # =1: the share is in the initramfs
PMU_KEY = "pvperf.pmu"              # =1: load the guest PMU driver
PMU_ARGS_KEY = "pvperf.pmu_args"    # the driver's parameters, ','-joined
KERNEL_KEYS = (ACTION_KEY, SHARE_KEY, STAGED_KEY, PMU_KEY, PMU_ARGS_KEY)


def port_name(port: str) -> str:
    """The name QEMU gives virtio-serial port ``port`` (one of PORTS)."""
    return PORT_PREFIX + port


def kernel_arg(key: str, value: object) -> str:
    """``key=value`` for the kernel command line (key one of KERNEL_KEYS)."""
    return f"{key}={value}"


def in_root(guest_path: str) -> str:
    """A guest path relative to the image's root tree."""
    return guest_path.lstrip("/")
