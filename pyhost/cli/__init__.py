"""The ``pvperf`` command: one click CLI for everything.

  pvperf run [options] -- CMD [ARGS...]   run CMD in a fresh guest
  pvperf stat [-e EV] [--json F] -- CMD   perf stat of CMD in a guest
  pvperf compare BASE.json NEW.json       regression gate on two results
  pvperf restore DIR                      resume a `run --checkpoint`
  pvperf shell [options]                  interactive guest shell
  pvperf profile [options] -- CMD         host profile of QEMU + guest
  pvperf report DIR                       re-render a saved profile
  pvperf report --diff A B [-o DIR]       compare two saved profiles
  pvperf events                           events the paravirtual PMU counts
  pvperf image status | build [--force] [--name N --add PKG,...]
                                          the guest images

Every argument is checked before any slow step (the image check or
build, the boot).  Errors print one line, "pvperf: <what failed>: <cause>
— <what to do>"; tracebacks only with --debug.  Exit statuses: EPILOG.
"""
from __future__ import annotations

import os
import signal
import sys
import threading


def _interrupted_while_starting(signum, frame):
    """Ctrl-C while Python still imports the CLI (below; a second and more
    on a loaded host): nothing has started, so there is nothing to clean
    up, and the user gets one line, not a KeyboardInterrupt traceback."""
    sys.stderr.write("pvperf: interrupted while starting \u2014 nothing "
                     "was started\n")
    os._exit(130)           # EXIT_INTERRUPTED


# Only where Python's own handler is in place: a SIGINT ignored (a job
# started with `&`) stays ignored, a host program's handler stays its own.
_GUARD = (threading.current_thread() is threading.main_thread() and
          signal.getsignal(signal.SIGINT) is signal.default_int_handler)
if _GUARD:
    signal.signal(signal.SIGINT, _interrupted_while_starting)

import asyncio  # noqa: E402
import logging  # noqa: E402
import shlex  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import click  # noqa: E402

# parse_mem: re-exported (the tests check it through the CLI module).
from .options import PROFILE_DIR, arch_option, diff_options, ensure_image, \
    make_config, parse_mem, resolve_image, vm_options  # noqa: F401
from .compare import compare
from .. import guest_contract as guest
from ..errors import GuestTimeoutError, PvperfError
from ..image import build as image_build
from ..image import recipe as image_recipe
from ..image import aptdir as image_aptdir
from ..image import packages as image_packages
from ..image import stage
from ..image.inputs import DEFAULT_DRIVER
from ..paths import DRIVER_KO_PATH
from ..pmu.events import default_events
from .. import results
from ..vm import checkpoint as vm_checkpoint
from ..vm import determinism
from ..vm.launcher import VMConfig, run_command, run_shell
from ..vm.qemu import find_qemu

if _GUARD:
    signal.signal(signal.SIGINT, signal.default_int_handler)

log = logging.getLogger("pvperf")

# The translation table's sort columns (profile/bt_table.SORT_KEYS, which
# a unit test compares): named here so that the CLI loads no profiler.
TABLE_SORT = ("host", "insns", "translated", "behalf", "translations",
              "ns_per_insn")

# Exit statuses of pvperf itself.  `run` and `profile` otherwise exit with
# the guest command's own status, which may be any of 0..255: these follow
# timeout(1) and sysexits.h so that scripts can tell them apart in practice.
EXIT_USAGE = 64          # EX_USAGE: bad arguments or options
EXIT_TIMEOUT = 124       # the guest command did not finish in --timeout
EXIT_FAILURE = 125       # pvperf failed (setup, image, VM, service)
EXIT_INTERRUPTED = 130   # Ctrl-C (128 + SIGINT), or SIGTERM

EPILOG = f"""\b
Exit status:
  run, stat,    the guest command's own status, except:
  profile
  {EXIT_USAGE}            usage error (bad arguments or options)
  {EXIT_TIMEOUT}           the guest command ran longer than --timeout
  {EXIT_FAILURE}           pvperf itself failed (setup, image, VM)
  {EXIT_INTERRUPTED}           interrupted (Ctrl-C, SIGTERM); the VM was cleaned up
  image status  0 up to date, 1 missing or out of date
  compare       0 no regression, 1 a regression, 2 bad input
"""

@click.group(context_settings={"help_option_names": ["-h", "--help"]},
             epilog=EPILOG)
@click.option("--debug", is_flag=True, help="show tracebacks and debug logs")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """pvperf: exact perf events inside QEMU TCG guests."""
    # main() reads it back: click alone parses pvperf's options, so a
    # --debug after the subcommand (the guest command's) is not pvperf's
    ctx.ensure_object(dict)["debug"] = debug
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING,
                        format="pvperf: %(name)s: %(message)s")


class _Tee:
    """The command's stderr: streamed on, and kept for --json."""

    def __init__(self, out):
        self.out, self.kept = out, bytearray()

    def write(self, data: bytes) -> None:
        self.out.write(data)
        self.kept += data

    def flush(self) -> None:
        self.out.flush()


def json_option(fn):
    return click.option(
        "--json", "json_out", type=click.Path(dir_okay=False,
                                              path_type=Path),
        default=None, help="write the guest's perf stat counts and how they "
        "were measured to this file (schema: docs/ci.md)")(fn)


async def _cancelled_by_sigterm(coro):
    """Await ``coro``; SIGTERM cancels it as Ctrl-C does (asyncio.run's
    SIGINT handler), so that every ``finally`` runs: QEMU stopped, the run
    directory removed.  Installed here rather than over SIGINT's handler
    because a job started with `&` inherits SIGINT ignored, and asyncio
    then installs none: a CI runner's SIGTERM has to work alone.  One
    cancellation: a second SIGTERM must not cut the clean-up short."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()

    def cancel() -> None:
        if not task.cancelling():
            task.cancel()

    loop.add_signal_handler(signal.SIGTERM, cancel)
    try:
        return await coro
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


def run_async(coro):
    """asyncio.run(coro) for a command: Ctrl-C and SIGTERM stop it cleanly
    (main() turns either into EXIT_INTERRUPTED)."""
    return asyncio.run(_cancelled_by_sigterm(coro))


def run_and_record(config: VMConfig, json_out: Path | None,
                   asked: tuple[str, ...] = ()) -> int:
    """Run ``config``; with ``json_out``, write the perf stat counts found
    in the command's stderr (pyhost/results.py), named as ``asked`` (the
    -e lists given to perf stat) names them.  A deterministic run says at
    its end when the command changed the share (vm/determinism.py)."""
    if config.deterministic:
        before = stage.share_state(config.share)
        try:
            return _run_and_record(config, json_out, asked)
        finally:
            note = determinism.end_note(before,
                                        stage.share_state(config.share))
            if note:
                click.echo(note, err=True)
    return _run_and_record(config, json_out, asked)


def _run_and_record(config: VMConfig, json_out: Path | None,
                    asked: tuple[str, ...]) -> int:
    if json_out is None:
        return run_async(run_command(config))
    # Read now: another pvperf may replace the cached image meanwhile.
    image_meta = results.image_meta(config.image.manifest)
    tee = _Tee(sys.stderr.buffer)
    status = run_async(run_command(config, stderr=tee))
    events = results.parse_perf_stat(tee.kept.decode("utf-8", "replace"),
                                     asked)
    if not events:
        raise results.ResultError(
            f"--json {json_out}", "no perf stat counts on the command's "
            "stderr", "run perf stat in the guest (`pvperf stat` does)")
    opts = config.plugin_options
    model = {"pmu": config.pmu, "I1": opts.get("I1"), "D1": opts.get("D1"),
             "LL": opts.get("LL"), "iTLB": opts.get("iTLB"),
             "dTLB": opts.get("dTLB"), "cachegrind_compat": "compat" in opts,
             "timing": config.timing, "accounting": config.accounting,
             "penalties": {k[len("penalty_"):]: int(v) for k, v in opts.items()
                           if k.startswith("penalty_")}}
    results.write_result(results.build_result(
        events, command=config.command, exit_status=status,
        deterministic=config.deterministic, model=model,
        vm={"smp": config.smp, "mem_mb": config.mem_mb},
        qemu=find_qemu(config.qemu, config.arch), image=image_meta),
        json_out)
    click.echo(f"pvperf: {len(events)} counts written to {json_out}",
               err=True)
    return status


@cli.command(context_settings={"allow_interspersed_args": False},
             epilog=EPILOG)
@vm_options()
@json_option
@click.option("--checkpoint", "checkpoint_dir", type=click.Path(
    file_okay=False, path_type=Path), default=None,
    help="save the running guest, PMU state included, into this new "
    "directory when --checkpoint-after or --checkpoint-on-output says, "
    "and stop; `pvperf restore DIR` resumes it (docs/checkpoints.md)")
@click.option("--checkpoint-after", type=click.FloatRange(min=0),
              default=None, metavar="S",
              help="take --checkpoint S seconds into COMMAND")
@click.option("--checkpoint-on-output", default=None, metavar="TEXT",
              help="take --checkpoint as soon as COMMAND's output "
              "contains TEXT")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(command, json_out, checkpoint_dir, checkpoint_after,
        checkpoint_on_output, **opts) -> None:
    """Boot the image (--image) and run COMMAND in /mnt/host as root.

    COMMAND's stdout and stderr stream to this terminal; pvperf exits
    with COMMAND's exit status.  With --json, COMMAND runs perf stat.
    """
    trigger = checkpoint_trigger(checkpoint_dir, checkpoint_after,
                                 checkpoint_on_output)
    if checkpoint_dir is not None and json_out is not None:
        raise click.UsageError("--json cannot span a checkpoint: give it "
                               "to `pvperf restore` instead")
    config = make_config(guest.RUN, shlex.join(command),
                         staged=checkpoint_dir is not None, **opts)
    if checkpoint_dir is not None:
        sys.exit(run_to_checkpoint(config, checkpoint_dir, trigger))
    sys.exit(run_and_record(config, json_out))


def checkpoint_trigger(directory: Path | None, after: float | None,
                       on_output: str | None) -> vm_checkpoint.Trigger | None:
    """--checkpoint's trigger: exactly one of --checkpoint-after and
    --checkpoint-on-output, and neither without --checkpoint."""
    given = (after is not None) + (on_output is not None)
    if directory is None and given == 0:
        return None
    if directory is None or given != 1:
        raise click.UsageError("--checkpoint takes one of --checkpoint-after "
                               "and --checkpoint-on-output")
    if on_output is not None:
        if not on_output:
            raise click.UsageError("--checkpoint-on-output: empty TEXT")
        return vm_checkpoint.OnOutput(on_output)
    return vm_checkpoint.AfterSeconds(after)


def run_to_checkpoint(config: VMConfig, directory: Path,
                      trigger: vm_checkpoint.Trigger) -> int:
    """`run --checkpoint`: COMMAND's status if it ended first, else 0
    once the checkpoint is complete."""
    vm_checkpoint.prepare(directory, config)
    taken = False
    try:
        status = run_async(vm_checkpoint.run_with_checkpoint(
            config, directory, trigger))
        taken = status is None
    finally:
        if not taken:
            vm_checkpoint.discard(directory)
    if not taken:
        click.echo(f"pvperf: COMMAND ended before the checkpoint was due "
                   f"({trigger.describe()}): no checkpoint taken", err=True)
        return status
    size = sum(p.stat().st_size for p in directory.iterdir())
    click.echo(f"pvperf: checkpoint of the guest {trigger.describe()} "
               f"saved in {directory} ({size / 2**20:.0f} MiB); resume it "
               f"with `pvperf restore {directory}`", err=True)
    return 0


@cli.command(epilog=EPILOG)
@click.argument("directory", type=click.Path(exists=True, file_okay=False,
                                             path_type=Path))
@click.option("--timeout", type=click.FloatRange(min=0.1), default=None,
              help="stop the guest after S seconds")
@click.option("--console", "echo_console", is_flag=True,
              help="show the guest's serial console on stderr")
@json_option
def restore(directory, timeout, echo_console, json_out) -> None:
    """Resume the guest saved by `pvperf run --checkpoint DIRECTORY`.

    Every part of the checkpoint is checked first (versions, SHA-256);
    then COMMAND goes on where it stopped, its counts and samples
    included, and pvperf exits with its status.
    """
    config = vm_checkpoint.load(directory, timeout, echo_console)
    click.echo(f"pvperf: resuming the guest saved in {directory}", err=True)
    sys.exit(run_and_record(config, json_out))


@cli.command(context_settings={"allow_interspersed_args": False},
             epilog=EPILOG)
@click.option("-e", "--event", "events", multiple=True, metavar="EVENTS",
              help="perf stat events (repeatable; default: perf's set)")
@vm_options()
@json_option
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def stat(command, events, json_out, **opts) -> None:
    """Run `perf stat [-e EVENTS] -- COMMAND` in the guest (as `run`
    does) and exit with COMMAND's status; --json writes the counts."""
    argv = ["perf", "stat"] + (["-e", ",".join(events)] if events else [])
    config = make_config(guest.RUN, shlex.join(argv + ["--", *command]), **opts)
    sys.exit(run_and_record(config, json_out, events))


@cli.command()
@click.argument("matrix", type=click.Path(exists=True, dir_okay=False,
                                          path_type=Path))
@click.option("--output", "-o", required=True, help="directory for the "
              "cells and the table", type=click.Path(file_okay=False,
                                                     path_type=Path))
@click.option("--parallel", "-j", type=click.IntRange(1, 256),
              default=os.cpu_count() or 1, show_default=True,
              help="cells at once (the local Ray instance's CPUs)")
@click.option("--address", default=None, help="an existing Ray cluster")
def sweep(matrix, output, parallel, address) -> None:
    """Run MATRIX.toml's cells on Ray (docs/sweep.md); finished cells
    are skipped; the table goes to OUTPUT/results.csv and .parquet."""
    from ..sweep import matrix as sweep_matrix, runner
    m = sweep_matrix.load(matrix)
    for name in sorted({c.image for c in m.cells}):
        ensure_image(name)      # once, not by every cell at once
    with click.progressbar(length=len(m.cells), file=sys.stderr,
                           label=f"pvperf: {len(m.cells)} cells",
                           show_pos=True) as bar:
        outcomes = runner.sweep(m, output, parallel=parallel,
                                address=address, progress=lambda o:
                                bar.update(1))
    lines, failed = runner.summary(outcomes, output)
    click.echo("\n".join(lines), err=True)
    sys.exit(1 if failed else 0)


cli.add_command(compare)


@cli.command(epilog=EPILOG)
@vm_options()
def shell(**opts) -> None:
    """Boot the image (--image) and open an interactive shell (Ctrl-] quits)."""
    config = make_config(guest.SHELL, "", **opts)
    sys.exit(run_async(run_shell(config)))


@cli.command(context_settings={"allow_interspersed_args": False},
             epilog=EPILOG)
@click.option("--output", "-o", type=click.Path(file_okay=False,
              path_type=Path), default=Path("pvperf-profile"),
              show_default=True, help="directory for the profile files")
@vm_options(pmu_switch=False)
@click.option("--tb-size", "tb_size", type=click.IntRange(1, 2048),
              default=None, help="QEMU's code buffer in MiB (-accel "
              "tcg,tb-size; small values force code-cache flushes)")
@click.option("--compare-perfmap", "perfmap", is_flag=True,
              help="also run QEMU's -perfmap and compare its resolution "
              "with the reverse map's (session meta, report)")
@click.option("--table-sort", "table_sort", type=click.Choice(TABLE_SORT),
              default="host", show_default=True,
              help="sort the report's translation table by this column")
@click.option("--no-counts", "no_counts", is_flag=True,
              help="no guest instruction counts in the translation table "
              "(saves an inline add per TB: ~1.07x on a tight loop)")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def profile(command, output, tb_size, perfmap, table_sort, no_counts,
            **opts) -> None:
    """Run COMMAND in the guest (plain TCG) while sampling QEMU; report
    emulator, guest kernel and guest user functions in one profile.

    Writes session.json and its renderings into --output (see `pvperf
    report`); exits with COMMAND's exit status.
    """
    # Imported here: `pvperf run` (the common case, timed by
    # bench/bench_boot.py) should not load the profiler and its ELF readers.
    from ..profile import pipeline
    pipeline.preflight()
    config = make_config(guest.RUN, shlex.join(command), no_pmu=True, **opts)
    done = pipeline.profile(config, output, tb_size_mb=tb_size,
                            perfmap=perfmap, table_sort=table_sort,
                            counts=not no_counts, run=run_async)
    click.echo(done.report)
    click.echo(f"pvperf: profile written to {output}/", err=True)
    sys.exit(done.status)


@cli.command(epilog=EPILOG)
@click.argument("directory", type=PROFILE_DIR, required=False)
@diff_options
@click.option("--table-sort", "table_sort", type=click.Choice(TABLE_SORT),
              default="host", show_default=True,
              help="sort the translation table by this column")
def report(directory: Path | None, diff, sort: str, view: str,
           output: Path, table_sort: str) -> None:
    """Re-render the profile saved in DIRECTORY (its session.json): print
    the report and rewrite every output file, without recording again.
    With --diff A B, compare two saved profiles instead."""
    from ..profile import session as prof_session
    if (directory is None) == (diff is None):
        raise click.UsageError("give a profile DIRECTORY or --diff A B")
    if diff is None:
        session = prof_session.load_session(directory)
        click.echo(prof_session.render_all(session, directory, table_sort))
        return
    from ..profile import diff as prof_diff
    a, b = (prof_diff.Side.of(str(d), prof_session.load_session(d), view)
            for d in diff)
    click.echo(prof_diff.render_diff(a, b, output, sort), nl=False)
    click.echo(f"pvperf: diff written to {output}/", err=True)


@cli.command()
def events() -> None:
    """List the events the paravirtual PMU counts and what they mean."""
    for ev in default_events():
        raw = ",".join(f"r{c:04x}" for c in ev.raw_configs)
        kind = "Hardware cache event" if ev.cache_config is not None \
            else "Hardware event"
        click.echo(f"  {ev.name:<22} [{kind}, {raw}]  {ev.doc}")


@cli.group()
def image() -> None:
    """The guest image (built from Debian packages, cached)."""


def image_options(fn):
    """The image to look at and the driver to put in it."""
    fn = arch_option(fn)
    fn = click.option("--no-driver", is_flag=True,
                      help="without the guest PMU driver")(fn)
    fn = click.option("--driver-ko", type=click.Path(exists=True,
                      dir_okay=False, path_type=Path), default=None,
                      help=f"guest PMU driver [default: {DRIVER_KO_PATH}, "
                      "or for another architecture's image the one make "
                      "KARCH=<its Debian name> built beside it, or for "
                      "another kernel's (linux-6.12) the one make "
                      "IMAGE=<image> built: the one whose vermagic names "
                      "the image's kernel, if built]")(fn)
    return click.option("--name", default="default", show_default=True,
                        help="image: a recipe in images/, or one built "
                        "with --add (default: --arch's own)")(fn)


def _driver(driver_ko: Path | None, no_driver: bool):
    if driver_ko is not None and no_driver:
        raise click.UsageError("--driver-ko and --no-driver exclude each "
                               "other")
    return None if no_driver else (driver_ko or DEFAULT_DRIVER)


@image.command("status")
@image_options
def image_status(name: str, driver_ko: Path | None, no_driver: bool,
                 arch) -> None:
    """Say whether the image is up to date (exit 0) or not (exit 1)."""
    name, _arch = resolve_image(name, arch)
    img = image_build.image_status(name, driver_ko=_driver(driver_ko,
                                                           no_driver))
    click.echo(f"{name}: " + (f"up to date ({img.vmlinux.parent})" if img
                              else "missing or out of date"))
    sys.exit(0 if img else 1)


def _packages_callback(ctx, param, value: str | None) -> list[str] | None:
    if value is None:
        return None
    names = [p.strip() for p in value.split(",") if p.strip()]
    try:
        if not names:
            raise ValueError("no package named")
        return image_recipe.parse_packages(names)
    except ValueError as e:
        raise click.BadParameter(str(e))


def _save_added(name: str, add: list[str], arch) -> None:
    """Check ``name`` and the packages (apt resolves them for ``arch``'s
    default recipe: an unknown one is a usage error), then save the
    derived recipe."""
    try:
        image_recipe.check_image_name(name)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="'--name'")
    if (image_recipe.recipe_dir(name) / "recipe.json").is_file():
        raise click.BadParameter(
            f"{name} is a recipe in images/; --add makes a new image: "
            "choose another name", param_hint="'--name'")
    base, _ = resolve_image("default", arch)
    base_recipe = image_recipe.load_recipe(base)
    wanted = base_recipe.packages + add
    ctx = image_aptdir.for_recipe(base_recipe, wanted)
    ctx.ensure_lists(lambda m: click.echo(f"pvperf: image: {m}", err=True))
    try:
        image_packages.resolve(wanted, ctx)
    except image_packages.PackageNotFound as e:
        raise click.BadParameter(f"{e.package}: {e.cause}",
                                 param_hint="'--add'")
    image_recipe.save_derived_recipe(name, base, add)


@image.command("build")
@click.option("--force", is_flag=True, help="rebuild even if up to date")
@click.option("--add", "add", metavar="PKG[,PKG...]", default=None,
              callback=_packages_callback,
              help="build image --name as the default recipe plus these "
              "Debian packages and their dependencies (saved: later "
              "builds and `pvperf run --image NAME` reuse the list)")
@image_options
def image_build_cmd(force: bool, add: list[str] | None, name: str,
                    driver_ko: Path | None, no_driver: bool, arch) -> None:
    """Build or refresh an image from Debian packages."""
    t0 = time.monotonic()
    if add is not None:
        _save_added(name, add, arch)
    elif not image_recipe.image_exists(image_recipe.recipe_name(name, arch)):
        raise click.BadParameter(f"no image {name!r}: give the packages "
                                 "with --add PKG[,PKG...]",
                                 param_hint="'--name'")
    name, _arch = resolve_image(name, arch)
    img = image_build.build_image(name, force=force,
                                  driver_ko=_driver(driver_ko, no_driver))
    click.echo(f"vmlinux:   {img.vmlinux}\ninitramfs: {img.initramfs}\n"
               f"kernel:    {img.kernel_version}")
    click.echo(f"pvperf: image: {img.name} ready in "
               f"{time.monotonic() - t0:.1f} s", err=True)


def _interrupted() -> None:
    click.echo("pvperf: interrupted \u2014 the VM was stopped and "
               "cleaned up", err=True)
    sys.exit(EXIT_INTERRUPTED)


def main(argv=None) -> None:
    state = {"debug": False}     # cli() records pvperf's --debug in it
    try:
        cli.main(args=argv, prog_name="pvperf", standalone_mode=False,
                 obj=state)
    except click.exceptions.Abort:
        # click turns KeyboardInterrupt into Abort; our finally blocks ran.
        _interrupted()
    except (KeyboardInterrupt, asyncio.CancelledError):
        _interrupted()     # Ctrl-C, or SIGTERM (run_async)
    except click.UsageError as e:
        where = e.ctx.command_path if e.ctx else "pvperf"
        click.echo(f"pvperf: usage: {e.format_message()} \u2014 see "
                   f"`{where} --help`", err=True)
        sys.exit(EXIT_USAGE)
    except click.ClickException as e:
        e.show()
        sys.exit(EXIT_FAILURE)
    except PvperfError as e:
        if state["debug"]:
            log.exception("failed")
        click.echo(f"pvperf: {e.one_line()}", err=True)
        if e.details:
            click.echo("--- last console lines ---\n" + e.details, err=True)
        sys.exit(EXIT_TIMEOUT if isinstance(e, GuestTimeoutError)
                 else EXIT_FAILURE)


if __name__ == "__main__":
    main()
