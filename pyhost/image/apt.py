"""Debian packages: candidate versions from the local apt lists
(``apt-cache``; no network), downloads (``apt-get download``, verified
against apt's SHA-256) and unpacking (``dpkg-deb -x``).  Nothing is
installed on the host.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from ..errors import ImageError
from ..digest import sha256_file
from .aptdir import AptContext
from .host import run
from .memo import memoized

#: The host's own apt (callers that name no context).
HOST_APT = None


def _ctx(ctx: AptContext | None) -> list[str]:
    return ctx.options() if ctx is not None else []

_APT_HINT = ("run `apt-get update` (the apt lists are empty or stale), "
             "then retry")


def parse_apt_records(text: str) -> list[dict[str, str]]:
    """Records of ``apt-cache show`` (RFC 822 stanzas, blank-line separated;
    continuation lines are dropped, no field used here has them)."""
    records, cur = [], {}
    for line in text.splitlines():
        if not line.strip():
            if cur:
                records.append(cur)
            cur = {}
        elif not line[0].isspace() and ":" in line:
            key, value = line.split(":", 1)
            cur[key] = value.strip()
    if cur:
        records.append(cur)
    return records


def kernel_from_depends(depends: str) -> tuple[str, str | None] | None:
    """(package, pinned version or None) of the first linux-image-*
    alternative in a Depends field."""
    for alt in re.split(r"[,|]", depends):
        m = re.match(r"\s*(linux-image-[^\s(]+)\s*(?:\(\s*=\s*([^)\s]+)\s*\))?",
                     alt)
        if m:
            return m.group(1), m.group(2)
    return None


def release_options(release: str | None) -> list[str]:
    """apt options that make ``release``'s versions the candidates (as
    ``-t RELEASE`` does); none for None."""
    return ["-o", f"APT::Default-Release={release}"] if release else []


def apt_show(packages: list[str], ctx: AptContext | None = HOST_APT,
             release: str | None = None) -> dict[str, dict[str, str]]:
    """Candidate records (``apt-cache show --no-all-versions``), of
    ``release`` if one is given."""
    proc = run(["apt-cache", *_ctx(ctx), *release_options(release), "show",
                "--no-all-versions", *packages],
               "cannot resolve Debian package versions", _APT_HINT,
               check=False)
    found = {r["Package"]: r for r in parse_apt_records(proc.stdout)
             if "Package" in r and "Version" in r}
    missing = [p for p in packages if p not in found]
    if missing:
        raise ImageError("cannot resolve Debian package versions",
                         "apt knows no installable version of "
                         + ", ".join(missing)
                         + (f" in {release}" if release else ""), _APT_HINT,
                         details=proc.stderr.strip())
    return found


def resolve_packages(kernel_meta: str, others: list[str],
                     ctx: AptContext | None = HOST_APT,
                     kernel_release: str | None = None
                     ) -> tuple[str, dict[str, str]]:
    """(concrete kernel package, {package: candidate version}) from the
    local apt lists; no network.  The kernel's versions are
    ``kernel_release``'s when one is given.  Memoized per apt state."""
    key = ctx.memo_key() if ctx is not None else []
    kpkg, versions = memoized(["versions", kernel_meta, *others, *key,
                               *release_options(kernel_release)],
                              lambda: _resolve_packages(kernel_meta, others,
                                                        ctx, kernel_release))
    return kpkg, versions


def _resolve_packages(kernel_meta: str, others: list[str],
                      ctx: AptContext | None, release: str | None = None
                      ) -> tuple[str, dict[str, str]]:
    records = apt_show(others, ctx) if others else {}
    versions = {p: records[p]["Version"] for p in others}
    records.update(apt_show([kernel_meta], ctx, release))
    hit = kernel_from_depends(records[kernel_meta].get("Depends", ""))
    if hit is None:
        if not re.search(r"\d", kernel_meta):
            raise ImageError(f"cannot resolve the kernel package {kernel_meta}",
                             "it depends on no linux-image-* package",
                             "name a kernel (meta)package in the recipe")
        kpkg, kver = kernel_meta, records[kernel_meta]["Version"]
    else:
        kpkg, kver = hit
        if kver is None:
            kver = apt_show([kpkg], ctx, release)[kpkg]["Version"]
    versions[kpkg] = kver
    return kpkg, versions


def deb_filename(pkg: str, version: str) -> str:
    return f"{pkg}_{version.replace(':', '%3a')}_"


def apt_sha256(pkg: str, version: str, ctx: AptContext | None = HOST_APT
               ) -> str | None:
    out = run(["apt-cache", *_ctx(ctx), "show", f"{pkg}={version}"],
              f"cannot look up {pkg} {version}", _APT_HINT).stdout
    m = re.search(r"^SHA256:\s*([0-9a-f]{64})", out, re.M)
    return m.group(1) if m else None


def fetch_deb(pkg: str, version: str, debs: Path,
              ctx: AptContext | None = HOST_APT) -> Path:
    """``apt-get download`` a package version into ``debs`` (cached and
    verified against apt's SHA-256)."""
    debs.mkdir(parents=True, exist_ok=True)
    want = apt_sha256(pkg, version, ctx)
    prefix = deb_filename(pkg, version)
    for f in sorted(debs.glob(prefix + "*.deb")):
        if want is None or sha256_file(f) == want:
            return f
        f.unlink()                           # truncated or corrupt
    tmp = Path(tempfile.mkdtemp(prefix=".download-", dir=debs))
    try:
        run(["apt-get", *_ctx(ctx), "download", f"{pkg}={version}"],
            f"cannot download {pkg} {version}",
            "check network access to the Debian mirror, or run "
            "`apt-get update` if the version is no longer on it", cwd=tmp)
        got = sorted(tmp.glob(prefix + "*.deb"))
        if not got:
            raise ImageError(f"cannot download {pkg} {version}",
                             "apt-get download produced no .deb",
                             "run it by hand to see why")
        if want is not None and sha256_file(got[0]) != want:
            raise ImageError(f"cannot download {pkg} {version}",
                             "SHA-256 mismatch against the apt lists",
                             "run `apt-get update` and retry")
        final = debs / got[0].name
        os.replace(got[0], final)
        return final
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def dpkg_x(deb: Path, dest: Path) -> None:
    run(["dpkg-deb", "-x", str(deb), str(dest)], f"cannot unpack {deb.name}",
        f"delete {deb} so it is downloaded again")

