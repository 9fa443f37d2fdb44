"""The plugin's riscv64 instruction classifier (qemu_plugin/arch/riscv64.c)
against the disassembler over real code: every instruction of the
riscv64 guest's libc, busybox and perf, as the riscv64 image carries them
(unpacked from its Debian trixie packages), classified as
riscv64-linux-gnu-objdump's listing (-M no-aliases) says: branch or not,
conditional, indirect (jalr), call and return forms, memory access,
compressed or not (qemu_plugin/tests/rv64_classify_test.c --corpus, what
`make -C qemu_plugin rv-corpus RV_CORPUS=FILE` runs; here the listing
goes to the test's own directory).  No guest boots; the image is built
if missing (its build boots it once).  ~3 s of CPU per file.
"""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from support import make, REPO, run_pvperf

OBJDUMP = "riscv64-linux-gnu-objdump"
PLUGIN = REPO / "qemu_plugin"
# The files, by guest path (the image's root holds them as the guest does;
# trixie's libc6 is /usr-merged: /lib/riscv64-linux-gnu is /usr's).
CORPUS = {"libc": "usr/lib/riscv64-linux-gnu/libc.so.6",
          "busybox": "bin/busybox",
          "perf": "usr/bin/perf"}
SUMMARY = re.compile(r": (\d+) instructions \((\d+) compressed\): (\d+) "
                     r"branches \((\d+) conditional, (\d+) indirect\), (\d+) "
                     r"memory; (\d+) disagree with objdump; (\d+) words")

pytestmark = [
    pytest.mark.skipif(shutil.which(OBJDUMP) is None,
                       reason=f"{OBJDUMP} missing (binutils-riscv64-linux-gnu"
                       "; scripts/setup.sh installs it)"),
    pytest.mark.skipif(os.environ.get("PVPERF_SKIP_VM") == "1",
                       reason="PVPERF_SKIP_VM=1 is set (the riscv64 image)"),
]


@pytest.fixture(scope="module")
def root() -> Path:
    """The riscv64 image's root tree (built if missing or out of date)."""
    r = run_pvperf(["image", "build", "--arch", "riscv64"], timeout=1200)
    assert r.returncode == 0, r.stderr[-2000:]
    r = run_pvperf(["image", "status", "--arch", "riscv64"])
    assert r.returncode == 0 and "up to date" in r.stdout, r.stdout
    return Path(r.stdout.split("(", 1)[1].rstrip(")\n")) / "root"


@pytest.fixture(scope="module")
def classify() -> Path:
    make(PLUGIN, "-s", "tests/rv64_classify_test", check=True)
    return PLUGIN / "tests" / "rv64_classify_test"


def resolved(root: Path, guest: str) -> Path:
    """The file behind a guest path, /usr twin included (a /usr-merged
    tree without base-files' /lib link)."""
    for cand in (guest, guest.removeprefix("usr/"), "usr/" + guest):
        if (root / cand).exists():
            return (root / cand).resolve()
    raise AssertionError(f"{guest} is not in the riscv64 image's root")


def is_vector(word: int) -> bool:
    """An RVV encoding: major opcode OP-V, or LOAD-FP/STORE-FP with a
    vector width (funct3 0, 5, 6, 7; the scalar FP widths are 1-4)."""
    opcode, width = word & 0x7F, (word >> 12) & 0x7
    return opcode == 0x57 or (opcode in (0x07, 0x27) and width in (0, 5, 6, 7))


@pytest.mark.parametrize("name", CORPUS)
def test_every_instruction_is_classified_as_objdump_says(root, classify,
                                                         name, tmp_path):
    binary = resolved(root, CORPUS[name])
    listing = tmp_path / f"{name}.lst"
    with listing.open("w") as out:
        subprocess.run([OBJDUMP, "-d", "-M", "no-aliases", str(binary)],
                       stdout=out, check=True)
    r = subprocess.run([str(classify), "--corpus", str(listing)],
                       capture_output=True, text=True, timeout=300)
    disagreements = r.stdout + r.stderr
    m = SUMMARY.search(r.stdout)
    assert m, disagreements[-3000:]
    print(f"\n{name}: {m.group(0)}")
    (insns, compressed, branches, cond, indirect, memory, wrong,
     undecoded) = map(int, m.groups())
    assert (r.returncode, wrong) == (0, 0), disagreements[-3000:]
    # objdump decodes every word of these (no data in .text) but the
    # vector instructions of sid's glibc 2.43 (string functions it picks
    # only on a hart with V: the image's has none, docs/architectures.md),
    # which binutils 2.40 prints as .4byte: nothing else was skipped
    words = [int(w, 16) for w in
             re.findall(r"\t\.4byte\t0x([0-9a-f]+)", listing.read_text())]
    assert len(words) == undecoded, (words, disagreements[-3000:])
    assert all(is_vector(w) for w in words), [hex(w) for w in words]
    # real code of each kind, not an empty or truncated listing
    assert insns > 100_000 and 0 < compressed < insns
    assert 0 < indirect < cond < branches and memory > insns // 5
