"""Renderers of a profile session (session.py: session.json).

Every output is a function of the session alone (record once, render many):

  text_report   a perf-like preamble (duration, samples, lost samples,
                event, vCPUs, target), then the merged top functions of all
                three spaces, then two accounting views, because the
                emulator's work for guest code (helpers, the softmmu slow
                paths) is the guest's cost by one reading and the
                emulator's by another: "guest code only" (CPU switch:
                only samples in the code cache) and "guest code +
                emulator work on its behalf" (domain switch: an emulator
                sample whose unwound host stack reaches a TB counts for
                that TB's guest function)
  summary       summary.json: samples_total, samples_code_cache,
                samples_code_cache_resolved, top [{symbol, space, share}]
                (share: percent of all samples)
  folded        folded stacks, one line per distinct stack, frames
                outermost first, separated by ';', then a space and the
                sample count.  The first frame is the QEMU thread, then
                the host frames, and a code-cache sample ends in
                "[code cache];<space>:<guest symbol>".  A sample line:
                  CPU 0/TCG;[code cache];guest-user:hot 478
  flamegraph    an SVG flame graph of the folded stacks (own renderer)
  perf_map      perf-PID.map lines "START SIZE NAME" (hex, hex, text)
  annotate      capstone disassembly of the hottest guest TBs and of the
                hottest emulator function (from the DSO's bytes)
"""
from __future__ import annotations

import html
import json
from collections import Counter, defaultdict

from ..arch import get as get_arch, host
from . import bt_table

SPACES = ("emulator", "guest-kernel", "guest-user")


def _pct(n: int, total: int) -> float:
    return 100.0 * n / total if total else 0.0


def perfmap_line(meta: dict) -> list[str]:
    """The --compare-perfmap figures (resolve.compare_perfmap), if any."""
    c = meta.get("perfmap_comparison")
    if not c:
        return []
    return [f"# QEMU -perfmap on the same {c['code_cache_samples']} "
            f"code-cache samples: {100 * c['perfmap_resolved']:.1f}% "
            f"resolved, {100 * c['perfmap_guest_function']:.1f}% to a guest "
            f"function, {100 * c['perfmap_agrees_with_rmap']:.1f}% the "
            f"reverse map's function (reverse map: "
            f"{100 * c['rmap_resolved']:.1f}% resolved, "
            f"{100 * c['rmap_guest_function']:.1f}% to a guest function)"]


def preamble(session: dict) -> str:
    m = session["meta"]
    return "\n".join([
        f"# Samples: {m['samples']} of event '{m['event']}' "
        f"({m['frequency_hz']} Hz)",
        f"# Lost samples: {m['lost_samples']}",
        f"# Duration: {m['duration_s']:.3f} s",
        f"# vCPUs: {m['vcpus']}",
        f"# Target: {m['target']}",
        f"# Command: {m['command']} (exit status {m['exit_status']})",
        f"# Reverse map: {m['rmap_translations']} translations, "
        f"{len(m['rmap_generations'])} generations "
        f"({m.get('rmap_flushes_in_window', 0)} flushes while profiling)",
        *perfmap_line(m), *unsymbolized_lines(m), "#"])


def unsymbolized_lines(meta: dict) -> list[str]:
    """Which emulator files had samples no function symbol names, and
    why (resolve.unsymbolized)."""
    return [f"# No symbols: {u['dso']} ({u['samples']} samples named "
            f"FILE!0x...): {u['why']}" for u in meta.get("unsymbolized", ())]


def top_functions(session: dict, n: int = 20) -> list[dict]:
    samples = session["samples"]
    counts = Counter((s["space"], s["symbol"]) for s in samples)
    total = len(samples)
    return [{"symbol": sym, "space": space, "share": round(_pct(c, total), 2),
             "samples": c} for (space, sym), c in counts.most_common(n)]


def space_totals(session: dict) -> dict[str, int]:
    c = Counter(s["space"] for s in session["samples"])
    return {space: c.get(space, 0) for space in SPACES}


def guest_only_view(session: dict) -> Counter:
    """CPU switch: guest functions by their own code-cache samples."""
    return Counter((s["space"], s["symbol"]) for s in session["samples"]
                   if s.get("resolved"))


def on_behalf_view(session: dict) -> Counter:
    """Domain switch: plus emulator samples called from a guest TB."""
    c = guest_only_view(session)
    for s in session["samples"]:
        if not s.get("code_cache"):
            b = s.get("behalf")
            key = (b["space"], b["symbol"]) if b else \
                ("emulator", "[not on behalf of guest code]")
            c[key] += 1
    return c


def process_view(session: dict) -> list[dict]:
    """Guest code samples (code cache) per guest process: pid and comm of
    the address space that ran them (resolve.py's address-space timeline)."""
    c = Counter((s.get("pid"), s.get("comm") or "") for s in session["samples"]
                if s.get("resolved"))
    total = sum(c.values())
    return [{"pid": pid, "comm": comm, "samples": v,
             "share": round(_pct(v, total), 2)}
            for (pid, comm), v in c.most_common()]


def summary(session: dict, n: int = 20) -> dict:
    samples = session["samples"]
    cc = sum(1 for s in samples if s.get("code_cache"))
    res = sum(1 for s in samples if s.get("resolved"))
    return {"version": session["version"], "meta": session["meta"],
            "samples_total": len(samples), "samples_code_cache": cc,
            "samples_code_cache_resolved": res,
            "resolution_rate": round(res / cc, 4) if cc else None,
            "spaces": space_totals(session),
            "top": top_functions(session, n),
            "guest_only": _view_rows(guest_only_view(session), n),
            "guest_plus_emulator": _view_rows(on_behalf_view(session), n),
            "processes": process_view(session)[:n]}


def _view_rows(c: Counter, n: int) -> list[dict]:
    total = sum(c.values())
    return [{"symbol": sym, "space": space, "share": round(_pct(v, total), 2),
             "samples": v} for (space, sym), v in c.most_common(n)]


def _table(rows: list[dict], title: str) -> list[str]:
    lines = [f"# {title}", f"# {'Overhead':>8}  {'Samples':>7}  "
             f"{'Space':<13} Symbol"]
    lines += [f"  {r['share']:7.2f}%  {r['samples']:7d}  {r['space']:<13} "
              f"{r['symbol']}" for r in rows]
    return lines + [""]


def text_report(session: dict, n: int = 20, table_sort: str = "host"
                ) -> str:
    s = summary(session, n)
    total = s["samples_total"]
    spaces = ", ".join(f"{k} {_pct(v, total):.1f}%"
                       for k, v in s["spaces"].items())
    rate = s["resolution_rate"]
    lines = [preamble(session),
             f"# Spaces: {spaces}",
             f"# Code cache: {s['samples_code_cache']} samples, "
             f"{s['samples_code_cache_resolved']} resolved to guest code"
             f" ({100 * rate:.1f}%)" if rate is not None else
             "# Code cache: no samples", "#", ""]
    lines += _table(s["top"], "Top functions, all spaces (share of all "
                    "samples)")
    lines += _table(s["guest_only"], "Guest code only (CPU switch: share of "
                    "code-cache samples)")
    lines += _table(s["guest_plus_emulator"], "Guest code + emulator work "
                    "on its behalf (domain switch: share of all samples)")
    lines += ["# Guest processes (share of code-cache samples; pid of the "
              "address space that ran them)",
              f"# {'Overhead':>8}  {'Samples':>7}  {'Pid':>7}  Command"]
    lines += [f"  {r['share']:7.2f}%  {r['samples']:7d}  "
              f"{'?' if r['pid'] is None else r['pid']:>7}  {r['comm']}"
              for r in s["processes"]]
    lines += ["#", *bt_table.render(session.get("translation_table"),
                                    table_sort)]
    return "\n".join(lines + [""])


def folded(session: dict) -> str:
    c = Counter()
    for s in session["samples"]:
        frames = [s["thread"]] + s["host_stack"]
        if s.get("code_cache"):
            frames.append(f"{s['space']}:{s['symbol']}")
        c[";".join(f.replace(";", ":") for f in frames)] += 1
    return "".join(f"{k} {v}\n" for k, v in sorted(c.items()))


# -- flame graph --------------------------------------------------------------------

COLORS = {"guest-user": "#5fa8d3", "guest-kernel": "#8fd16a",
          "emulator": "#f2a65a", "thread": "#cccccc"}


def _tree(folded_text: str) -> dict:
    root = {"name": "all", "value": 0, "children": {}}
    for line in folded_text.splitlines():
        stack, _, count = line.rpartition(" ")
        n = int(count)
        node = root
        root["value"] += n
        for frame in stack.split(";"):
            node = node["children"].setdefault(
                frame, {"name": frame, "value": 0, "children": {}})
            node["value"] += n
    return root


def _color(name: str, depth: int) -> str:
    if depth == 1:
        return COLORS["thread"]
    for space in ("guest-user", "guest-kernel"):
        if name.startswith(space + ":"):
            return COLORS[space]
    return COLORS["emulator"]


def flamegraph_svg(session: dict, width: int = 1200, row: int = 17) -> str:
    root = _tree(folded(session))
    rects = []

    def walk(node, x, depth):
        w = width * node["value"] / root["value"] if root["value"] else 0
        if w >= 0.5:
            rects.append((x, depth, w, node["name"], node["value"]))
        cx = x
        for child in sorted(node["children"].values(),
                            key=lambda c: c["name"]):
            walk(child, cx, depth + 1)
            cx += width * child["value"] / root["value"]

    walk(root, 0.0, 0)
    depth_max = max((d for _, d, *_ in rects), default=0)
    height = (depth_max + 2) * row + 30
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" '
           f'height="{height}" font-family="monospace" font-size="11">',
           f'<text x="4" y="14">pvperf profile: '
           f'{html.escape(session["meta"]["command"])} '
           f'({root["value"]} samples)</text>']
    for x, depth, w, name, value in rects:
        y = height - (depth + 1) * row
        label = html.escape(name)
        pct = _pct(value, root["value"])
        chars = int(w / 7)
        shown = label if len(name) <= chars else \
            (html.escape(name[:max(chars - 2, 0)]) + ".." if chars > 3 else "")
        out.append(f'<g><title>{label} ({value} samples, {pct:.2f}%)</title>'
                   f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" '
                   f'height="{row - 1}" fill="{_color(name, depth)}"/>'
                   f'<text x="{x + 2:.1f}" y="{y + row - 5}">{shown}</text></g>')
    out.append("</svg>\n")
    return "\n".join(out)


# -- perf map ----------------------------------------------------------------------

def perf_map(session: dict) -> str:
    return "".join(f"{start:x} {size:x} {name}\n"
                   for start, size, name in session["translations"])


# -- annotation -------------------------------------------------------------------

def _disasm(code: bytes, address: int, arch=None):
    """Capstone listing of ``code`` in ``arch`` (default: the host's,
    for emulator code; pyhost/arch/)."""
    return list((arch or host()).disassembler().disasm(code, address))


def guest_arch(session: dict):
    """The profiled guest's architecture (sessions before it was recorded
    in meta profiled the host's)."""
    return get_arch(session["meta"].get("arch", host().name))


def annotate_guest(session: dict) -> str:
    lines, arch = [], guest_arch(session)
    for fn in session.get("hot_guest_code", []):
        lines.append(f"## {fn['space']}:{fn['symbol']}  "
                     f"({fn['samples']} samples)")
        for block in fn["blocks"]:
            lines.append(f"   TB {block['guestpc']:#x}: {block['samples']} "
                         "samples")
            for insn in _disasm(bytes.fromhex(block["code"]),
                                block["guestpc"], arch):
                lines.append(f"      {insn.address:#x}: {insn.mnemonic} "
                             f"{insn.op_str}")
        lines.append("")
    return "\n".join(lines)


def annotate_host(session: dict, host_symbols=None, top: int = 1) -> str:
    """Capstone listing of the hottest emulator functions, samples per IP."""
    from .symbols import HostSymbols
    hs = host_symbols or HostSymbols()
    per_fn = defaultdict(Counter)
    for s in session["samples"]:
        if s["space"] == "emulator" and s.get("dso", "").startswith("/"):
            per_fn[(s["dso"], s["symbol"])][s["dso_offset"]] += 1
    lines = []
    ranked = sorted(per_fn.items(), key=lambda kv: -sum(kv[1].values()))
    for (dso, name), ips in ranked[:top]:
        img = hs.image(dso)
        sym = img.symbols.lookup(min(ips)) if img else None
        if sym is None:
            continue
        size = sym.size or (max(ips) - sym.start + 16)
        off = img.elf_vaddr_to_offset(sym.start)
        if off is None:
            continue
        code = img.bytes_at_offset(off, min(size, 4096))
        lines.append(f"## emulator:{name} in {dso} "
                     f"({sum(ips.values())} samples)")
        for insn in _disasm(code, sym.start):
            n = ips.get(insn.address, 0)
            mark = f"{n:6d}" if n else "      "
            lines.append(f"{mark}  {insn.address:#x}: {insn.mnemonic} "
                         f"{insn.op_str}")
        lines.append("")
    return "\n".join(lines)


def summary_json(session: dict) -> str:
    return json.dumps(summary(session), indent=2) + "\n"
