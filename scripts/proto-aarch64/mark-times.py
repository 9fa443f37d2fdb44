#!/usr/bin/env python3
"""PROTOTYPE (may be rewritten): run a command, print every stdout line
that contains HOST-MARK or a perf/valgrind figure with the host's
monotonic time since start, so the time between two guest markers (e.g.
around one program run) is measured on the host clock.
    mark-times.py CMD ARGS..."""
import subprocess
import sys
import time

t0 = time.monotonic()
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, text=True)
for line in p.stdout:
    if not line.startswith("["):
        print(f"{time.monotonic() - t0:8.3f} {line}", end="", flush=True)
sys.exit(p.wait())
