"""``pvperf report --diff A B``: what changed between two saved profiles.

Rows are functions and spaces (guest-user, guest-kernel, emulator,
host-kernel).  A function is a (space, symbol): by default the leaf a
sample was taken in, as report.txt's "Top functions" count them, with
host-kernel functions apart from the emulator's as in the flame graph;
with ``--view behalf`` a guest function also gets the emulator's work on
its behalf, as the report's domain switch and the translation table
count it.  For each row, perf diff's columns (Baseline: A's share of its
samples; Delta: B's share minus A's) and host time (samples / sampling
rate, so profiles taken at different rates compare).  Rows are ranked by
the change of host time, largest first: an experiment compares two
configurations doing the same work (two QEMU builds, two translator
options, two builds of one program), where shares all move together (a
function that doubles takes share from every other) but only the
changed function's time moves.

Normalized by guest instructions where both profiles have them: a
session that counts the guest instructions each function executed (the
translation table, session.json's translation_table) adds host
nanoseconds per guest instruction (ns/gi), A, B and delta, per function
and per space (over the run's guest instructions), the figure
translation research compares; ``--sort per-insn`` ranks by its change.

``diff_tree`` gives the differential flame graph (flamegraph_html's
viewer): B's frame tree, each frame carrying A's samples at the same
stack (scaled to B's sampling rate) and the delta, coloured by it.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from . import flamegraph_html
from .flamegraph_html import host_frame

SPACES = ("guest-user", "guest-kernel", "emulator", "host-kernel")
VIEWS = {"self": "the leaf function of each sample, as report.txt's top "
         "functions",
         "behalf": "a guest function with the emulator's work on its "
         "behalf, as report.txt's domain switch"}


def function_key(sample: dict) -> tuple[str, str]:
    if sample["space"] == "emulator":
        name, space = host_frame(sample["symbol"])
        return space, name
    return sample["space"], sample["symbol"]


def guest_insns(session: dict) -> dict[tuple[str, str], int] | None:
    """Guest instructions per (space, symbol), summed over processes, if
    the session counted them: its translation_table (bt_table.py) with
    the plugin's counts."""
    table = session.get("translation_table")
    if not isinstance(table, dict) or not table.get("counted"):
        return None
    out = Counter()
    for r in table.get("rows", ()):
        out[(r["space"], r["symbol"])] += int(r.get("insns") or 0)
    return dict(out) if sum(out.values()) else None


@dataclass
class Side:
    label: str
    session: dict
    functions: Counter = field(default_factory=Counter)
    spaces: Counter = field(default_factory=Counter)
    insns: dict | None = None

    view: str = "self"

    @classmethod
    def of(cls, label: str, session: dict, view: str = "self") -> "Side":
        """``view``: "self" counts each sample for its leaf function;
        "behalf" counts the emulator's work on behalf of a guest function
        for that function (the report's domain switch; the translation
        table's host samples).  Spaces are the leaves' in both."""
        if view not in VIEWS:
            raise ValueError(f"unknown view {view!r} ({', '.join(VIEWS)})")
        side = cls(label, session, insns=guest_insns(session), view=view)
        for s in session["samples"]:
            key = function_key(s)
            side.spaces[key[0]] += 1
            b = s.get("behalf")
            if view == "behalf" and b and not s.get("code_cache"):
                key = (b["space"], b["symbol"])
            side.functions[key] += 1
        return side

    @property
    def total(self) -> int:
        return len(self.session["samples"])

    @property
    def hz(self) -> float:
        return float(self.session["meta"]["frequency_hz"])

    def ms(self, samples: float) -> float:
        return 1000.0 * samples / self.hz

    def share(self, samples: int) -> float:
        return 100.0 * samples / self.total if self.total else 0.0

    def insns_of(self, key) -> int | None:
        """Guest instructions of a function; for a space (key: str), of
        the whole run: a space's ns/gi is its host time per guest
        instruction executed (the emulator's overhead per instruction)."""
        if self.insns is None:
            return None
        if isinstance(key, str):
            return sum(self.insns.values()) or None
        return self.insns.get(key) or None


@dataclass
class Row:
    key: object                 # (space, symbol), or a space's name
    a: int
    b: int
    a_ms: float
    b_ms: float
    baseline: float             # A's share, percent
    delta: float                # B's share - A's, points
    a_ns_insn: float | None
    b_ns_insn: float | None

    @property
    def delta_ms(self) -> float:
        return self.b_ms - self.a_ms

    @property
    def delta_ns_insn(self) -> float | None:
        if self.a_ns_insn is None or self.b_ns_insn is None:
            return None
        return self.b_ns_insn - self.a_ns_insn


def _row(key, a: Side, b: Side, na: int, nb: int) -> Row:
    a_ms, b_ms = a.ms(na), b.ms(nb)
    ia, ib = a.insns_of(key), b.insns_of(key)
    both = ia is not None and ib is not None
    return Row(key, na, nb, a_ms, b_ms, a.share(na),
               b.share(nb) - a.share(na),
               1e6 * a_ms / ia if both else None,
               1e6 * b_ms / ib if both else None)


def sort_key(how: str):
    if how == "share":
        return lambda r: -abs(r.delta)
    if how == "per-insn":
        return lambda r: (r.delta_ns_insn is None,
                          -abs(r.delta_ns_insn or 0.0), -abs(r.delta_ms))
    return lambda r: -abs(r.delta_ms)


def function_rows(a: Side, b: Side, how: str = "time") -> list[Row]:
    keys = set(a.functions) | set(b.functions)
    rows = [_row(k, a, b, a.functions[k], b.functions[k]) for k in keys]
    return sorted(rows, key=lambda r: (sort_key(how)(r), r.key))


def space_rows(a: Side, b: Side) -> list[Row]:
    return [_row(s, a, b, a.spaces[s], b.spaces[s]) for s in SPACES]


def _ns(x: float | None, signed: bool = False) -> str:
    width = 11 if signed else 9
    if x is None:
        return f"{'-':>{width}}"
    return f"{x:+{width}.2f}" if signed else f"{x:{width}.2f}"


def _line(r: Row, name: str) -> str:
    return (f"  {r.baseline:7.2f}%  {r.delta:+7.2f}%  {r.delta_ms:+10.1f}  "
            f"{r.a_ms:9.1f}  {r.b_ms:9.1f}  {_ns(r.a_ns_insn)}  "
            f"{_ns(r.b_ns_insn)}  {_ns(r.delta_ns_insn, True)}  {name}")


HEADER = (f"# {'Baseline':>8}  {'Delta':>8}  {'Delta ms':>10}  {'A ms':>9}  "
          f"{'B ms':>9}  {'A ns/gi':>9}  {'B ns/gi':>9}  {'Delta ns/gi':>11}  ")


def _side_line(tag: str, side: Side) -> str:
    m = side.session["meta"]
    insns = sum(side.insns.values()) if side.insns else None
    return (f"# {tag}: {side.label}: {m['command']}; {side.total} samples at "
            f"{side.hz:g} Hz ({side.ms(side.total):.1f} ms)" +
            (f", {insns} guest instructions" if insns else
             ", no guest instruction counts"))


def text_diff(a: Side, b: Side, how: str = "time", n: int = 30) -> str:
    ta, tb = a.ms(a.total), b.ms(b.total)
    change = f"{100 * (tb - ta) / ta:+.1f}%" if ta else "-"
    normalized = a.insns is not None and b.insns is not None
    lines = [_side_line("A", a), _side_line("B", b),
             f"# Host time: {ta:.1f} ms -> {tb:.1f} ms ({tb - ta:+.1f} ms, "
             f"{change})",
             "# Normalized by guest instructions: " +
             ("ns/gi = host ns per guest instruction (both profiles count "
              "them)" if normalized else "no (a profile does not count "
              "guest instructions: ns/gi columns are -)"),
             "# Baseline: A's share of its samples; Delta: B's share minus "
             "A's; ms: host time (samples / sampling rate)", "#", "",
             "# Spaces", HEADER + "Space"]
    lines += [_line(r, r.key) for r in space_rows(a, b)]
    order = {"time": "|Delta ms|", "share": "|Delta|",
             "per-insn": "|Delta ns/gi|"}[how]
    lines += ["", f"# Functions by {order} ({VIEWS[b.view]})",
              HEADER + f"{'Space':<13} Symbol"]
    lines += [_line(r, f"{r.key[0]:<13} {r.key[1]}")
              for r in function_rows(a, b, how)[:n]]
    return "\n".join(lines + [""])


def diff_tree(a: Side, b: Side) -> dict:
    """B's frame tree; each node gains "a" (A's samples at the same stack,
    in B's sampling rate's units) and "d" (B's minus that)."""
    ta = flamegraph_html.tree(a.session["samples"])
    tb = flamegraph_html.tree(b.session["samples"])
    scale = b.hz / a.hz

    def walk(node_b: dict, node_a: dict | None) -> None:
        node_b["a"] = round((node_a["v"] if node_a else 0) * scale, 3)
        node_b["d"] = round(node_b["v"] - node_b["a"], 3)
        kids_a = {(c["n"], c["s"]): c for c in node_a["c"]} if node_a else {}
        for child in node_b["c"]:
            walk(child, kids_a.get((child["n"], child["s"])))

    walk(tb, ta)
    return tb


DIFF_TEXT = "diff.txt"
DIFF_HTML = "diff-flamegraph.html"


def render_diff(a: Side, b: Side, outdir: Path, how: str = "time") -> str:
    """Write diff.txt and diff-flamegraph.html into ``outdir``; returns
    the text."""
    outdir.mkdir(parents=True, exist_ok=True)
    text = text_diff(a, b, how)
    (outdir / DIFF_TEXT).write_text(text)
    (outdir / DIFF_HTML).write_text(flamegraph_html.diff_html(
        diff_tree(a, b), (a.label, b.label), b.hz))
    return text
