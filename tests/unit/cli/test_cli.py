"""The pvperf command's argument handling and error format."""
import subprocess
import sys

import click
import pytest

from pyhost.cli import parse_mem
from pyhost.errors import PvperfError

from support import REPO, run_pvperf


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


@pytest.mark.parametrize("args", [["--smp", "0"], ["--smp", "17"],
                                  ["--arch", "aarch64", "--smp", "17"]],
                         ids=["zero", "over-16", "arm64-over-16"])
def test_bad_smp_is_a_usage_error(args):
    r = run_pvperf(["run", *args, "--", "true"])
    assert r.returncode == 64 and "--smp" in r.stderr, r.stderr


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


@pytest.mark.parametrize("argv,debug", [
    (["--debug", "run", "--", "true"], True),
    (["run", "--", "tool", "--debug"], False),
    (["run", "tool", "--debug"], False),
    (["run", "--smp", "1", "--", "tool", "--debug"], False),
])
def test_debug_is_pvperfs_only_before_the_subcommand(argv, debug,
                                                      monkeypatch, caplog):
    """click's parse alone says whose --debug it is: a traceback is
    logged only for pvperf's own."""
    from pyhost import cli as cli_mod

    def failing_make_config(*a, **kw):
        raise PvperfError("starting QEMU", "no such file", "install qemu")
    monkeypatch.setattr(cli_mod, "make_config", failing_make_config)
    with pytest.raises(SystemExit) as exit_info:
        cli_mod.main(argv)
    assert exit_info.value.code == 125
    assert bool([r for r in caplog.records if r.exc_info]) is debug


def test_a_debug_after_double_dash_is_no_option_of_pvperfs(capsys):
    from pyhost import cli as cli_mod
    with pytest.raises(SystemExit) as exit_info:
        cli_mod.main(["--", "--debug"])
    assert exit_info.value.code == 64
    assert "No such command '--debug'" in capsys.readouterr().err


def test_a_commands_debug_does_not_turn_on_pvperfs(monkeypatch, caplog,
                                                    capsys):
    """`pvperf run -- tool --debug`: --debug is the tool's; pvperf's
    error stays one line, no traceback logged."""
    from pyhost import cli as cli_mod

    def failing_make_config(*a, **kw):
        raise PvperfError("starting QEMU", "no such file", "install qemu")
    monkeypatch.setattr(cli_mod, "make_config", failing_make_config)
    with pytest.raises(SystemExit) as exit_info:
        cli_mod.main(["run", "--", "tool", "--debug"])
    assert exit_info.value.code == 125
    assert not [r for r in caplog.records if r.exc_info]
    assert capsys.readouterr().err == (
        "pvperf: starting QEMU: no such file \u2014 install qemu\n")
    with pytest.raises(SystemExit):
        cli_mod.main(["--debug", "run", "--", "tool"])
    assert [r for r in caplog.records if r.exc_info]


def test_ctrl_c_while_the_cli_imports_is_one_line():
    """A SIGINT while Python still imports the CLI (the soak's kill at
    0.3-5 s hit it on a loaded host: a KeyboardInterrupt traceback);
    sent here from an import hook, at click's import."""
    code = ("import os, signal, sys\n"
            "class Hook:\n"
            "    def find_spec(self, name, path, target=None):\n"
            "        if name == 'click':\n"
            "            os.kill(os.getpid(), signal.SIGINT)\n"
            "sys.meta_path.insert(0, Hook())\n"
            "import pyhost.cli\n"
            "print('imported')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True,
                       text=True, cwd=REPO, timeout=60)
    assert (r.returncode, r.stdout, r.stderr) == (
        130, "", "pvperf: interrupted while starting \u2014 nothing was "
        "started\n"), r
