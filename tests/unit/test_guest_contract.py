"""Every recipe's /init (a shell script, which cannot import
pyhost/guest_contract.py) uses exactly the contract's names: each of
them where /init reads it, and no other port name or kernel key."""
from __future__ import annotations

import re

import pytest

from pyhost import guest_contract as guest
from pyhost.image import root as image_root
from pyhost.image import stage
from pyhost.paths import RECIPES_DIR

INITS = sorted(RECIPES_DIR.glob("*/init"))


@pytest.fixture(params=INITS, ids=[p.parent.name for p in INITS])
def init(request) -> str:
    return request.param.read_text()


def assignment(init: str, var: str) -> str:
    m = re.search(rf"^{var}=(\S+)$", init, re.M)
    assert m, f"/init sets no {var}"
    return m.group(1)


def test_ports(init):
    ports = assignment(init, "PORTS")
    for var, port in (("CTL", "control"), ("OUT", "stdout"),
                      ("ERR", "stderr")):
        assert assignment(init, var) == f"$PORTS/{guest.port_name(port)}"
    assert ports == "/dev/virtio-ports"
    named = set(re.findall(r"org\.pvperf\.\w+", init))
    assert named == {guest.port_name(p) for p in guest.PORTS}


def test_control_messages(init):
    assert f"echo {guest.READY} >&3" in init
    assert f'echo "{guest.EXIT} $1" >&3' in init


def test_command_file(init):
    assert assignment(init, "CMD_FILE") == \
        f"/sys/firmware/qemu_fw_cfg/by_name/{guest.COMMAND_FW_CFG}/raw"


def test_driver_and_module_list(init):
    assert assignment(init, "PMU_KO") == guest.DRIVER_PATH
    assert f"done < {guest.MODULE_LIST}" in init


def test_share(init):
    mounts = re.findall(r"mount -t 9p -o \$P9OPTS (\S+) ([^\s;]+)", init)
    assert (guest.SHARE_TAG, guest.SHARE_MOUNT) in mounts
    assert all(tag == guest.SHARE_TAG for tag, _ in mounts)
    assert f"cwd={guest.SHARE_MOUNT}" in init
    assert f"-newer {guest.STAGED_STAMP})" in init


def test_kernel_keys(init):
    read = re.findall(r"^\s*(pvperf\.\w+)=\*\)", init, re.M)
    assert sorted(read) == sorted(guest.KERNEL_KEYS)
    assert f"{'|'.join(guest.ACTIONS)}) ;;" in init


def test_image_builder_places_what_init_reads():
    assert "/" + image_root.GUEST_DRIVER_PATH == guest.DRIVER_PATH
    assert "/" + image_root.GUEST_MODULE_LIST == guest.MODULE_LIST
    assert "/" + stage.GUEST_DIR == guest.SHARE_MOUNT
    assert "/" + stage.STAMP == guest.STAGED_STAMP
