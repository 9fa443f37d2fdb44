"""profile/record.py without a VM: what record() hands the VM."""
from __future__ import annotations

import asyncio

import pytest

from pyhost.errors import VMError
from pyhost.profile import record
from pyhost.vm.launcher import VMConfig


def test_record_leaves_the_callers_config_alone(tmp_path, monkeypatch):
    caller = VMConfig(image=None, command="./hotcold 10", share=tmp_path)
    seen = {}

    class NoBootVM:
        """Stands in for ProfiledVM: notes what it got, boots nothing."""

        def __init__(self, config, outdir, *a, **kw):
            seen["config"] = config

        async def __aenter__(self):
            seen["caller_command_meanwhile"] = caller.command
            raise VMError("no boot in this test")

        async def __aexit__(self, *exc):
            return None

        def keep_perfmap(self):
            return None

    monkeypatch.setattr(record, "ProfiledVM", NoBootVM)
    monkeypatch.setattr(record, "guest_task_layout", lambda image, arch: None)
    with pytest.raises(VMError):
        asyncio.run(record.record(caller, tmp_path))
    assert seen["caller_command_meanwhile"] == caller.command == "./hotcold 10"
    assert seen["config"] is not caller
    assert seen["config"].command.startswith("while [ ! -e /mnt/host/")
    assert "( ./hotcold 10 ) &" in seen["config"].command


@pytest.mark.parametrize("counts", [True, False])
def test_plugin_counts_tbs_unless_told_not_to(tmp_path, counts):
    vm = record.ProfiledVM(VMConfig(image=None, share=tmp_path), tmp_path,
                           counts=counts)
    opts = vm.plugin_arg().split(",")[1:]
    assert f"counts={'on' if counts else 'off'}" in opts


def test_tb_size_joins_the_tcg_options():
    plain = ["qemu", "-machine", "pc,accel=tcg,memory-backend=ram"]
    assert record.with_tb_size(plain, 16) == [
        "qemu", "-machine", "pc,memory-backend=ram", "-accel",
        "tcg,tb-size=16"]
    tcg = ["qemu", "-machine", "pc,memory-backend=ram", "-accel",
           "tcg,one-insn-per-tb=on,tb-size=64"]
    assert record.with_tb_size(tcg, 16)[-1] == \
        "tcg,one-insn-per-tb=on,tb-size=16"
