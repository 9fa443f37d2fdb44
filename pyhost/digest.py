"""SHA-256 of a file, read in 1 MiB blocks: image inputs and downloaded
packages (pyhost/image), checkpoints (pyhost/vm/checkpoint.py)."""
from __future__ import annotations

import hashlib
from pathlib import Path


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
