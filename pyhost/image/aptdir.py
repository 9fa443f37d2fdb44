"""Which apt answers for a guest architecture's packages.

The host's own architecture: the host's apt (its lists, ``apt-get
update`` by setup.sh).  Another architecture: a private apt directory
``<cache>/apt/<debian arch>/`` with its own lists, archive cache and an
EMPTY dpkg status, so that nothing of the host's apt state is read or
written besides its configuration (keys, proxies, preferences).  Its
sources are the host's own ``deb`` entries (Types: deb only, so that an
update fetches Packages files and no Sources): the same mirrors and
suites the host uses, for the guest's architecture.  A recipe that names
another Debian suite (``suite``: an architecture the host's release does
not serve, from a newer release) gets the host's entries for its own
release's suite rewritten to that suite, and nothing else: the point
releases' -updates/-security/-backports indexes of a young port may be
mid-sync (apt's size check fails), and one suite resolves consistently.
A recipe's ``package_suites`` (a package only a newer suite has for a
young port) add that suite's entries, derived the same way, to the
context of an image that installs such a package: apt
then ranks the context's own suite first (APT::Default-Release) and a
preferences file pins each such package to its suite, so that its
dependencies come from the own suite where they fit (``PKG/SUITE`` would
switch some dependencies to the newer suite and break others: sid's
libc6 next to trixie's libc6-dbg).  The recipe's entries are one set:
an image that installs any of them gets every pin, so that a library a
pinned package needs from the newer suite (sid's perf needing sid's
libc6) is the same version in every closure the image unpacks (perf's
and the added packages'; the first one unpacked wins).  The
preferences file is named after its pins: images of one directory with
other pin sets (another branch's recipe) never read each other's.
An index apt cannot fetch is named in the report; the build goes on only
if every suite's own index arrived, else the error names the suite and
apt's line about its index.

The private lists are fetched by the first build (``apt-get update``,
~1.5 s, 10 MB) and again whenever the host's lists are newer (the host
was updated: the guest follows it) or the derived sources changed.
"""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .. import arch as arches
from ..arch import Arch
from ..errors import ImageError
from ..paths import cache_dir
from .host import run
from .memo import stat_key
from .store import BuildLock

HOST_SOURCE_LIST = Path("/etc/apt/sources.list")
HOST_SOURCE_PARTS = Path("/etc/apt/sources.list.d")
HOST_LISTS = Path("/var/lib/apt/lists")
HOST_OS_RELEASE = Path("/etc/os-release")
HOST_PREFERENCES = Path("/etc/apt/preferences")


def deb822_binary_only(text: str) -> str:
    """A deb822 .sources text with every stanza's Types reduced to
    ``deb``; stanzas without ``deb`` (deb-src only) and disabled ones
    (Enabled: no) are dropped."""
    out = []
    for stanza in re.split(r"\n\s*\n", text.strip()):
        fields = {l.split(":", 1)[0].strip().lower(): l.split(":", 1)[1]
                  for l in stanza.splitlines()
                  if ":" in l and not l[0].isspace() and not l.startswith("#")}
        if "deb" not in fields.get("types", "").split() or \
                fields.get("enabled", "yes").strip().lower() == "no":
            continue
        out.append(re.sub(r"(?im)^Types:.*$", "Types: deb", stanza))
    return "\n\n".join(out) + "\n" if out else ""


def one_line_binary_only(text: str) -> str:
    """The ``deb`` lines of a one-line-style sources.list."""
    return "".join(l.strip() + "\n" for l in text.splitlines()
                   if l.strip().startswith("deb "))


def host_sources() -> dict[str, str]:
    """file name -> text of the host's binary sources, per format."""
    out = {}
    if HOST_SOURCE_LIST.is_file():
        text = one_line_binary_only(HOST_SOURCE_LIST.read_text())
        if text:
            out["host.list"] = text
    for f in sorted(HOST_SOURCE_PARTS.glob("*")):
        if f.suffix == ".sources":
            text = deb822_binary_only(f.read_text())
        elif f.suffix == ".list":
            text = one_line_binary_only(f.read_text())
        else:
            continue
        if text:
            out[f.name] = text
    return out


def host_codename() -> str:
    """The host's Debian release name (os-release VERSION_CODENAME)."""
    try:
        text = HOST_OS_RELEASE.read_text()
    except OSError:
        text = ""
    m = re.search(r"(?m)^VERSION_CODENAME=\"?([A-Za-z0-9]+)", text)
    if not m:
        raise ImageError("cannot derive another suite's apt sources",
                         f"{HOST_OS_RELEASE} names no VERSION_CODENAME",
                         "build on Debian, or use a recipe without 'suite'")
    return m.group(1)


def _retarget_deb822(text: str, codename: str, suite: str) -> str:
    out = []
    for stanza in re.split(r"\n\s*\n", text.strip()):
        m = re.search(r"(?im)^Suites:(.*)$", stanza)
        if m and codename in m.group(1).split():
            out.append(re.sub(r"(?im)^Suites:.*$", f"Suites: {suite}",
                              stanza))
    return "\n\n".join(out) + "\n" if out else ""


def _retarget_one_line(text: str, codename: str, suite: str) -> str:
    out = []
    for line in text.splitlines():
        # deb [options] URI SUITE COMPONENT...
        words = re.sub(r"\[[^]]*\]", lambda m: m.group(0).replace(" ", "\0"),
                       line).split()
        if len(words) >= 4 and words[0] == "deb":
            at = 2 + words[1].startswith("[")
            if len(words) > at + 1 and words[at] == codename:
                words[at] = suite
                out.append(" ".join(words).replace("\0", " ") + "\n")
    return "".join(out)


def retarget(sources: dict[str, str], codename: str, suite: str
             ) -> dict[str, str]:
    """The entries of ``sources`` (host_sources()) for the release
    ``codename`` itself (not its -updates, -security, -backports), with
    ``suite`` in its place; files left without one are dropped."""
    out = {}
    for name, text in sources.items():
        text = _retarget_deb822(text, codename, suite) \
            if name.endswith(".sources") else \
            _retarget_one_line(text, codename, suite)
        if text:
            out[name] = text
    return out


def broken_indexes(apt_output: str) -> list[str]:
    """apt-get update's lines about indexes it could not fetch."""
    return [l.strip() for l in apt_output.splitlines()
            if re.match(r"\s*(E|W): (Failed to fetch|Some index files)", l)
            or "unexpected size" in l or "Mirror sync in progress" in l]


@dataclass(frozen=True)
class AptContext:
    debian_arch: str
    directory: Path | None = None      # None: the host's own apt
    #: the Debian suite the private sources name (None: the host's)
    suite: str | None = None
    #: (package, suite) pairs: packages taken from another suite, whose
    #: entries the sources add, ranked below ``suite`` but for them
    pins: tuple[tuple[str, str], ...] = ()

    @property
    def extra_suites(self) -> tuple[str, ...]:
        return tuple(sorted({s for _p, s in self.pins}))

    def preferences(self) -> str:
        """The apt preferences of this context: the host's
        /etc/apt/preferences, then a stanza per pin."""
        host = HOST_PREFERENCES.read_text() if HOST_PREFERENCES.is_file() \
            else ""
        return host + "".join(f"\nPackage: {p}\nPin: release n={s}\n"
                              f"Pin-Priority: 995\n" for p, s in self.pins)

    def preferences_file(self) -> Path:
        """Where this context's preferences are written (named after the
        pins: two pin sets sharing the directory, each its own file)."""
        tag = hashlib.sha256(self.preferences().encode()).hexdigest()[:12]
        return self.directory / f"preferences-{tag}"

    def sources(self) -> dict[str, str]:
        """file name -> text of this context's sources."""
        host = host_sources()
        sources = host if self.suite is None else \
            retarget(host, host_codename(), self.suite)
        for extra in self.extra_suites:
            sources.update({f"{extra}-{name}": text for name, text in
                            retarget(host, host_codename(), extra).items()})
        return sources

    def default_release(self) -> str:
        """The suite apt ranks first: the context's own."""
        return self.suite or host_codename()

    def options(self) -> list[str]:
        """apt-get / apt-cache options that select this context."""
        if self.directory is None:
            return []
        d = self.directory
        opts = {"APT::Architectures::": self.debian_arch,
                "APT::Architecture": self.debian_arch,
                "Dir::Etc::SourceList": "/dev/null",
                "Dir::Etc::SourceParts": d / "sources",
                "Dir::State": d / "state",
                "Dir::State::Lists": d / "lists",
                "Dir::State::status": d / "state" / "status",
                "Dir::Cache": d / "cache",
                "Debug::NoLocking": "true"}
        if self.pins:                # the newer suite's versions are higher
            opts["APT::Default-Release"] = self.default_release()
            opts["Dir::Etc::Preferences"] = self.preferences_file()
        if os.geteuid() == 0:        # else apt warns it cannot drop to _apt
            opts["APT::Sandbox::User"] = "root"
        return [x for k, v in opts.items() for x in ("-o", f"{k}={v}")]

    def debs_dir(self) -> Path:
        """Where downloaded .debs are kept (one directory per context, so
        that a version's .deb of one architecture never stands for
        another's)."""
        if self.directory is None:
            return cache_dir() / "debs"
        return self.directory / "debs"

    def memo_key(self) -> list:
        """What a memoized answer of this context depends on besides the
        host's package state."""
        if self.directory is None:
            return []
        return [self.debian_arch, *([self.suite] if self.suite else []),
                *(f"{p}/{s}" for p, s in self.pins), stat_key(self.directory / "lists"),
                stat_key(self.directory / "sources")]

    def has_lists(self) -> bool:
        return self.directory is None or (
            any((self.directory / "lists").glob("*_Packages*"))
            and not self.suites_without_lists())

    def suites_without_lists(self) -> list[str]:
        """The extra suites whose Packages index is not in the lists (the
        own suite's absence is has_lists')."""
        lists = self.directory / "lists" if self.directory else None
        return [s for s in self.extra_suites if lists is not None and
                not any(lists.glob(f"*_dists_{s}_*Packages*"))]

    def ensure_lists(self, report: Callable[[str], None]) -> None:
        """Fetch the private lists if missing, older than the host's, or
        from other sources (no-op for the host's apt)."""
        if self.directory is None:
            return
        # apt-get runs here without apt's own locks (Debug::NoLocking):
        # two builds sharing the directory (of two images of one
        # architecture) fetch the lists one after the other
        with BuildLock(self.directory.parent / f".lock-{self.directory.name}",
                       "another fetch of these package lists"):
            self._ensure_lists(report)

    def _ensure_lists(self, report: Callable[[str], None]) -> None:
        d = self.directory
        sources = self.sources()
        if not sources:
            raise ImageError(f"cannot fetch {self.debian_arch} package lists",
                             "the host's apt has no deb sources"
                             + (f" for its own release to stand for "
                                f"{self.suite}" if self.suite else ""),
                             "configure /etc/apt/sources.list.d")
        current = {f.name: f.read_text() for f in (d / "sources").glob("*")} \
            if (d / "sources").is_dir() else {}
        if self.pins:
            d.mkdir(parents=True, exist_ok=True)
            self.preferences_file().write_text(self.preferences())
        lists = d / "lists"
        host_mtime = HOST_LISTS.stat().st_mtime if HOST_LISTS.exists() else 0
        if current == sources and self.has_lists() and \
                lists.stat().st_mtime >= host_mtime:
            return
        for sub in ("sources", "lists/partial", "state",
                    "cache/archives/partial", "debs"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        (d / "state" / "status").write_text("")
        for f in (d / "sources").glob("*"):
            f.unlink()
        for name, text in sources.items():
            (d / "sources" / name).write_text(text)
        what = " ".join([self.debian_arch, *([self.suite] if self.suite
                                              else []), *self.extra_suites])
        report(f"fetching the {what} package lists "
               f"(private apt directory {d})")
        proc = run(["apt-get", "update", "-q", *self.options()],
                   f"cannot fetch {what} package lists",
                   "check network access to the Debian mirror and retry",
                   check=False)
        if proc.returncode != 0:
            broken = broken_indexes(proc.stdout + "\n" + proc.stderr)
            for line in broken:
                report(f"apt could not fetch an index: {line}")
            lacking = self.suites_without_lists()
            if lacking:
                mine = [l for l in broken
                        if any(f"/{s} " in l or f"/{s}/" in l or
                               f" {s} " in l for s in lacking)]
                raise ImageError(f"cannot fetch the {' and '.join(lacking)} "
                                 f"{self.debian_arch} package index "
                                 f"(packages the recipe takes from "
                                 f"{' and '.join(lacking)})",
                                 (mine or broken or [
                                     f"apt-get update exited with "
                                     f"{proc.returncode}"])[-1],
                                 "retry later (a mirror mid-sync serves "
                                 "again within hours)",
                                 details=proc.stderr.strip())
            if not self.has_lists():
                raise ImageError(f"cannot fetch {what} package lists",
                                 (broken or [f"apt-get update exited with "
                                             f"{proc.returncode}"])[-1],
                                 "check network access to the Debian mirror "
                                 "and retry (a mirror mid-sync serves again "
                                 "within hours)",
                                 details=proc.stderr.strip())
        os.utime(lists)


def for_arch(arch: Arch, suite: str | None = None,
             pins: tuple[tuple[str, str], ...] = ()) -> AptContext:
    """The host's apt for the host's architecture and release, else a
    private one (per architecture and suites)."""
    if arch.runs_on_host() and suite is None and not pins:
        return AptContext(arch.debian_arch)
    sub = arch.debian_arch + (f"-{suite}" if suite else "") + \
        "".join(f"+{s}" for s in sorted({s for _p, s in pins}))
    return AptContext(arch.debian_arch, cache_dir() / "apt" / sub, suite,
                      pins)


def for_recipe(recipe, packages: list[str] | None = None) -> AptContext:
    """The apt context of a recipe (image/recipe.py): its architecture's,
    for its suite, with the suites its ``package_suites`` name for the
    packages it installs (``packages``: those instead of its own; perf
    and the tools when they come from .debs), all of them pinned once
    one is installed; an image without them keeps the plain context."""
    wanted = list(recipe.packages if packages is None else packages)
    if recipe.userland_from_debs():     # perf and the tools: .debs too
        wanted += [recipe.perf_package] + [t.package for t in recipe.tools]
    pins = tuple(sorted(recipe.package_suites.items())) \
        if any(p in recipe.package_suites for p in wanted) else ()
    return for_arch(arches.get(recipe.arch), recipe.suite, pins)
