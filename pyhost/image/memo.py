"""Answers of slow host queries, remembered while the package state stays
the same (``<cache>/images/.apt-memo.json``).

apt-cache needs ~0.5 s per call to load its cache, apt-get's resolver
~2 s, and the half-dozen dpkg-query and ldd calls that check an image
before every run ~60 ms; their answers only change when the package
state does (apt-get update, a config change, dpkg) or, for ldd, when the
binary or the loader's cache does (the caller puts those in its query).
Only a speed-up: a lost or unreadable memo is recomputed.
"""
from __future__ import annotations

import json
import os
from typing import Callable, TypeVar

from .store import images_dir

T = TypeVar("T")

PACKAGE_STATE = ("/var/lib/apt/lists", "/var/cache/apt/pkgcache.bin",
                 "/var/lib/dpkg/status", "/etc/apt/sources.list",
                 "/etc/apt/sources.list.d", "/etc/apt/preferences",
                 "/etc/apt/preferences.d", "/etc/apt/apt.conf.d")


def stat_key(path) -> list[int] | None:
    """[mtime_ns, size] of a file, None if it is absent."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_mtime_ns, st.st_size]


def package_state() -> dict[str, list[int] | None]:
    return {p: stat_key(p) for p in PACKAGE_STATE}


def memoized(query, compute: Callable[[], T]) -> T:
    """compute(), remembered per JSON-able ``query`` while the package
    state stays the same.  compute() raising is not remembered."""
    memo = images_dir() / ".apt-memo.json"
    key = json.dumps(query, sort_keys=True)
    state = package_state()
    try:
        saved = json.loads(memo.read_text())
        answers = saved["answers"] if saved["state"] == state else {}
        if key in answers:
            return answers[key]
    except (OSError, ValueError, KeyError, TypeError):
        answers = {}
    value = compute()
    answers[key] = value
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo.with_name(f"{memo.name}.{os.getpid()}")
        tmp.write_text(json.dumps({"state": state, "answers": answers}))
        os.replace(tmp, memo)
    except OSError:
        pass
    return value
