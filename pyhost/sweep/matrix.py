"""An experiment matrix (``pvperf sweep MATRIX.toml``): parsed, checked
and expanded into cells, before any VM starts.

The file (TOML; docs/sweep.md has a full example)::

  events = ["instructions:u", "L1-dcache-load-misses:u"]   # perf stat -e
  share = "tests/guest_programs"   # the guest's working directory
                                   # (relative to this file; default: its
                                   # directory)
  smp = [1, 2]                     # an axis (default [1])
  arch = [...]                     # an axis: guest architectures, as
                                   # --arch names them
                                   # (default: the host's); "default" is
                                   # each one's own image
  timeout = 600                    # seconds per cell (optional)
  image = "default"                # guest image (optional)

  [[workload]]                     # axis: name + command (required)
  name = "stream"
  command = "./memwalk 0 1"        # {arch}: the cell's architecture

  [[model]]                        # axis (default: one, "default")
  name = "compat-16k"
  cachegrind_compat = true
  D1 = "16384,4,64"                # I1 D1 LL iTLB dTLB: as `pvperf run`
  timing = false
  penalties = "L1=10,LL=200"      # as `pvperf run --penalties`

  [[qemu]]                         # axis (default: one, "default")
  name = "icount"
  deterministic = true
  mem = "512M"
  tcg = "tb-size=64,one-insn-per-tb=on"   # as `pvperf run --tcg`: the
                                   # translator as an experiment's axis
  dir = "build/qemu/VER/build"     # as `pvperf run --qemu`: another QEMU

Cells are the cartesian product workload x model x smp x qemu x arch, in
that order.  Each has a readable name (the axis entries' names; the
architecture's only where it is not the host's) and an id: a hash of
everything that decides its result, so a cell whose settings change is
run again even under the same names.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from .. import arch as arches
from ..arch.base import MAX_SMP
from ..errors import PvperfError
from ..pmu import geometry
from ..vm.qemu import parse_tcg_options

TOP_KEYS = {"events", "share", "smp", "arch", "timeout", "image",
            "workload", "model", "qemu"}
WORKLOAD_KEYS = {"name", "command"}
GEOMETRY_KEYS = {"I1": geometry.parse_geometry, "D1": geometry.parse_geometry,
                 "LL": geometry.parse_geometry, "iTLB": geometry.parse_tlb,
                 "dTLB": geometry.parse_tlb}
MODEL_KEYS = {"name", "cachegrind_compat", "timing", "penalties",
              *GEOMETRY_KEYS}
QEMU_KEYS = {"name", "deterministic", "mem", "tcg", "dir"}
NAME = re.compile(r"[A-Za-z0-9_.+-]{1,40}")


class MatrixError(PvperfError):
    """A matrix file that cannot be run, with where and why."""

    def __init__(self, where: str, cause: str):
        super().__init__(where, cause, "see docs/sweep.md for the format")


@dataclass(frozen=True)
class Cell:
    """One run: a workload under one model, smp and QEMU setting."""
    workload: dict
    model: dict
    smp: int
    qemu: dict
    events: tuple[str, ...]
    image: str
    timeout: float | None
    share: Path = field(compare=False)
    arch: str = field(default_factory=lambda: arches.host().name)

    @property
    def foreign(self) -> bool:
        """A guest of another architecture than the host's."""
        return self.arch != arches.host().name

    @property
    def name(self) -> str:
        return (f"{self.workload['name']}.{self.model['name']}."
                f"smp{self.smp}.{self.qemu['name']}" +
                (f".{self.arch}" if self.foreign else ""))

    def settings(self) -> dict:
        """Everything that decides the result (what the id hashes; the
        host's own architecture is left out, so that the ids of matrices
        from before the arch axis stay as they were)."""
        return {"workload": self.workload, "model": self.model,
                "smp": self.smp, "qemu": self.qemu,
                "events": list(self.events), "image": self.image,
                **({"arch": self.arch} if self.foreign else {})}

    @property
    def id(self) -> str:
        text = json.dumps(self.settings(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    @property
    def dirname(self) -> str:
        return f"{self.name}-{self.id}"

    def pvperf_args(self, json_out: Path) -> list[str]:
        """`pvperf stat` arguments that run this cell."""
        m, q = self.model, self.qemu
        args = ["stat", "--json", str(json_out), "--share", str(self.share),
                "--smp", str(self.smp), "--arch", self.arch,
                "--image", self.image,
                "-e", ",".join(self.events)]
        for key in GEOMETRY_KEYS:
            if key in m:
                args += [f"--{key}", m[key]]
        if m.get("cachegrind_compat"):
            args.append("--cachegrind-compat")
        if m.get("timing"):
            args.append("--timing")
        if m.get("penalties"):
            args += ["--penalties", m["penalties"]]
        if q.get("deterministic"):
            args.append("--deterministic")
        if "mem" in q:
            args += ["--mem", q["mem"]]
        if q.get("tcg"):
            args += ["--tcg", q["tcg"]]
        if q.get("dir"):
            args += ["--qemu", q["dir"]]
        if self.timeout is not None:
            args += ["--timeout", str(self.timeout)]
        command = self.workload["command"].replace("{arch}", self.arch)
        return args + ["--", *command.split()]


@dataclass
class Matrix:
    path: Path
    cells: list[Cell]


def _keys(where: str, table: dict, allowed: set[str],
          required: set[str] = frozenset()) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise MatrixError(where, f"unknown key {unknown[0]!r} (allowed: "
                          f"{', '.join(sorted(allowed))})")
    missing = sorted(required - set(table))
    if missing:
        raise MatrixError(where, f"missing key {missing[0]!r}")


def _axis(doc: dict, key: str, check, default: list) -> list:
    """A non-empty list of checked entries with unique names."""
    entries = doc.get(key, default)
    if not isinstance(entries, list) or not entries:
        raise MatrixError(key, "must be a non-empty list")
    out, names = [], set()
    for i, entry in enumerate(entries):
        where = f"{key}[{i}]"
        entry = check(where, entry)
        name = entry.get("name", entry) if isinstance(entry, dict) else entry
        if name in names:
            raise MatrixError(where, f"name {name!r} used twice")
        names.add(name)
        out.append(entry)
    return out


def _name(where: str, entry: dict) -> None:
    if not isinstance(entry.get("name"), str) or \
            not NAME.fullmatch(entry["name"]):
        raise MatrixError(where, "name must be 1-40 of A-Z a-z 0-9 _ . + -")


def _table(where: str, entry, allowed: set[str],
           required: set[str]) -> dict:
    """An axis entry: a table with known keys and a valid name."""
    if not isinstance(entry, dict):
        need = ", ".join(sorted(required))
        raise MatrixError(where, f"must be a table ({need} required)")
    _keys(where, entry, allowed, required)
    _name(where, entry)
    return dict(entry)


def _flags(where: str, entry: dict, keys: tuple[str, ...]) -> None:
    for key in keys:
        if not isinstance(entry.get(key, False), bool):
            raise MatrixError(f"{where}.{key}", "must be true or false")


def _workload(where: str, entry) -> dict:
    entry = _table(where, entry, WORKLOAD_KEYS, WORKLOAD_KEYS)
    if not isinstance(entry["command"], str) or not entry["command"].split():
        raise MatrixError(where, "command must be a non-empty string")
    return entry


def _model(where: str, entry) -> dict:
    """Geometries normalised as `pvperf run` spells them; penalties as
    its --penalties."""
    entry = _table(where, entry, MODEL_KEYS, {"name"})
    _flags(where, entry, ("cachegrind_compat", "timing"))
    for key, parse in (*GEOMETRY_KEYS.items(),
                       ("penalties", geometry.parse_penalties)):
        if key in entry:
            try:
                parsed = parse(str(entry[key]))
            except ValueError as e:
                raise MatrixError(f"{where}.{key}", str(e)) from None
            if key != "penalties":
                entry[key] = str(parsed)
    return entry


def _qemu(where: str, entry) -> dict:
    entry = _table(where, entry, QEMU_KEYS, {"name"})
    _flags(where, entry, ("deterministic",))
    if "mem" in entry and not re.fullmatch(r"\d+[MG]", str(entry["mem"])):
        raise MatrixError(f"{where}.mem", "must be like 512M or 2G")
    if "tcg" in entry:
        try:
            parse_tcg_options(str(entry["tcg"]))
        except ValueError as e:
            raise MatrixError(f"{where}.tcg", str(e)) from e
    if "dir" in entry and not Path(str(entry["dir"])).is_dir():
        raise MatrixError(f"{where}.dir", "must be a directory holding "
                          "qemu-system-ARCH (scripts/build-qemu.sh)")
    return entry


def _smp(where: str, entry) -> int:
    if not isinstance(entry, int) or isinstance(entry, bool) or \
            not 1 <= entry <= MAX_SMP:
        raise MatrixError(where, f"must be a number of vCPUs, 1..{MAX_SMP}")
    return entry


def _arch(where: str, entry) -> str:
    if entry not in arches.ARCHES:
        raise MatrixError(where, "must be one of "
                          f"{', '.join(sorted(arches.ARCHES))}")
    return entry


def load(path: Path) -> Matrix:
    """Read, check and expand ``path``; MatrixError on anything wrong."""
    try:
        doc = tomllib.loads(path.read_text())
    except OSError as e:
        raise MatrixError(str(path), e.strerror or str(e)) from None
    except tomllib.TOMLDecodeError as e:
        raise MatrixError(str(path), f"not TOML: {e}") from None
    _keys(str(path), doc, TOP_KEYS, {"events", "workload"})
    events = doc["events"]
    if not isinstance(events, list) or not events or \
            not all(isinstance(e, str) and e and "," not in e
                    for e in events):
        raise MatrixError("events", "must be a non-empty list of perf "
                          "event names (one per string)")
    share = (path.parent / doc.get("share", ".")).resolve()
    if not share.is_dir():
        raise MatrixError("share", f"{share} is not a directory")
    timeout = doc.get("timeout")
    if timeout is not None and (not isinstance(timeout, (int, float)) or
                                timeout <= 0):
        raise MatrixError("timeout", "must be a positive number of seconds")
    image = doc.get("image", "default")
    if not isinstance(image, str) or not NAME.fullmatch(image):
        raise MatrixError("image", "must be an image name")
    axes = (_axis(doc, "workload", _workload, []),
            _axis(doc, "model", _model, [{"name": "default"}]),
            _axis(doc, "smp", _smp, [1]),
            _axis(doc, "qemu", _qemu, [{"name": "default"}]),
            _axis(doc, "arch", _arch, [arches.host().name]))
    for m, s, q, _ in itertools.product(*axes[1:]):
        if q.get("deterministic") and s != 1:
            raise MatrixError(f"qemu {q['name']!r}", "deterministic runs "
                              "need smp 1 (docs/determinism.md)")
    cells = [Cell(w, m, s, q, tuple(events), image, timeout, share, a)
             for w, m, s, q, a in itertools.product(*axes)]
    return Matrix(path, cells)
