"""pyhost/vm/qemu.py's TCG options: parsed and checked as QEMU 10.0 checks
them, and what pvperf accepts a real qemu-system-x86_64 accepts too."""
import shutil
import subprocess

import pytest

from pyhost.image.store import GuestImage
from pyhost.vm.launcher import VM, VMConfig
from pyhost.vm.qemu import TCG_OPTIONS, parse_tcg_options

ACCEPTED = "tb-size=64,one-insn-per-tb=on,split-wx=off,thread=multi"


def test_parse_keeps_order_and_refuses_what_qemu_would():
    assert parse_tcg_options("tb-size=64,one-insn-per-tb=on") == (
        "tb-size=64", "one-insn-per-tb=on")
    assert parse_tcg_options("") == ()
    for bad, word in (("bogus=1", "bogus"), ("tb-size=x", "tb-size=x"),
                      ("one-insn-per-tb", "one-insn-per-tb"),
                      ("thread=many", "thread"),
                      ("tb-size=8,tb-size=9", "twice")):
        with pytest.raises(ValueError, match=word):
            parse_tcg_options(bad)


def qemu_accepts(accel: str) -> tuple[bool, str]:
    """Whether qemu-system-x86_64 starts with -accel ACCEL (a machine with
    no CPU, held stopped: it runs until killed if the options are good,
    and exits at once naming the property if not)."""
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("qemu-system-x86_64 missing (run scripts/setup.sh)")
    proc = subprocess.Popen(["qemu-system-x86_64", "-machine", "none",
                             "-accel", accel, "-display", "none",
                             "-nodefaults", "-S"],
                            stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=3)
        return False, err
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return True, ""


def test_real_qemu_accepts_every_option_pvperf_accepts():
    assert {o.partition("=")[0] for o in parse_tcg_options(ACCEPTED)} == \
        set(TCG_OPTIONS)
    ok, err = qemu_accepts("tcg," + ACCEPTED)
    assert ok, err
    ok, err = qemu_accepts("tcg,bogus=1")       # the reference refuses
    assert not ok and "bogus" in err


def test_launcher_moves_accel_out_of_machine_with_tcg_options(tmp_path):
    image = GuestImage("t", tmp_path / "vmlinux", tmp_path / "initramfs",
                       tmp_path / "System.map", tmp_path / "root", "6.1.0")
    plain = VM(VMConfig(image=image, share=tmp_path, pmu=False))
    argv = plain.qemu_argv()
    plain.channels.close()
    assert "-accel" not in argv
    assert "accel=tcg" in argv[argv.index("-machine") + 1]
    vm = VM(VMConfig(image=image, share=tmp_path, pmu=False,
                     tcg=parse_tcg_options("one-insn-per-tb=on"),
                     data_dirs=("/usr/share/qemu",)))
    argv = vm.qemu_argv()
    vm.channels.close()
    assert "accel=" not in argv[argv.index("-machine") + 1]
    assert argv[argv.index("-accel") + 1] == "tcg,one-insn-per-tb=on"
    assert argv[argv.index("-L") + 1] == "/usr/share/qemu"
