"""`pvperf compare BASE NEW`: the regression gate on two `--json`
results, a command of its own (it boots nothing: results.py does the
work)."""
from __future__ import annotations

import sys

import click

from .. import results

EXIT_REGRESSION = 1
EXIT_BAD_INPUT = 2


@click.command()
@click.argument("base")
@click.argument("new")
@click.option("--threshold", default="0%", show_default=True,
              help="allowed increase, percent of BASE (e.g. 0.5%)")
def compare(base: str, new: str, threshold: str) -> None:
    """Compare two `--json` results event by event; exit 1 if an event
    went up by more than --threshold (more counted work is a regression),
    0 if none did, 2 on bad input."""
    try:
        limit = results.parse_threshold(threshold)
        old, cur = results.load_result(base), results.load_result(new)
    except ValueError as e:
        click.echo(f"pvperf: compare: bad --threshold {threshold!r}: {e}",
                   err=True)
        sys.exit(EXIT_BAD_INPUT)
    except results.ResultError as e:
        click.echo(f"pvperf: compare: {e.one_line()}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    rows = results.compare(old, cur, limit)
    if not any(r.delta is not None for r in rows):
        click.echo("pvperf: compare: no event counted in both files \u2014 "
                   "compare results of the same events", err=True)
        sys.exit(EXIT_BAD_INPUT)
    for note in results.notes(old, cur):
        click.echo(f"# note: {note}")
    click.echo(results.render(rows, limit))
    bad = [r.name for r in rows if r.regressed]
    click.echo(f"pvperf: {len(bad)} regression(s): {', '.join(bad)}" if bad
               else "pvperf: no regression", err=True)
    sys.exit(EXIT_REGRESSION if bad else 0)
