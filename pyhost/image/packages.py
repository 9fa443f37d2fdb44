"""Debian packages installed into an image with their dependencies
(recipe key ``packages``; ``pvperf image build --name NAME --add PKG,...``).

Resolution is apt's own resolver: ``apt-get install --print-uris`` against
an EMPTY dpkg status file, so that apt computes the whole closure
(Depends and Pre-Depends; no Recommends) instead of only what the host
lacks.  The answer (file name, size and hash of every .deb) is memoized
per package state (memo.memoized).  The download is one ``apt-get install
--download-only`` of exactly that set (``name=version``) into a private
directory, verified by apt; finished .debs join the kernel's and
busybox's in ``<cache>/debs/``, and a cached one is checked against the
size and SHA-256 apt lists before it is used.

Unpacking is ``dpkg-deb -x`` of every .deb into the guest root.  Nothing
runs inside the guest tree: maintainer scripts do not run (no dpkg
database; maintainer.py does what they would have done and a program can
tell), and the documentation trees (DROPPED_TREES) are left out.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable

from ..errors import ImageError
from . import apt
from .aptdir import AptContext
from ..digest import sha256_file
from .host import run
from .memo import memoized
from .store import images_dir

#: Trees of the unpacked packages that the guest does not get (they hold
#: nothing a program needs to run; python3's closure has ~9 MB there).
DROPPED_TREES = ("usr/share/doc", "usr/share/man", "usr/share/info",
                 "usr/share/locale", "usr/share/lintian")
_HINT = "check the name (apt-cache search NAME), or run `apt-get update`"


class PackageNotFound(ImageError):
    """apt knows no installable package of this name."""

    def __init__(self, package: str, cause: str):
        self.package = package
        super().__init__(f"cannot add {package}", cause, _HINT)


@dataclass(frozen=True)
class Deb:
    """One .deb of a resolved closure, as apt lists it."""
    name: str
    version: str
    filename: str          # apt's archive file name (epoch as %3a)
    size: int
    hash: str              # "SHA256:hex", from apt-cache show


_URI_LINE = re.compile(r"^'[^']+' (\S+\.deb) (\d+)(?: (\w+):([0-9a-f]+))?$")


def parse_print_uris(text: str) -> list[Deb]:
    """``apt-get --print-uris`` lines: 'URI' FILE SIZE [HASHTYPE:HEX].
    apt 2.6 prints an MD5Sum, or no hash at all for some archives (seen:
    the security archive), so ``hash`` may be empty here (with_sha256
    fills it in)."""
    debs = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("'"):
            continue
        m = _URI_LINE.match(line)
        if not m:
            raise ValueError(f"unexpected apt-get --print-uris line: {line}")
        fname = m.group(1)
        parts = fname[:-len(".deb")].split("_")
        if len(parts) != 3:
            raise ValueError(f"unexpected .deb file name {fname}")
        debs.append(Deb(parts[0], parts[1].replace("%3a", ":"), fname,
                        int(m.group(2)),
                        f"{m.group(3)}:{m.group(4)}" if m.group(3) else ""))
    return debs


def with_sha256(debs: list[Deb], records: list[dict[str, str]]) -> list[Deb]:
    """``debs`` with the SHA256 that ``apt-cache show`` records list for
    each package version (ValueError if one has none)."""
    sha = {(r["Package"], r["Version"]): r["SHA256"] for r in records
           if {"Package", "Version", "SHA256"} <= r.keys()}
    out = []
    for d in debs:
        if (d.name, d.version) not in sha:
            raise ValueError(f"apt lists no SHA256 for {d.name} {d.version}")
        out.append(replace(d, hash="SHA256:" + sha[d.name, d.version]))
    return out


def apt_errors(packages: list[str], output: str) -> ImageError:
    """The ImageError for apt's ``E:`` lines; PackageNotFound for a name
    apt does not know or cannot install."""
    errors = [l[3:].strip() for l in output.splitlines() if l.startswith("E:")]
    for e in errors:
        m = (re.match(r"Unable to locate package (\S+)", e)
             or re.match(r"Package '([^']+)' has no installation candidate", e))
        if m:
            name = m.group(1)
            cause = ("Debian has no package of that name" if "locate" in e
                     else "no version of it can be installed (a virtual or "
                     "obsolete package?)")
            return PackageNotFound(name, cause)
    return ImageError("cannot resolve " + " ".join(packages),
                      errors[0] if errors else "apt-get failed", _HINT,
                      details=output.strip())


def _apt_options(workdir: Path, ctx: AptContext | None = None) -> list[str]:
    """Options that point apt at a private, empty dpkg status and archive
    directory and take no lock (only the apt lists are read); after the
    context's own (``ctx``: whose lists), which these override."""
    (workdir / "archives" / "partial").mkdir(parents=True, exist_ok=True)
    (workdir / "status").touch()
    opts = {"Dir::State::status": workdir / "status",
            "Dir::Cache::archives": f"{workdir / 'archives'}/",
            "Debug::NoLocking": "true",
            "APT::Install-Recommends": "false"}
    if os.geteuid() == 0:            # else apt warns it cannot drop to _apt
        opts["APT::Sandbox::User"] = "root"
    own = [x for k, v in opts.items() for x in ("-o", f"{k}={v}")]
    return (ctx.options() if ctx is not None else []) + own


def resolve(packages: list[str], ctx: AptContext | None = None) -> list[Deb]:
    """The .debs of ``packages`` and their dependency closure (apt's
    resolver, empty status) from ``ctx``'s lists (None: the host's);
    memoized per apt state.  Raises PackageNotFound or ImageError."""
    if not packages:
        return []
    key = ctx.memo_key() if ctx is not None else []
    raw = memoized(["closure", *packages, *key], lambda: [
        asdict(d) for d in _resolve(packages, ctx)])
    return [Deb(**d) for d in raw]


def _resolve(packages: list[str], ctx: AptContext | None) -> list[Deb]:
    with tempfile.TemporaryDirectory(prefix=".apt-", dir=_workspace()) as d:
        proc = run(["apt-get", "install", "--print-uris", "-qq",
                    *_apt_options(Path(d), ctx), "--", *packages],
                   "cannot resolve " + " ".join(packages), _HINT,
                   check=False)
    if proc.returncode != 0:
        raise apt_errors(packages, proc.stderr + proc.stdout)
    try:
        debs = parse_print_uris(proc.stdout)
        if debs:
            shown = run(["apt-cache", *(ctx.options() if ctx else []),
                         "show", *(f"{d.name}={d.version}" for d in debs)],
                        "cannot look up the packages' hashes", _HINT)
            debs = with_sha256(debs, apt.parse_apt_records(shown.stdout))
    except ValueError as e:
        raise ImageError("cannot resolve " + " ".join(packages), str(e),
                         "report a bug: apt's output changed") from e
    if not debs:
        raise ImageError("cannot resolve " + " ".join(packages),
                         "apt lists no .deb for them", _HINT,
                         details=proc.stdout + proc.stderr)
    return debs


def _workspace() -> Path:
    d = images_dir()
    d.mkdir(parents=True, exist_ok=True)
    return d


def deb_ok(path: Path, deb: Deb) -> bool:
    """Does the file have the size and hash apt lists for it?"""
    try:
        if path.stat().st_size != deb.size:
            return False
    except OSError:
        return False
    return "SHA256:" + sha256_file(path) == deb.hash


Report = Callable[[str], None]


def fetch(debs: list[Deb], cache: Path, report: Report,
          ctx: AptContext | None = None) -> list[Path]:
    """The .deb files of ``debs`` in ``cache``; downloads what is missing
    (one apt-get run of ``ctx``'s apt, a progress line per package)."""
    cache.mkdir(parents=True, exist_ok=True)
    missing = [d for d in debs if not deb_ok(cache / d.filename, d)]
    if not missing:
        report(f"{len(debs)} packages cached")
        return [cache / d.filename for d in debs]
    mb = sum(d.size for d in missing) / 1e6
    report(f"downloading {len(missing)} of {len(debs)} packages ({mb:.1f} MB)")
    work = Path(tempfile.mkdtemp(prefix=".download-", dir=cache))
    try:
        opts = _apt_options(work, ctx)
        for d in debs:             # apt re-verifies these and skips them
            if d not in missing:
                _link_or_copy(cache / d.filename, work / "archives" / d.filename)
        _download([f"{d.name}={d.version}" for d in debs], opts,
                  len(missing), report)
        for d in missing:
            got = work / "archives" / d.filename
            if not deb_ok(got, d):
                raise ImageError(f"cannot download {d.name} {d.version}",
                                 "apt-get did not deliver the listed file",
                                 "run `apt-get update` and retry")
            os.replace(got, cache / d.filename)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return [cache / d.filename for d in debs]


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


_GET = re.compile(r"^Get:\d+ \S+ \S+ \S+ (\S+) \S+ (\S+)")


def _download(pins: list[str], opts: list[str], count: int,
              report: Report) -> None:
    cmd = ["apt-get", "install", "--download-only", "-y", "-q", *opts,
           "--", *pins]
    env = dict(os.environ, LC_ALL="C", LANG="C")
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env=env)
    except FileNotFoundError as e:
        raise ImageError("cannot download packages", "apt-get is not "
                         "installed", "run on Debian (apt-get)", exc=e) from e
    lines, done = [], 0
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line.rstrip())
        m = _GET.match(line)
        if m:
            done += 1
            report(f"got {done}/{count}: {m.group(1)} {m.group(2)}")
    if proc.wait() != 0:
        errors = [l for l in lines if l.startswith("E:")]
        raise ImageError("cannot download packages",
                         errors[0][3:].strip() if errors else
                         f"apt-get exited with {proc.returncode}",
                         "check network access to the Debian mirror, or run "
                         "`apt-get update` and retry",
                         details="\n".join(lines[-20:]))


def unpack(debs: list[Path], root: Path) -> None:
    """``dpkg-deb -x`` every .deb into ``root``, then drop DROPPED_TREES."""
    for deb in debs:
        run(["dpkg-deb", "-x", str(deb), str(root)],
            f"cannot unpack {deb.name}", f"delete {deb} so it is downloaded "
            "again")
    for tree in DROPPED_TREES:
        shutil.rmtree(root / tree, ignore_errors=True)
