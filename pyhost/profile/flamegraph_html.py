"""The interactive flame graph: one self-contained HTML file.

``flamegraph.html`` holds the frame tree as inline JSON and a small
viewer (flamegraph.js, inlined; no network at view time): click a frame
to zoom (it fills the width and the frames above it are laid out again),
type a regular expression to highlight matching frames (the matched share
of all samples is shown), hover for a frame's space and share.

Frames, outermost first (``sample_frames``): the QEMU thread, the host
frames the unwinder crossed, then, where a sample's stack reaches QEMU's
code cache, the guest function whose translation ran there (in its space)
instead of one ``[code cache]`` frame.  The emulator's work on that
function's behalf (helpers, TLB fills, TB lookups: resolve.py's
``behalf``) is drawn above it, so a guest frame's width is its own
translated code plus what the emulator did for it (the report's "domain
switch" view) and its self width is its translated code alone (the
"CPU switch" view).  A host-kernel frame is named without report.py's
"[host kernel] " prefix: its space says it.

Spaces: guest-user, guest-kernel, emulator (QEMU and its libraries),
host-kernel.  A differential graph (diff.py) has the second profile's
shape and colours each frame by its change from the first.
"""
from __future__ import annotations

import html
import json
from importlib import resources

CODE_CACHE = "[code cache]"
HOST_KERNEL_PREFIX = "[host kernel] "
SPACE_NAMES = {"guest-user": "guest user", "guest-kernel": "guest kernel",
               "emulator": "emulator", "host-kernel": "host kernel",
               "all": "all samples"}


def host_frame(name: str) -> tuple[str, str]:
    if name.startswith(HOST_KERNEL_PREFIX):
        return name[len(HOST_KERNEL_PREFIX):], "host-kernel"
    return name, "emulator"


def sample_frames(sample: dict) -> list[tuple[str, str]]:
    """(name, space) of one session sample's frames, outermost first."""
    frames = [(sample["thread"], "emulator")]
    guest = sample if sample.get("resolved") else sample.get("behalf")
    for name in sample["host_stack"]:
        if name == CODE_CACHE and guest:
            frames.append((guest["symbol"], guest["space"]))
        elif name == CODE_CACHE and sample.get("code_cache"):
            # Translated code no translation explains: the report's name.
            frames.append((sample["symbol"], sample["space"]))
        else:
            frames.append(host_frame(name))
    return frames


def leaf_key(sample: dict) -> tuple[str, str]:
    """The (space, symbol) the text report counts a sample under."""
    return sample["space"], sample["symbol"]


def tree(samples) -> dict:
    """The frame tree: {"n": name, "s": space, "v": samples, "c": [...]}
    (children by name, as flamegraph.pl orders them)."""
    root = {"n": "all", "s": "all", "v": 0, "kids": {}}
    for sample in samples:
        node = root
        root["v"] += 1
        for name, space in sample_frames(sample):
            node = node["kids"].setdefault(
                (name, space), {"n": name, "s": space, "v": 0, "kids": {}})
            node["v"] += 1
    return _freeze(root)


def _freeze(node: dict) -> dict:
    kids = node.pop("kids")
    node["c"] = [_freeze(kids[k]) for k in sorted(kids)]
    return node


def _page(data: dict, title: str) -> str:
    js = resources.files(__package__).joinpath("flamegraph.js").read_text()
    # "<" escaped: no "</script>" or "<!--" can end the data block early.
    payload = json.dumps(data, separators=(",", ":")).replace("<", "\\u003c")
    legend = "".join(f'<span class="sw" data-space="{k}">{v}</span>'
                     for k, v in SPACE_NAMES.items() if k != "all")
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font: 12px monospace; margin: 8px; }}
#bar {{ display: flex; gap: 10px; align-items: center; margin: 4px 0; }}
#fg {{ position: relative; width: 100%; overflow: hidden; }}
.f {{ position: absolute; height: 16px; box-sizing: border-box;
     border-right: 1px solid #fff; border-bottom: 1px solid #fff;
     overflow: hidden; white-space: nowrap; text-overflow: clip;
     padding-left: 2px; line-height: 15px; cursor: pointer; }}
.f.match {{ background: #d33ad3 !important; color: #fff; }}
.sw {{ padding: 0 6px; margin-right: 4px; }}
#tip {{ position: fixed; display: none; background: #ffffe8;
       border: 1px solid #888; padding: 3px 5px; pointer-events: none;
       white-space: pre; z-index: 2; }}
</style></head><body>
<div id="bar"><b>{html.escape(title)}</b>
<input id="search" size="28" placeholder="search (regular expression)">
<button id="reset">Reset zoom</button><span id="matched"></span></div>
<div id="legend">{legend}</div>
<div id="fg"></div><div id="tip"></div>
<script id="data" type="application/json">{payload}</script>
<script>{js}</script>
</body></html>
"""


def flamegraph_html(session: dict) -> str:
    """The interactive flame graph of one profile session."""
    m = session["meta"]
    root = tree(session["samples"])
    title = f"pvperf profile: {m['command']} ({root['v']} samples)"
    return _page({"root": root, "hz": m.get("frequency_hz")}, title)


def diff_html(root: dict, labels: tuple[str, str], hz: float) -> str:
    """A differential flame graph of ``root`` (diff.diff_tree: nodes carry
    "a", the first profile's samples in the second's units, and "d")."""
    title = f"pvperf diff: {labels[0]} -> {labels[1]}"
    return _page({"root": root, "hz": hz, "diff": list(labels)}, title)
