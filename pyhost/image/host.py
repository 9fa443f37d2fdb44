"""Host programs copied into the guest: perf and the recipe's tools, with
the shared libraries ``ldd`` lists for them, and the subprocess helper
every build step uses (ImageError with what failed, why, what to do).
"""
from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..errors import ImageError
from .memo import memoized, stat_key
from .recipe import Recipe, ToolSpec

ELF_MAGIC = b"\x7fELF"


def run(cmd: list[str], what: str, hint: str, cwd: Path | None = None,
         check: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, LC_ALL="C", LANG="C")
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True,
                              text=True)
    except FileNotFoundError as e:
        raise ImageError(what, f"{cmd[0]} is not installed", hint,
                         exc=e) from e
    if check and proc.returncode != 0:
        err = (proc.stderr or proc.stdout).strip().splitlines()
        cause = err[-1] if err else f"{cmd[0]} exited with {proc.returncode}"
        raise ImageError(what, cause, hint,
                         details="\n".join(err[-20:]))
    return proc


def is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == ELF_MAGIC
    except OSError:
        return False


def installed_version(package: str, purpose: str) -> str:
    """The version of an installed host package; ImageError if it is not
    installed (``purpose`` says what the image takes from it)."""
    hint = f"install it: apt-get install {package}"

    def query() -> str:
        q = run(["dpkg-query", "-W", "-f", "${Status}\t${Version}", package],
                f"the host package {package} is not installed", hint,
                check=False)
        if q.returncode != 0 or "install ok installed" not in q.stdout:
            raise ImageError(f"the host package {package} is not installed",
                             purpose, hint)
        return q.stdout.split("\t", 1)[1].strip()

    return memoized(["dpkg-version", package], query)


def find_perf_binary(recipe: Recipe) -> tuple[Path, str]:
    """The real perf ELF of the installed perf package and its version.
    Debian's /usr/bin/perf may be a wrapper that execs perf_<major.minor>."""
    hint = f"install it: apt-get install {recipe.perf_package}"
    version = installed_version(recipe.perf_package,
                                "the guest image takes perf from it")
    wanted = Path(recipe.perf_binary)
    if is_elf(wanted):
        return wanted, version
    files = memoized(["dpkg-files", recipe.perf_package], lambda: run(
        ["dpkg", "-L", recipe.perf_package],
        f"cannot list {recipe.perf_package}", hint).stdout.split("\n"))
    elves = sorted(Path(f) for f in files
                   if re.fullmatch(r"/usr/bin/perf_[\d.]+", f.strip())
                   and is_elf(Path(f.strip())))
    if not elves:
        raise ImageError("cannot find the perf binary",
                         f"{wanted} is not an ELF file and "
                         f"{recipe.perf_package} ships no /usr/bin/perf_*",
                         f"reinstall it: apt-get install --reinstall "
                         f"{recipe.perf_package}")
    return elves[-1], version


_LDD_LINE = re.compile(r"^\s*(?:(\S+)\s+=>\s+)?(\S+)\s+\(0x[0-9a-f]+\)\s*$")


def ldd_libraries(binary: Path) -> list[tuple[str, Path]]:
    """(guest path, host file) for every library ``ldd`` lists, plus the
    dynamic loader; the guest path is the one the loader searches.  A
    static binary has none.  Memoized per binary, loader cache and
    library path (and package state)."""
    query = ["ldd", str(binary), stat_key(binary),
             stat_key("/etc/ld.so.cache"),
             os.environ.get("LD_LIBRARY_PATH")]
    return [(guest, Path(host)) for guest, host in
            memoized(query, lambda: [[g, str(h)]
                                     for g, h in _ldd_libraries(binary)])]


def _ldd_libraries(binary: Path) -> list[tuple[str, Path]]:
    proc = run(["ldd", str(binary)], f"ldd failed on {binary}",
               "install libc-bin, or check that the binary is intact",
               check=False)
    if proc.returncode != 0 and "not a dynamic executable" in proc.stderr:
        return []
    if proc.returncode != 0:
        err = (proc.stderr or proc.stdout).strip()
        raise ImageError(f"ldd failed on {binary}",
                         err.splitlines()[-1] if err else
                         f"ldd exited with {proc.returncode}",
                         "install libc-bin, or check that the binary is "
                         "intact", details=err)
    out = proc.stdout
    libs: list[tuple[str, Path]] = []
    for line in out.splitlines():
        if "not found" in line:
            raise ImageError(f"{binary} cannot run on this host",
                             f"ldd: {line.strip()}",
                             "install the missing library package")
        m = _LDD_LINE.match(line)
        if not m:
            continue
        path = m.group(2)
        if not path.startswith("/"):
            continue                 # linux-vdso.so.1 has no file
        libs.append((path, Path(os.path.realpath(path))))
    return libs


@dataclass
class Tool:
    """A recipe tool resolved on the host."""
    spec: ToolSpec
    host: Path                           # the ELF file (symlinks resolved)
    version: str                         # of spec.package
    libs: list[tuple[str, Path]]         # as ldd_libraries


def find_tool(spec: ToolSpec) -> tuple[Path, str]:
    """(host ELF file, package version) of a recipe tool; ImageError if the
    package is not installed or does not give a runnable ELF binary."""
    version = installed_version(
        spec.package, f"the guest image takes {spec.binary} from it "
                      "(recipe key tools)")
    path = Path(spec.binary)
    if not path.exists():
        raise ImageError(f"cannot add {spec.binary} to the guest image",
                         f"{spec.binary} does not exist, although "
                         f"{spec.package} {version} is installed",
                         f"reinstall it (apt-get install --reinstall "
                         f"{spec.package}) or fix the recipe's tools entry")
    real = Path(os.path.realpath(path))
    if not (real.is_file() and is_elf(real)):
        raise ImageError(f"cannot add {spec.binary} to the guest image",
                         f"{real} is not an ELF program (only ELF binaries "
                         "and their shared libraries are copied)",
                         "name the real program in the recipe's tools entry")
    return real, version

