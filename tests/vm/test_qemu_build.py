"""scripts/build-qemu.sh and `pvperf profile --qemu DIR`, on every guest
architecture (opt-in, long: the first build of the three targets took
50 minutes on 2 shared cores; docs/guide.md, "A QEMU with symbols"):

  PVPERF_SLOW=1 .venv/bin/python -m pytest tests/vm/test_qemu_build.py

(PVPERF_GUEST_ARCHES=aarch64,riscv64 builds and checks those targets
only.)

The build is QEMU's own (Debian's source package of the installed
version), qemu-system-x86_64, -aarch64 and -riscv64 in one tree, with
symbols and frame pointers; build-times.txt records each target's time
and size.  The references are the binary's ELF symbol table, read by
`nm`, QEMU's source for which helper TCG calls, and the guest programs'
own symbol tables and instruction counts:

* at least 95 % of the emulator's samples are named functions (not
  FILE!0x...), where Debian's stripped binary names far fewer; every
  emulator sample named in the built binary is a function `nm` lists in
  it;
* translated code still resolves to guest functions (>= 95 % of the
  code-cache samples) with a QEMU that is not the installed one:
  x86_64 profiles tests/guest_programs/divadd.c, whose `div` loop's
  emulator work on its behalf is mostly the division helper:
  helper_divq_EAX (target/i386/tcg/int_helper.c, which TCG's x86_64
  front end calls for a 64-bit div) and what it calls; arm64 and riscv64
  profile their hotcold.c (test_profile.py), whose hot/(hot+cold) must be
  the analytic split of their instruction counts within 3 points and
  whose samples named hot or cold lie in that function (the guest's
  `nm`).  riscv64's virt machine boots through OpenSBI, which the built
  QEMU, having no firmware of its own, finds where the installed one does
  (`-L`, pyhost/cli/options.py).
"""
from __future__ import annotations

import json
import shutil
import subprocess
from collections import Counter

import pytest

from support import PROGRAMS, REPO, Guest, guest_arches_wanted, on, \
    run_pvperf
from test_profile import CFLAGS, COLD_INSNS, HOT_INSNS, hot_share, \
    nm_ranges, resolution_rate

# host_timing: the named share and hot/(hot+cold) are shares of the
# host's profile of QEMU, which another guest on the next core disturbs
pytestmark = [pytest.mark.vm, pytest.mark.slow, pytest.mark.host_timing]

X86, ARM64, RV64 = Guest("x86_64"), Guest("aarch64"), Guest("riscv64")
TARGETS = ("x86_64", "aarch64", "riscv64")
# Each guest's program and argument: x86_64's divadd (a helper-heavy
# function beside a plain one), the others' hotcold (arm64's and
# riscv64's argument as in test_profile.py: > 500 code-cache samples).
PROGRAM = {"x86_64": ("divadd", "20000"), "aarch64": ("hotcold", "150000"),
           "riscv64": ("hotcold", "150000")}


@pytest.fixture(scope="module")
def qemu_dir():
    """The build tree, with the targets of the guests that run built
    (PVPERF_GUEST_ARCHES=aarch64: that one alone)."""
    targets = [t for t in TARGETS if t in guest_arches_wanted()]
    r = subprocess.run(["nice", str(REPO / "scripts" / "build-qemu.sh"),
                        *targets], capture_output=True, text=True,
                       timeout=6 * 3600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    print(r.stdout)
    (build,) = (REPO / "build" / "qemu").glob("*/build")
    for t in targets:
        assert "version 10." in subprocess.run(
            [str(build / f"qemu-system-{t}"), "--version"],
            capture_output=True, text=True, check=True).stdout
    # each target's time and size recorded (" x86_64-softmmu: ": a line
    # of the script before it built targets one by one)
    times = (build.parent / "build-times.txt").read_text()
    assert all(f" qemu-system-{t} " in times or f" {t}-softmmu: " in times
               for t in targets), times
    print(times)
    return build


@pytest.fixture(scope="module")
def guest(request, tmp_path_factory):
    """A support.Guest, its image's options (the foreign ones' driver
    built) and a share holding its program."""
    g = request.param
    share = tmp_path_factory.mktemp(f"share-{g}")
    name, _ = PROGRAM[g.arch]
    if g.arch == "x86_64":
        subprocess.run(["gcc", *CFLAGS, f"-I{PROGRAMS}", "-o",
                        str(share / name), str(PROGRAMS / f"{name}.c")],
                       check=True)
    else:
        shutil.copy(g.a.build() / name, share / name)
    return g, g.a.image(), share


def emulator_samples(session: dict) -> list[dict]:
    """The emulator's user-space samples outside the code cache."""
    return [s for s in session["samples"] if s["space"] == "emulator"
            and not s["symbol"].startswith("[host kernel]")
            and not s.get("code_cache")]


def divide_behalf(session: dict, summary: dict, share) -> None:
    behalf = Counter(s["symbol"] for s in session["samples"]
                     if (s.get("behalf") or {}).get("symbol") == "divide")
    division = sum(n for sym, n in behalf.items() if "div" in sym)
    assert division >= 0.5 * sum(behalf.values()), behalf.most_common(10)
    print(f"divide()'s emulator work: {behalf.most_common(4)}")


def hotcold_resolves(guest: Guest):
    def check(session: dict, summary: dict, share) -> None:
        reference = HOT_INSNS / (HOT_INSNS + COLD_INSNS)
        share_hot = hot_share(summary["guest_only"])
        assert abs(share_hot - reference) <= 0.03, (share_hot, reference)
        ranges = nm_ranges(guest, share / "hotcold")
        for s in session["samples"]:
            if s.get("resolved") and s["symbol"] in ("hot", "cold"):
                lo, hi = ranges[s["symbol"]]
                assert lo <= s["guestpc"] < hi, (s["symbol"],
                                                 hex(s["guestpc"]))
        print(f"hot/(hot+cold) {100 * share_hot:.1f}% (analytic "
              f"{100 * reference:.1f}%)")
    return check


GUEST_CHECK = {"x86_64": divide_behalf, "aarch64": hotcold_resolves(ARM64),
               "riscv64": hotcold_resolves(RV64)}


@on(X86, ARM64, RV64)
def test_emulator_functions_are_named(qemu_dir, guest, tmp_path):
    g, image, share = guest
    name, n = PROGRAM[g.arch]
    out = tmp_path / "prof"
    r = run_pvperf(["profile", *image, "--qemu", str(qemu_dir), "--output",
                    str(out), "--share", str(share), "--", f"./{name}", n],
                   timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    session = json.loads((out / "session.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    qemu_bin = str((qemu_dir / f"qemu-system-{g.arch}").resolve())
    assert f"qemu-system-{g.arch} " in session["meta"]["target"]
    emu = emulator_samples(session)
    assert len(emu) > 200, len(emu)
    named = [s for s in emu if "!" not in s["symbol"]]
    unnamed = Counter(s["dso"].rsplit("/", 1)[-1] for s in emu
                      if "!" in s["symbol"])
    print(f"{g.arch}: {len(named)} of {len(emu)} emulator samples named "
          f"({100 * len(named) / len(emu):.1f} %); unnamed per file: "
          f"{dict(unnamed)}")
    assert len(named) >= 0.95 * len(emu), Counter(
        s["symbol"] for s in emu if "!" in s["symbol"]).most_common(10)
    nm = subprocess.run(["nm", "--defined-only", qemu_bin],
                        capture_output=True, text=True, check=True).stdout
    symbols = {line.split()[-1] for line in nm.splitlines()}
    # the built binary ran (not the installed one the arch names)
    in_qemu = [s["symbol"] for s in named if s["dso"] == qemu_bin]
    assert in_qemu and all(sym.split("+")[0] in symbols for sym in in_qemu)
    rate = resolution_rate(summary)
    print(f"{g.arch}: {100 * rate:.1f} % of {summary['samples_code_cache']} "
          f"code-cache samples resolved to guest code")
    assert rate >= 0.95, rate
    GUEST_CHECK[g.arch](session, summary, share)
