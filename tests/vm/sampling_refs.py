"""What the sampling tests read and compare against: parsers of perf's
output (report, annotate, top, script's registers) and the callgrind
references, on the host (x86_64's programs) or from a callgrind output
file (one written in an arm64 guest).  test_sampling.py and the modules
that reuse its checks (test_checkpoint, test_emu_events) import them.
"""
from __future__ import annotations

import collections
import os
import re
import subprocess
from pathlib import Path

from support import PROGRAMS


def callgrind_shares(argv: list[str]) -> dict[str, float]:
    """Exact per-function instruction shares (percent) from callgrind,
    functions named through nm (the freestanding binary has no debug
    names valgrind resolves)."""
    out = PROGRAMS / f".callgrind-{os.getpid()}.out"   # one per worker
    try:
        subprocess.run(["valgrind", "--tool=callgrind",
                        f"--callgrind-out-file={out}", *argv],
                       capture_output=True, check=True)
        text = subprocess.run(["callgrind_annotate", str(out)],
                              capture_output=True, text=True,
                              check=True).stdout
    finally:
        out.unlink(missing_ok=True)
    syms = symbols(argv[0])
    shares = {}
    for m in re.finditer(r"^\s*([\d,]+) \(\s*([\d.]+)%\)\s+\?\?\?:0x([0-9a-f]+)",
                         text, re.M):
        shares[syms.get(int(m.group(3), 16), m.group(3))] = float(m.group(2))
    return shares


def callgrind_instruction_counts(argv: list[str]) -> dict[int, int]:
    """How many times each instruction address executed (callgrind with
    --dump-instr=yes; the cost line after a ``calls=`` line is the
    call's inclusive cost and is skipped)."""
    out = PROGRAMS / f".callgrind-instr-{os.getpid()}.out"
    try:
        subprocess.run(["valgrind", "--tool=callgrind", "--dump-instr=yes",
                        "--compress-pos=no", "--compress-strings=no",
                        f"--callgrind-out-file={out}", *argv],
                       capture_output=True, check=True)
        text = out.read_text()
    finally:
        out.unlink(missing_ok=True)
    assert re.search(r"^positions: instr line$", text, re.M), text[:500]
    counts: collections.Counter = collections.Counter()
    after_call = False
    for line in text.splitlines():
        if line.startswith("calls="):
            after_call = True
            continue
        m = re.fullmatch(r"0x([0-9a-f]+) \d+ (\d+)", line)
        if m and not after_call:
            counts[int(m.group(1), 16)] += int(m.group(2))
        after_call = False
    return dict(counts)


def function_range(path: str, name: str) -> tuple[int, int]:
    """[start, end) of a function from nm's sorted text symbols."""
    addrs = sorted(symbols(path))
    start = {n: a for a, n in symbols(path).items()}[name]
    return start, next(a for a in addrs if a > start)


def annotate_lines(lines: list[str]) -> tuple[int, dict[int, tuple[float, str]]]:
    """(samples, {address: (percent, instruction)}) from ``perf annotate
    --stdio`` of one symbol.  Instruction lines look like
    ``   33.29 :   401054: dec    %rdx``; source and label lines have
    no address after the colon and are skipped."""
    samples, rows = None, {}
    for line in lines:
        m = re.search(r"Disassembly of \S+ for \S+ \((\d+) samples", line)
        if m:
            samples = int(m.group(1))
            continue
        m = re.fullmatch(r"\s*([\d.]+)\s*:\s+([0-9a-f]+):\s*(.*?)\s*", line)
        if m:
            rows[int(m.group(2), 16)] = (float(m.group(1)), m.group(3))
    assert samples is not None, "\n".join(lines[:40])
    return samples, rows


def top_tables(lines: list[str]) -> list[tuple[int, list]]:
    """Every refresh of ``perf top --stdio -n`` as (irqs/sec, rows), a row
    being (percent, samples, "." or "k", symbol).  A refresh starts with
    the ``PerfTop: N irqs/sec ...`` header (after ESC[H ESC[2J)."""
    tables: list[tuple[int, list]] = []
    for line in lines:
        m = re.search(r"PerfTop:\s+(\d+) irqs/sec", line)
        if m:
            tables.append((int(m.group(1)), []))
            continue
        m = re.match(r"\s*([\d.]+)%\s+(\d+)\s+\S+\s+\[([.k])\]\s+(\S+)", line)
        if m and tables:
            tables[-1][1].append((float(m.group(1)), int(m.group(2)),
                                  m.group(3), m.group(4)))
    return tables


def top_exit(lines: list[str]) -> str:
    return next((l for l in lines if l.startswith("top exit")), "no exit line")


def top_user_samples(tables: list[tuple[int, list]]) -> collections.Counter:
    """User symbol -> its samples over every table of ``perf top -z``
    (each table holds the samples since the refresh before)."""
    total: collections.Counter = collections.Counter()
    for _irqs, rows in tables:
        for _pct, samples, mode, sym in rows:
            if mode == ".":
                total[sym] += samples
    return total


def check_top(lines: list[str], shares: dict[str, float], need: int,
              tolerance: float) -> list[tuple[int, list]]:
    """perf top's run in lines: ended by the guest's SIGINT, hot the user
    symbol with the most samples, at least ``need`` samples of hot and
    cold, and hot's share of them within ``tolerance`` points of
    valgrind's (shares: callgrind's)."""
    assert top_exit(lines) == "top exit 0", lines[-40:]
    tables = top_tables(lines)
    user = top_user_samples(tables)
    assert user and user.most_common(1)[0][0] == "hot", (user, lines[-40:])
    n = user["hot"] + user["cold"]
    assert n >= need, ([l for l in lines if l.startswith("top:")], user)
    share = 100.0 * user["hot"] / n
    want = 100.0 * shares["hot"] / (shares["hot"] + shares["cold"])
    print(*[l for l in lines if l.startswith("top:")],
          f"hot/(hot+cold) {share:.2f} %, valgrind {want:.2f} %")
    assert abs(share - want) <= tolerance, (share, want, n, user)
    return tables


def symbols(path: str) -> dict[int, str]:
    out = subprocess.run(["nm", path], capture_output=True, text=True,
                         check=True).stdout
    return {int(a, 16): n for a, _, n in (l.split() for l in out.splitlines()
                                          if len(l.split()) == 3)}


def percent_rows(lines: list[str], row: str) -> dict[str, float]:
    """{name: percent} of perf report's rows: ``row`` matches the rest of
    a line after its leading percentage, its first group the name."""
    shares = {}
    for line in lines:
        m = re.match(rf"\s*([\d.]+)%\s+{row}", line)
        if m:
            shares[m.group(2)] = float(m.group(1))
    return shares


def report_shares(lines: list[str], modes: str = ".") -> dict[str, float]:
    """perf report --sort sym's shares of the symbols of modes ("." user,
    "k" kernel)."""
    return percent_rows(lines, rf"\[[{modes}]\]\s+(\S+)")


def parse_regs(lines: list[str]) -> list[tuple[int, dict[str, int]]]:
    """perf script -F ip,{i,u}regs: the ip, then REG:VALUE pairs (on the
    ip's line and any that follow it)."""
    out = []
    for line in lines:
        m = re.match(r"^\s*([0-9a-f]+)(\s+ABI:.*|\s*)$", line)
        if m:
            out.append((int(m.group(1), 16), {}))
        if out:
            for name, value in re.findall(r"\b(\w+):(0x[0-9a-f]+)", line):
                out[-1][1][name] = int(value, 16)
    return out


def callgrind_file_shares(path: Path, functions: tuple[str, ...]
                          ) -> tuple[dict[str, float], dict[str, float]]:
    """Self and inclusive shares (percent of the program's total Ir) of
    each function, from a callgrind output file (its format: fn= blocks of
    "position cost" lines; a calls= line makes the next one a call's
    inclusive cost; names compressed as "(id) name", then "(id)")."""
    names: dict[str, str] = {}
    own: dict[str, int] = {}
    called: dict[str, int] = {}
    fn, call, total = None, False, 0
    for line in path.read_text().splitlines():
        m = re.match(r"^(c?fn)=(\(\d+\))?\s*(.*)$", line)
        if m:
            ref, name = m.group(2), m.group(3)
            if ref and name:
                names[ref] = name
            name = names.get(ref, name) if ref else name
            if m.group(1) == "fn":
                fn = name
            continue
        if line.startswith("calls="):
            call = True
        elif line.startswith(("summary:", "totals:")):
            total = int(line.split()[1])
        elif fn and re.match(r"^[+-]?\d+ \d+|^\* \d+", line):
            cost = int(line.split()[1])
            table = called if call else own
            table[fn] = table.get(fn, 0) + cost
            call = False
    assert total, path
    pct = lambda d: {f: 100.0 * d.get(f, 0) / total for f in functions}
    return pct(own), pct({f: own.get(f, 0) + called.get(f, 0)
                          for f in functions})
