#!/usr/bin/env python3
"""PROTOTYPE (groundwork for the arm64 port; the image builder will do this
on its arch seam, so this may be rewritten): the shared-library closure of
foreign-architecture ELF programs inside an unpacked Debian root.

On x86_64 the image builder copies the host's installed perf and asks
`ldd` for its libraries.  For an arm64 guest there is no arm64 perf on
the host and ldd cannot run it, so the closure is computed from the
DT_NEEDED entries (read with `readelf -d`, which reads any ELF) searched
in the multiarch directories of the unpacked .debs.

    elf-closure.py ROOT /usr/bin/perf /usr/bin/aarch64-linux-gnu-objdump ...

prints one guest path per line: each program, each library it needs (the
file a symlink resolves to, and the symlink), and the dynamic loader.
"""
import os
import re
import subprocess
import sys

SEARCH = ["/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
          "/lib", "/usr/lib"]


def dynamic_entries(path):
    out = subprocess.run(["readelf", "-dlW", path], capture_output=True,
                         text=True, check=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)
    runpath = re.findall(r"\((?:RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[([^\]]+)\]", out)
    interp = re.findall(r"Requesting program interpreter: ([^\]]+)\]", out)
    return needed, [d for r in runpath for d in r.split(":")], interp


def find_lib(root, name, extra):
    for d in extra + SEARCH:
        cand = os.path.join(d, name)
        if os.path.lexists(root + cand):
            return cand
    return None


def closure(root, programs):
    seen, todo, missing = [], list(programs), []
    while todo:
        guest = todo.pop(0)
        if guest in seen:
            continue
        seen.append(guest)
        real = os.path.realpath(root + guest)
        if os.path.islink(root + guest):
            seen.append(real[len(root):])
        needed, runpath, interp = dynamic_entries(real)
        for name in needed + interp:
            hit = interp and name in interp and name or find_lib(root, name, runpath)
            if hit is None:
                missing.append((guest, name))
            else:
                todo.append(hit)
    return seen, missing


def main():
    root = os.path.realpath(sys.argv[1])
    paths, missing = closure(root, sys.argv[2:])
    for p in paths:
        print(p)
    for who, name in missing:
        print(f"missing: {name} (needed by {who})", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
