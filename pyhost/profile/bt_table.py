"""The translation table: per guest function, what it cost the emulator.

One row per guest function (kernel functions once for the whole system;
user functions per guest process), with:

  insns         guest instructions executed, exact but for faults (below):
                each TB record's execution count (pvperf-rmap.so
                counts=on, an inline add at the TB's start) times its
                instructions, each instruction given to the function that
                holds it (a TB that runs from one function into the next
                is split at the boundary)
  translated    host samples in the function's translated code (the
                code-cache samples resolve.py gives it)
  behalf        host samples in emulator work on its behalf: helpers, the
                softmmu slow path and TLB fills, lookups called from its
                translated code (the innermost code-cache frame of the
                sample's unwound host stack: resolve.py's ``behalf``)
                Code without a function symbol is one row per TB start
                (named as the report names it: DSO+offset), as its
                samples are
  translations  TBs translated that start in it (retranslations after a
                flush or an invalidation included)
  ns_per_insn   host time per guest instruction: (translated + behalf)
                samples at perf's sampling frequency, in ns, over insns

Index spaces as in rmap.py (guestpc, pid = a guest tgid).  Where counts
and samples disagree on the process: a user TB serves every process that
maps its physical page (CF_PCREL), and its counter cannot tell them
apart, so its executions go to the process that translated it, while its
samples go to the process that ran them (resolve.py).  For code no two
processes share (a static program), both agree.

Inexact: an instruction that faults in the middle of a TB (demand paging)
leaves the rest of the TB counted but not run (rmap/counts.c); an emulator
sample with no code-cache frame on its stack (the main loop, the TB
lookup between TBs, I/O threads) is on no function's behalf and stays in
the report's emulator rows.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from .hostperf import SAMPLE_FREQ
from .rmap import Translation

# Columns a table can be sorted by (descending), the CLI's --sort choices.
SORT_KEYS = ("host", "insns", "translated", "behalf", "translations",
             "ns_per_insn")
DEFAULT_SORT = "host"


@dataclass
class Row:
    space: str
    symbol: str
    dso: str
    pid: int | None
    comm: str
    insns: int = 0
    translated: int = 0
    behalf: int = 0
    translations: int = 0
    ns_per_insn: float | None = None

    @property
    def host(self) -> int:
        return self.translated + self.behalf


def row_key(space: str, symbol: str, pid: int | None) -> tuple:
    """Kernel functions are one row for the whole system."""
    return (space, symbol, pid if space == "guest-user" else None)


class _Counter:
    """Guest instructions per function from the counted translations."""

    def __init__(self, resolver):
        self.r = resolver
        self.rows: dict[tuple, Row] = {}
        self._sym: dict = {}

    def row(self, sym: dict, pid: int | None, comm: str) -> Row:
        key = row_key(sym["space"], sym["symbol"], pid)
        if key not in self.rows:
            self.rows[key] = Row(sym["space"], sym["symbol"], sym["dso"],
                                 key[2], comm if key[2] is not None else "")
        return self.rows[key]

    def symbol(self, tr: Translation, guestpc: int, offset: int,
               pid: int | None) -> dict:
        key = (tr.kernel, guestpc, pid, tr.code[offset:offset + 16])
        if key not in self._sym:
            # guest_symbol checks the code bytes from guestpc on against
            # the ELF: the TB's bytes from this instruction
            part = replace(tr, code=tr.code[offset:])
            self._sym[key] = self.r.guest_symbol(part, guestpc, pid)
        return self._sym[key]

    def add(self, tr: Translation) -> None:
        space = self.r.rmap.spaces.sample_space(tr.tid, tr.time_ns)
        place = self.r.place(tr, space)
        pid, comm = place.pid, place.comm
        offsets, off = [], 0
        for size in tr.insn_sizes:
            offsets.append(off)
            off += size
        first = self.symbol(tr, place.guestpc, 0, pid)
        self.row(first, pid, comm).translations += 1
        if not tr.executions:
            return
        last = self.symbol(tr, place.guestpc + offsets[-1], offsets[-1], pid)
        if same_function(first, last) or not first["named"]:
            self.row(first, pid, comm).insns += \
                tr.executions * len(offsets)
            return
        for o in offsets:
            sym = self.symbol(tr, place.guestpc + o, o, pid)
            # code without a symbol stays with the function before it
            self.row(sym if sym["named"] else first, pid,
                     comm).insns += tr.executions


def same_function(a: dict, b: dict) -> bool:
    return (a["space"], a["symbol"], a["dso"]) == \
        (b["space"], b["symbol"], b["dso"])


def build(resolver, samples: list[dict]) -> dict:
    """The table of a resolved recording: {"counted": bool, "rows": [...],
    totals}.  Without the plugin's counts only samples and translations."""
    c = _Counter(resolver)
    for tr in resolver.rmap.translations():
        if tr.matched:
            c.add(tr)
    unattributed = 0
    for s in samples:
        if s.get("resolved"):
            key = row_key(s["space"], s["symbol"], s.get("pid"))
            row = c.rows.get(key) or c.row(
                s, s.get("pid"), s.get("comm", ""))
            row.translated += 1
        elif s.get("behalf"):
            b = s["behalf"]
            key = row_key(b["space"], b["symbol"], b.get("pid"))
            row = c.rows.get(key) or c.row(
                {**b, "dso": ""}, b.get("pid"), "")
            row.behalf += 1
        elif s["space"] == "emulator":
            unattributed += 1
    for row in c.rows.values():
        if row.insns:
            row.ns_per_insn = row.host / SAMPLE_FREQ * 1e9 / row.insns
    rows = [asdict(r) | {"host": r.host} for r in c.rows.values()]
    return {"counted": resolver.rmap.counts,
            "frequency_hz": SAMPLE_FREQ,
            "insns": sum(r["insns"] for r in rows),
            "unmatched_insns": resolver.rmap.unmatched_insns,
            "emulator_unattributed": unattributed,
            "rows": sort_rows(rows, DEFAULT_SORT)}


# A ratio over a handful of samples is noise (one sample in a function
# of 80 instructions reads 3 us per instruction): sorted by ns_per_insn,
# rows with fewer host samples come after the others.
MIN_RATIO_SAMPLES = 10


def sort_rows(rows: list[dict], key: str) -> list[dict]:
    """Descending by ``key``; rows without a value (no counted
    instructions) last."""
    if key not in SORT_KEYS:
        raise ValueError(f"unknown sort key {key!r} (known: "
                         f"{', '.join(SORT_KEYS)})")
    return sorted(rows, key=lambda r: (
        key != "ns_per_insn" or r["host"] >= MIN_RATIO_SAMPLES,
        r[key] is not None, r[key] or 0, r["host"]), reverse=True)


def render(table: dict | None, sort: str = DEFAULT_SORT, n: int = 30
           ) -> list[str]:
    """The report's section (lines), ``n`` rows sorted by ``sort``."""
    if not table:
        return []
    head = (f"# Translation table (per guest function; sorted by {sort}; "
            f"{table['insns']:,} guest instructions counted"
            + ("" if table["counted"] else
               ": none, the plugin ran without counts=on") + ")")
    lines = [head,
             f"# {'insns':>14}  {'transl':>6}  {'behalf':>6}  "
             f"{'TBs':>6}  {'ns/insn':>8}  space         function"]
    for r in sort_rows(table["rows"], sort)[:n]:
        ns = f"{r['ns_per_insn']:8.2f}" if r["ns_per_insn"] is not None \
            else f"{'-':>8}"
        who = f"  [{r['comm']} {r['pid']}]" if r["pid"] is not None else ""
        lines.append(f"  {r['insns']:14,d}  {r['translated']:6d}  "
                     f"{r['behalf']:6d}  {r['translations']:6d}  {ns}  "
                     f"{r['space']:<13} {r['symbol']}{who}")
    lines.append(f"# emulator samples on no guest function's behalf: "
                 f"{table['emulator_unattributed']}; guest instructions "
                 f"in TBs the jitdump does not name: "
                 f"{table['unmatched_insns']:,}")
    return lines
