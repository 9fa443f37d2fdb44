"""scripts/build-qemu.sh and `pvperf profile --qemu DIR` (opt-in, long:
the first build of qemu-system-x86_64 takes most of an hour on 2 shared
cores; docs/guide.md, "A QEMU with symbols"):

  PVPERF_SLOW=1 .venv/bin/python -m pytest tests/vm/test_qemu_build.py

The build is QEMU's own (Debian's source package of the installed
version), with symbols and frame pointers; the references are its ELF
symbol table, read by `nm`, and QEMU's source for which helper TCG calls:

* at least 95 % of the emulator's samples in the profile of
  tests/guest_programs/divadd.c are named functions (not FILE!0x...),
  where Debian's stripped binary names far fewer;
* every emulator sample named is a function `nm` lists in the binary;
* the `div` loop's emulator work on its behalf is mostly the division
  helper: helper_divq_EAX (target/i386/tcg/int_helper.c, which TCG's
  x86_64 front end calls for a 64-bit div) and what it calls.
"""
from __future__ import annotations

import json
import subprocess
from collections import Counter

import pytest

from support import PROGRAMS, REPO, run_pvperf
from test_profile import CFLAGS

pytestmark = [pytest.mark.vm, pytest.mark.slow]

N = "20000"


@pytest.fixture(scope="module")
def qemu_dir():
    r = subprocess.run(["nice", str(REPO / "scripts" / "build-qemu.sh"),
                        "x86_64"], capture_output=True, text=True,
                       timeout=4 * 3600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    (build,) = (REPO / "build" / "qemu").glob("*/build")
    assert "version 10." in subprocess.run(
        [str(build / "qemu-system-x86_64"), "--version"],
        capture_output=True, text=True, check=True).stdout
    return build


def test_emulator_functions_are_named(qemu_dir, tmp_path):
    share = tmp_path / "share"
    share.mkdir()
    subprocess.run(["gcc", *CFLAGS, f"-I{PROGRAMS}", "-o",
                    str(share / "divadd"), str(PROGRAMS / "divadd.c")],
                   check=True)
    out = tmp_path / "prof"
    r = run_pvperf(["profile", "--qemu", str(qemu_dir), "--output", str(out),
                    "--share", str(share), "--", "./divadd", N], timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    session = json.loads((out / "session.json").read_text())
    assert str(qemu_dir) in session["meta"]["target"] or \
        "qemu-system-x86_64" in session["meta"]["target"]
    qemu_bin = str((qemu_dir / "qemu-system-x86_64").resolve())
    emu = [s for s in session["samples"] if s["space"] == "emulator"
           and not s["symbol"].startswith("[host kernel]")
           and not s.get("code_cache")]
    assert len(emu) > 200, len(emu)
    named = [s for s in emu if "!" not in s["symbol"]]
    assert len(named) >= 0.95 * len(emu), Counter(
        s["symbol"] for s in emu if "!" in s["symbol"]).most_common(10)
    nm = subprocess.run(["nm", "--defined-only", qemu_bin],
                        capture_output=True, text=True, check=True).stdout
    symbols = {line.split()[-1] for line in nm.splitlines()}
    in_qemu = [s["symbol"] for s in named if s["dso"] == qemu_bin]
    assert in_qemu and all(sym.split("+")[0] in symbols for sym in in_qemu)
    behalf = Counter(s["symbol"] for s in session["samples"]
                     if (s.get("behalf") or {}).get("symbol") == "divide")
    division = sum(n for sym, n in behalf.items() if "div" in sym)
    assert division >= 0.5 * sum(behalf.values()), behalf.most_common(10)
