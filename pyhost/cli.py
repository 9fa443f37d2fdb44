"""The ``pvperf`` command.

  pvperf run [options] -- CMD [ARGS...]   run CMD in a fresh guest
  pvperf shell [options]                  interactive guest shell
  pvperf image build [--force]            build or refresh the guest image
  pvperf events                           events the paravirtual PMU counts
  pvperf profile [options] -- CMD         host profile of QEMU + guest

Errors print one line, "pvperf: <what failed>: <cause> — <what to do>";
tracebacks only with --debug.
"""
from __future__ import annotations

import asyncio
import logging
import re
import shlex
import sys
from pathlib import Path

import click

from . import image as image_mod
from .errors import PvperfError, VMError
from .vm import VMConfig, run_command, run_shell

log = logging.getLogger("pvperf")

SIZE_RE = re.compile(r"^(\d+)([MmGg]?)$")


def parse_mem(text: str) -> int:
    """'1G' / '512M' / '768' (MiB) -> MiB."""
    m = SIZE_RE.match(text.strip())
    if not m:
        raise click.BadParameter(f"{text!r} is not a size like 512M or 1G")
    value, unit = int(m.group(1)), m.group(2).upper()
    return value * 1024 if unit == "G" else value


def ensure_image() -> image_mod.GuestImage:
    img = image_mod.image_status("default")
    if img is not None:
        return img
    click.echo("pvperf: building the default guest image (first use)...",
               err=True)
    return image_mod.build_image("default")


def vm_options(fn):
    """Options shared by run and shell."""
    opts = [
        click.option("--smp", type=click.IntRange(1, 8), default=1,
                     show_default=True, help="number of vCPUs"),
        click.option("--mem", "mem", default="1G", show_default=True,
                     help="guest RAM (e.g. 512M, 2G; at most 3G)"),
        click.option("--share", type=click.Path(file_okay=False,
                                                path_type=Path),
                     default=None, help="host directory mounted read-write "
                     "at /mnt/host [default: current directory]"),
        click.option("--timeout", type=click.FloatRange(min=0.1),
                     default=None, help="stop the guest after S seconds"),
        click.option("--no-pmu", is_flag=True, help="plain TCG: no plugin, "
                     "no guest PMU driver"),
        click.option("--console", "echo_console", is_flag=True,
                     help="show the guest's serial console on stderr"),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def make_config(mode: str, command: str, smp: int, mem: str,
                share: Path | None, timeout: float | None, no_pmu: bool,
                echo_console: bool) -> VMConfig:
    share = (share or Path.cwd()).resolve()
    if not share.is_dir():
        raise VMError("bad --share", f"{share} is not a directory",
                      "create it or pass an existing directory")
    return VMConfig(image=ensure_image(), mode=mode, command=command,
                    smp=smp, mem_mb=parse_mem(mem), share=share,
                    pmu=not no_pmu, timeout=timeout,
                    echo_console=echo_console)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="show tracebacks and debug logs")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """pvperf: exact perf events inside QEMU TCG guests."""
    ctx.obj = {"debug": debug}
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING,
                        format="pvperf: %(name)s: %(message)s")


@cli.command(context_settings={"allow_interspersed_args": False})
@vm_options
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(command, **opts) -> None:
    """Boot the default image and run COMMAND in /mnt/host as root.

    COMMAND's stdout and stderr stream to this terminal; pvperf exits
    with COMMAND's exit status.
    """
    config = make_config("run", shlex.join(command), **opts)
    sys.exit(asyncio.run(run_command(config)))


@cli.command()
@vm_options
def shell(**opts) -> None:
    """Boot the default image and open an interactive shell (Ctrl-] quits)."""
    config = make_config("shell", "", **opts)
    sys.exit(asyncio.run(run_shell(config)))


@cli.group()
def image() -> None:
    """Guest images."""


@image.command("build")
@click.option("--force", is_flag=True, help="rebuild even if up to date")
def image_build(force: bool) -> None:
    """Build or refresh the default guest image from Debian packages."""
    img = image_mod.build_image("default", force=force)
    click.echo(f"vmlinux:   {img.vmlinux}\ninitramfs: {img.initramfs}\n"
               f"kernel:    {img.kernel_version}")


@cli.command()
def events() -> None:
    """List the events the paravirtual PMU counts and what they mean."""
    from .pmu import Pmu
    for ev in Pmu().event_defs():
        raw = ",".join(f"r{c:04x}" for c in ev.raw_configs)
        click.echo(f"  {ev.name:<22} [Hardware event, {raw}]  {ev.doc}")


def main(argv=None) -> None:
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        cli.main(args=argv, prog_name="pvperf", standalone_mode=False)
    except click.exceptions.Abort:
        # click turns KeyboardInterrupt into Abort; our finally blocks ran.
        click.echo("pvperf: interrupted \u2014 the VM was stopped and "
                   "cleaned up", err=True)
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        click.echo("pvperf: interrupted \u2014 the VM was stopped and "
                   "cleaned up", err=True)
        sys.exit(130)
    except PvperfError as e:
        if debug:
            log.exception("failed")
        click.echo(f"pvperf: {e.one_line()}", err=True)
        if e.details:
            click.echo("--- last console lines ---\n" + e.details, err=True)
        sys.exit(2)


def _register_profile() -> None:
    from .profile_cli import profile
    cli.add_command(profile)


_register_profile()


if __name__ == "__main__":
    main()
