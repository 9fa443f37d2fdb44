"""The parallel phase's groups (tests/parallel.py) are named alike in every
xdist worker: xdist refuses to run when two workers collect different node
ids, and a group's name is part of each grouped test's id."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def grouped_ids(hash_seed: int) -> list[str]:
    """The node ids a worker would collect for a module with many groups,
    in a process with this string-hash seed (each worker has its own)."""
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q",
         "-p", "no:cacheprovider", "--dist", "loadgroup",
         "tests/vm/test_sampling.py"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env=dict(os.environ, PYTHONHASHSEED=str(hash_seed)))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return [line for line in r.stdout.splitlines() if "::" in line]


def test_group_names_do_not_depend_on_the_hash_seed():
    first = grouped_ids(1)
    assert sum("@" in i for i in first) > 20, first[:5]
    for seed in (2, 3):
        assert grouped_ids(seed) == first
