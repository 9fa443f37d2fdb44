"""Which apt answers for a guest architecture's packages.

The host's own architecture: the host's apt (its lists, ``apt-get
update`` by setup.sh).  Another architecture: a private apt directory
``<cache>/apt/<debian arch>/`` with its own lists, archive cache and an
EMPTY dpkg status, so that nothing of the host's apt state is read or
written besides its configuration (keys, proxies, preferences).  Its
sources are the host's own ``deb`` entries (Types: deb only, so that an
update fetches Packages files and no Sources): the same mirrors and
suites the host uses, for the guest's architecture.

The private lists are fetched by the first build (``apt-get update``,
~1.5 s, 10 MB) and again whenever the host's lists are newer (the host
was updated: the guest follows it) or the derived sources changed.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..arch import Arch
from ..errors import ImageError
from ..paths import cache_dir
from .host import run
from .memo import stat_key

HOST_SOURCE_LIST = Path("/etc/apt/sources.list")
HOST_SOURCE_PARTS = Path("/etc/apt/sources.list.d")
HOST_LISTS = Path("/var/lib/apt/lists")


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


@dataclass(frozen=True)
class AptContext:
    debian_arch: str
    directory: Path | None = None      # None: the host's own apt

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
        return [self.debian_arch, stat_key(self.directory / "lists"),
                stat_key(self.directory / "sources")]

    def has_lists(self) -> bool:
        return self.directory is None or any(
            (self.directory / "lists").glob("*_Packages*"))

    def ensure_lists(self, report: Callable[[str], None]) -> None:
        """Fetch the private lists if missing, older than the host's, or
        from other sources (no-op for the host's apt)."""
        if self.directory is None:
            return
        d = self.directory
        sources = host_sources()
        if not sources:
            raise ImageError(f"cannot fetch {self.debian_arch} package lists",
                             "the host's apt has no deb sources",
                             "configure /etc/apt/sources.list.d")
        current = {f.name: f.read_text() for f in (d / "sources").glob("*")} \
            if (d / "sources").is_dir() else {}
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
        report(f"fetching the {self.debian_arch} package lists "
               f"(private apt directory {d})")
        run(["apt-get", "update", "-q", *self.options()],
            f"cannot fetch {self.debian_arch} package lists",
            "check network access to the Debian mirror and retry")
        os.utime(lists)


def for_arch(arch: Arch) -> AptContext:
    """The host's apt for the host's architecture, else a private one."""
    if arch.runs_on_host():
        return AptContext(arch.debian_arch)
    return AptContext(arch.debian_arch,
                      cache_dir() / "apt" / arch.debian_arch)
