"""The pvperf command's argument handling and error format."""
import click
import pytest

from pyhost.cli import parse_mem
from pyhost.errors import PvperfError

from support import run_pvperf


@pytest.mark.parametrize("text,mib", [("1G", 1024), ("512M", 512),
                                      ("768", 768), ("2g", 2048)])
def test_parse_mem(text, mib):
    assert parse_mem(text) == mib


@pytest.mark.parametrize("text", ["", "1T", "-5", "1.5G", "abc"])
def test_parse_mem_rejects(text):
    with pytest.raises(click.BadParameter):
        parse_mem(text)


def test_error_line_format():
    e = PvperfError("starting QEMU", "no such file", "install qemu")
    assert e.one_line() == "starting QEMU: no such file \u2014 install qemu"


def test_run_without_command_is_a_usage_error():
    r = run_pvperf(["run"])
    assert r.returncode == 64 and "Missing argument" in r.stderr


def test_bad_smp_is_a_usage_error():
    r = run_pvperf(["run", "--smp", "0", "--", "true"])
    assert r.returncode == 64 and "--smp" in r.stderr


def test_events_lists_the_model():
    r = run_pvperf(["events"])
    assert r.returncode == 0
    for name in ("instructions", "branch-instructions", "cpu-cycles",
                 "r00c0"):
        assert name in r.stdout


def test_unknown_option_is_refused_not_run_as_the_command():
    r = run_pvperf(["run", "--bogus", "--", "true"])
    assert r.returncode == 64
    assert "No such option" in r.stderr and "--bogus" in r.stderr


def test_options_after_the_command_belong_to_the_command(tmp_path):
    """`pvperf run CMD -x` passes -x to CMD (no `--` needed after CMD)."""
    from click.testing import CliRunner
    from pyhost import cli as cli_mod
    seen = {}

    def fake_make_config(mode, command, *a, **kw):
        seen["command"] = command
        raise SystemExit(0)
    orig = cli_mod.make_config
    cli_mod.make_config = fake_make_config
    try:
        CliRunner().invoke(cli_mod.cli, ["run", "perf", "stat", "-e",
                                         "instructions", "true"])
    finally:
        cli_mod.make_config = orig
    assert seen["command"] == "perf stat -e instructions true"
