"""What the packages' maintainer scripts would have done, done at image
build time (the .debs are unpacked with ``dpkg-deb -x``: no script runs).

Only effects a program in the guest can tell are reproduced:

  * **byte-compiled Python modules** (python3.X-minimal's and python3.X's
    postinst run py_compile.py on the standard library, py3compile the
    dist-packages): ``__pycache__/<name>.cpython-3X.pyc`` beside every
    module, written as the guest's python would write it, so that it
    reads them and never rewrites them: the header holds the guest's
    magic number, flags 0, the source's mtime as the guest sees it (the
    initramfs stamps every file ARCHIVE_MTIME) and its size (symlinks
    resolved inside the tree); the code object names the guest path.
    Byte code is the same on every architecture, so the host compiles it,
    with an interpreter whose magic number is the guest's (read from the
    guest's own importlib); when the host has none (trixie's python3.13
    on a bookworm host), the guest's own interpreter compiles it in a
    build-time boot (guest_compile_job) and the .pyc files join the tree.  Without it, each boot's first python run compiles
    what it imports (python3 -S fib.py: 41.8 M instructions, then 24.1 M).
  * **alternatives**: ``update-alternatives --install LINK NAME PATH PRIO
    [--slave LINK NAME PATH]...`` of the postinst scripts, in auto mode
    (highest priority wins): LINK -> /etc/alternatives/NAME -> PATH, a
    slave only where its PATH is in the tree (man pages are dropped).
  * **the dynamic linker's cache**: libc-bin (Essential in Debian, so in
    every image with packages) is what the libraries' ``ldconfig``
    trigger runs.  ld.so.cache's entries carry architecture-specific
    flags, so the host's ldconfig cannot write another architecture's
    cache: the guest's own ``ldconfig`` runs in a build-time boot of the
    image (ldconfig_command) and its /etc/ld.so.cache joins the tree.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import ImageError
from .cpio import ARCHIVE_MTIME
from .foreign import resolve_in_tree

#: Essential packages an image with packages gets besides their closure.
ESSENTIAL = ("libc-bin",)
LDCONFIG = "/sbin/ldconfig"
LD_CACHE = "/etc/ld.so.cache"
#: glibc's new-format cache (2.32 on) and the old one that may precede it.
LD_CACHE_MAGICS = (b"glibc-ld.so.cache1.1", b"ld.so-1.7.0")

#: Where Debian's byte-compiling scripts look, relative to the root
#: ({v}: "3.11"): the standard library (python3.X's postinsts),
#: dist-packages and debpython (py3compile).
PYTHON_TREES = ("usr/lib/python{v}", "usr/lib/python3/dist-packages",
                "usr/share/python3")
_MAGIC_SOURCE = re.compile(
    r"^MAGIC_NUMBER = \((\d+)\)\.to_bytes\(2, 'little'\) \+ b'\\r\\n'", re.M)

# Run by the chosen host interpreter: exit 3 when its magic is not the
# guest's; else compile each (guest path, source, .pyc), skipping what
# does not compile (py_compile.py skips it too), and print the count.
_WORKER = r"""
import importlib.util, importlib._bootstrap_external as be, json, os, sys
job = json.load(sys.stdin)
if importlib.util.MAGIC_NUMBER.hex() != job["magic"]:
    sys.exit(3)
n = 0
for guest, src, pyc in job["files"]:
    with open(src, "rb") as f:
        data = f.read()
    try:
        code = compile(data, guest, "exec", dont_inherit=True, optimize=-1)
    except (SyntaxError, ValueError):
        continue
    os.makedirs(os.path.dirname(pyc), exist_ok=True)
    with open(pyc, "wb") as f:
        f.write(be._code_to_timestamp_pyc(code, job["mtime"], len(data)))
    n += 1
print(n)
"""


def python_versions(root: Path) -> list[str]:
    """"3.11" for each usr/bin/python3.X of the tree with its library."""
    found = []
    for exe in sorted((root / "usr" / "bin").glob("python3.*")):
        v = exe.name[len("python"):]
        if re.fullmatch(r"3\.\d+", v) and (root / f"usr/lib/python{v}").is_dir():
            found.append(v)
    return found


def guest_magic(root: Path, version: str) -> bytes | None:
    """The guest python's .pyc magic number, from its importlib source."""
    src = root / f"usr/lib/python{version}/importlib/_bootstrap_external.py"
    try:
        m = _MAGIC_SOURCE.search(src.read_text(errors="replace"))
    except OSError:
        return None
    return int(m.group(1)).to_bytes(2, "little") + b"\r\n" if m else None


def cache_tag(version: str) -> str:
    return "cpython-" + version.replace(".", "")


def python_sources(root: Path, version: str) -> list[tuple[str, Path, Path]]:
    """(guest path, file in the tree, .pyc in the tree) of each module to
    compile; a dangling symlink (sitecustomize.py without its /etc file)
    is left out, as python3.X-minimal's postinst leaves it."""
    out = []
    tag = cache_tag(version)
    for tree in PYTHON_TREES:
        top = root / tree.format(v=version)
        if not top.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(filenames):
                if not name.endswith(".py"):
                    continue
                host = Path(dirpath) / name
                guest = "/" + str(host.relative_to(root))
                real = resolve_in_tree(root, guest)
                if real is None or not real.is_file():
                    continue
                pyc = Path(dirpath) / "__pycache__" / f"{name[:-3]}.{tag}.pyc"
                out.append((guest, real, pyc))
    return out


def _interpreters(version: str) -> list[str]:
    """Host interpreters to try, Debian's own build first."""
    cands = [f"/usr/bin/python{version}", shutil.which(f"python{version}"),
             sys.executable]
    seen: list[str] = []
    for c in cands:
        if c and os.path.exists(c) and c not in seen:
            seen.append(c)
    return seen


@dataclass
class Compiled:
    version: str
    python: str | None       # the host interpreter that compiled, or None
    files: int
    why_not: str = ""

    def as_json(self) -> dict:
        return {"version": self.version, "python": self.python,
                "files": self.files, "why_not": self.why_not}


def byte_compile(root: Path) -> list[Compiled]:
    """Compile every guest python's modules (module docstring)."""
    done = []
    for v in python_versions(root):
        magic = guest_magic(root, v)
        if magic is None:
            done.append(Compiled(v, None, 0, "no MAGIC_NUMBER in its "
                                 "importlib/_bootstrap_external.py"))
            continue
        files = python_sources(root, v)
        job = json.dumps({"magic": magic.hex(), "mtime": ARCHIVE_MTIME,
                          "files": [[g, str(s), str(p)] for g, s, p in files]})
        for exe in _interpreters(v):
            r = subprocess.run([exe, "-I", "-S", "-c", _WORKER], input=job,
                               capture_output=True, text=True)
            # 3: another magic number; 127: a shim that cannot run it
            # (pyenv's python3.13 where no 3.13 is selected)
            if r.returncode in (3, 127):
                continue
            if r.returncode != 0:
                raise ImageError(f"cannot byte-compile python{v}'s modules",
                                 f"{exe} exited with {r.returncode}",
                                 "report a bug", details=r.stderr[-3000:])
            done.append(Compiled(v, exe, int(r.stdout.split()[-1])))
            break
        else:
            done.append(Compiled(v, None, 0, "no host python has the guest's "
                                 f"magic number {magic[:2].hex()}: install "
                                 f"python{v} on the host"))
    return done


# Run by the guest's own interpreter in a build-time boot: compile as
# _WORKER does, reading and naming guest paths, and stream each .pyc back
# on stdout as (u32 path length, u32 data length, path, data).  A second
# argument reads the sources under that root instead (a host-side test).
_GUEST_WORKER = r"""
import importlib._bootstrap_external as be, json, struct, sys
job = json.load(open(sys.argv[1]))
root = sys.argv[2] if len(sys.argv) > 2 else ""
out = sys.stdout.buffer
for guest, pyc in job["files"]:
    try:
        with open(root + guest, "rb") as f:
            data = f.read()
        code = compile(data, guest, "exec", dont_inherit=True, optimize=-1)
    except (OSError, SyntaxError, ValueError):
        continue
    blob = be._code_to_timestamp_pyc(code, job["mtime"], len(data))
    path = pyc.encode()
    out.write(struct.pack("<II", len(path), len(blob)) + path + blob)
"""
_GUEST_WORKER_FILE = "/.pvperf-pyc-worker.py"


def guest_compile_job(root: Path, compiled: list[Compiled]) -> str | None:
    """Put the job of every python no host interpreter compiled into the
    tree (its modules, guest paths) with the worker; the guest command
    that compiles them, or None when nothing is left to compile."""
    left = [c for c in compiled if c.python is None
            and guest_magic(root, c.version) is not None]
    if not left:
        return None
    (root / _GUEST_WORKER_FILE[1:]).write_text(_GUEST_WORKER)
    commands = []
    for c in left:
        job = f"/.pvperf-pyc-{c.version}.json"
        files = [[guest, "/" + str(pyc.relative_to(root))]
                 for guest, _, pyc in python_sources(root, c.version)]
        (root / job[1:]).write_text(json.dumps({"mtime": ARCHIVE_MTIME,
                                                "files": files}))
        commands.append(f"/usr/bin/python{c.version} -I -S "
                        f"{_GUEST_WORKER_FILE} {job}")
    return " && ".join(commands)


def install_guest_pyc(root: Path, stream: bytes,
                      compiled: list[Compiled]) -> int:
    """Write the .pyc files the guest streamed back into the tree, drop
    the job files, and record them in ``compiled``; their number."""
    n, at = 0, 0
    while at < len(stream):
        plen, dlen = struct.unpack_from("<II", stream, at)
        path = stream[at + 8:at + 8 + plen].decode()
        data = stream[at + 8 + plen:at + 8 + plen + dlen]
        if len(data) != dlen or not path.startswith("/"):
            raise ImageError("cannot byte-compile the guest's python",
                             "its stream of .pyc files is cut short",
                             "report a bug")
        dest = root / path[1:]
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
        at += 8 + plen + dlen
        n += 1
    for leftover in [root / _GUEST_WORKER_FILE[1:],
                     *root.glob(".pvperf-pyc-*.json")]:
        leftover.unlink(missing_ok=True)
    for c in compiled:
        if c.python is None and guest_magic(root, c.version) is not None:
            c.python, c.why_not = f"the guest's python{c.version}", ""
            c.files = sum(1 for _ in (root / f"usr/lib/python{c.version}")
                          .rglob(f"*.{cache_tag(c.version)}.pyc"))
    return n


@dataclass(frozen=True)
class Alternative:
    link: str
    name: str
    path: str
    priority: int
    slaves: tuple[tuple[str, str, str], ...] = ()


def parse_alternatives(script: str) -> list[Alternative]:
    """The ``update-alternatives --install`` commands of a maintainer
    script whose words are literal (one with a shell variable or command
    substitution is left out: only running the script would know it)."""
    text = script.replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        i = line.find("update-alternatives")
        if i < 0 or "--install" not in line:
            continue
        cmd = line[i:].split(";")[0].split("||")[0].split("&&")[0]
        if "$" in cmd or "`" in cmd:
            continue
        try:
            words = shlex.split(cmd, comments=True)
        except ValueError:
            continue
        if "--install" not in words:
            continue
        w = words[words.index("--install") + 1:]
        if len(w) < 4 or not w[3].lstrip("-").isdigit():
            continue
        slaves, rest = [], w[4:]
        while len(rest) >= 4 and rest[0] == "--slave":
            slaves.append((rest[1], rest[2], rest[3]))
            rest = rest[4:]
        out.append(Alternative(w[0], w[1], w[2], int(w[3]), tuple(slaves)))
    return out


def postinst(deb: Path) -> str:
    """A .deb's postinst script, "" when it has none."""
    r = subprocess.run(["dpkg-deb", "--info", str(deb), "postinst"],
                       capture_output=True, text=True)
    return r.stdout if r.returncode == 0 else ""


def _link(root: Path, link: str, target: str) -> None:
    dst = root / link.lstrip("/")
    if dst.exists() and not dst.is_symlink():
        return                  # update-alternatives leaves a real file be
    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.is_symlink():
        dst.unlink()
    os.symlink(target, dst)


def install_alternatives(root: Path, alts: list[Alternative]) -> list[str]:
    """Auto mode for each name: the highest priority whose path is in the
    tree (the first registered on a tie).  Returns "NAME -> PATH" lines."""
    best: dict[str, Alternative] = {}
    for a in alts:
        if resolve_in_tree(root, a.path) is None:
            continue
        if a.name not in best or a.priority > best[a.name].priority:
            best[a.name] = a
    done = []
    for name, a in sorted(best.items()):
        for link, sname, path in ((a.link, a.name, a.path), *a.slaves):
            if resolve_in_tree(root, path) is None:
                continue
            _link(root, f"/etc/alternatives/{sname}", path)
            _link(root, link, f"/etc/alternatives/{sname}")
        done.append(f"{name} -> {a.path}")
    return done


def check_ld_cache(data: bytes) -> bytes:
    """``data`` if it is an ld.so.cache; else ImageError."""
    if not data.startswith(LD_CACHE_MAGICS):
        raise ImageError("cannot make the dynamic linker's cache",
                         f"the guest's ldconfig wrote {len(data)} bytes "
                         f"starting {data[:20]!r}", "report a bug")
    return data


def has_ldconfig(root: Path) -> bool:
    return resolve_in_tree(root, LDCONFIG) is not None


def ldconfig_command(root: Path) -> str:
    """The build-time boot's command (the cache comes back on stdout):
    ldconfig where the tree has it, /usr/sbin on a /usr-merged release
    (trixie), whose /sbin link is base-files', outside the closure."""
    found = resolve_in_tree(root, LDCONFIG)
    assert found is not None, "has_ldconfig() first"
    return f"/{found.relative_to(root)} && cat {LD_CACHE}"


def install_ld_cache(root: Path, data: bytes) -> None:
    dst = root / LD_CACHE.lstrip("/")
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(check_ld_cache(data))
    os.chmod(dst, 0o644)
