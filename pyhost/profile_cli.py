"""``pvperf profile``: a system-wide profile of QEMU and its guest.

  pvperf profile [--output DIR] [--smp N] [--mem SIZE] [--share DIR]
                 [--timeout S] [--tb-size MIB] [--compare-perfmap]
                 -- CMD [ARGS...]

Runs CMD in the guest (in /mnt/host, like ``pvperf run``) while the host's
perf samples QEMU, prints the merged report and writes into DIR (default
./pvperf-profile):

  session.json      the recorded, resolved session (report.py renders it)
  report.txt        the text report printed on the terminal
  summary.json      samples_total, samples_code_cache,
                    samples_code_cache_resolved, top [{symbol, space, share}]
  stacks.folded     folded stacks (format: report.py)
  flamegraph.svg    flame graph of the folded stacks
  perf-PID.map      the reverse map as a perf map of QEMU's code cache
  perf-report.txt   the host's own `perf report` using that map (it was
                    placed at /tmp/perf-PID.map only while perf report ran)
  annotate.txt      capstone listings of the hottest guest and host code
  perf.data, jit-PID.dump, rmap.bin
                    the raw recordings: host samples, QEMU's jitdump, the
                    reverse-map plugin's records
  qemu-perf.map     with --compare-perfmap: QEMU's own -perfmap
"""
from __future__ import annotations

import asyncio
import contextlib
import shlex
import subprocess
import sys
from pathlib import Path

import click

from . import profile as prof
from . import report


def _perf_report(outdir: Path, session: dict) -> None:
    """Run the host perf's own report with our perf map in /tmp, then
    remove the map from /tmp (perf only reads it there)."""
    pid = session["meta"]["qemu_pid"]
    tmp_map = Path(f"/tmp/perf-{pid}.map")
    try:
        tmp_map.write_text(report.perf_map(session))
        out = subprocess.run(["perf", "report", "--stdio", "--no-children",
                              "--sort", "dso,sym", "-i",
                              str(outdir / "perf.data")],
                             capture_output=True, text=True)
        (outdir / "perf-report.txt").write_text(out.stdout)
    finally:
        with contextlib.suppress(OSError):
            tmp_map.unlink()


def render_all(session: dict, outdir: Path) -> str:
    text = report.text_report(session)
    (outdir / "report.txt").write_text(text + "\n")
    (outdir / "summary.json").write_text(report.summary_json(session))
    (outdir / "stacks.folded").write_text(report.folded(session))
    (outdir / "flamegraph.svg").write_text(report.flamegraph_svg(session))
    pid = session["meta"]["qemu_pid"]
    (outdir / f"perf-{pid}.map").write_text(report.perf_map(session))
    (outdir / "annotate.txt").write_text(
        report.annotate_guest(session) + "\n" + report.annotate_host(session))
    _perf_report(outdir, session)
    return text


@click.command(context_settings={"allow_interspersed_args": False})
@click.option("--output", "-o", type=click.Path(file_okay=False,
              path_type=Path), default=Path("pvperf-profile"),
              show_default=True, help="directory for the profile files")
@click.option("--smp", type=click.IntRange(1, 8), default=1,
              show_default=True, help="number of vCPUs")
@click.option("--mem", "mem", default="1G", show_default=True,
              help="guest RAM (e.g. 512M, 2G)")
@click.option("--share", type=click.Path(file_okay=False, path_type=Path),
              default=None, help="host directory mounted at /mnt/host "
              "[default: current directory]")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=None,
              help="stop the guest after S seconds")
@click.option("--tb-size", "tb_size", type=click.IntRange(1, 2048),
              default=None, help="QEMU's code buffer in MiB (-accel "
              "tcg,tb-size; small values force code-cache flushes)")
@click.option("--compare-perfmap", "perfmap", is_flag=True,
              help="also run QEMU's -perfmap and compare its resolution "
              "with the reverse map's (session meta, report)")
@click.option("--console", "echo_console", is_flag=True,
              help="show the guest's serial console on stderr")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def profile(command, output, smp, mem, share, timeout, tb_size, perfmap,
            echo_console) -> None:
    """Run COMMAND in the guest while sampling QEMU; report emulator,
    guest kernel and guest user functions in one profile."""
    from .cli import make_config
    config = make_config("run", shlex.join(command), smp, mem, share,
                         timeout, True, echo_console)
    output.mkdir(parents=True, exist_ok=True)
    rec = asyncio.run(prof.record(config, output.resolve(),
                                  tb_size_mb=tb_size, perfmap=perfmap))
    try:
        session = prof.resolve(rec, config.image, config.share)
    finally:
        prof.cleanup_workdir(rec)
    prof.write_session(session, output)
    click.echo(render_all(session, output))
    click.echo(f"pvperf: profile written to {output}/", err=True)
    sys.exit(rec.status)
