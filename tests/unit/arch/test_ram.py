"""Guest RAM's layout (pyhost/ram.py) and its C twin
(qemu_plugin/pvperf/ramlayout.c with the plugin's architecture tables):
expected values from QEMU's machines (10.0: hw/i386/pc_piix.c pc_init1
and pc.c pc_memory_init for x86's pc with max-ram-below-4g; hw/arm/virt.c
and hw/riscv/virt.c: one range from the RAM base), then both sides on
the same cases."""
import shutil
import subprocess

import pytest

from pyhost import abi, arch
from pyhost.ram import RamLayout, RamRange
from pyhost.arch.x86_64 import RAM_BELOW_4G

from support import REPO

GiB = 1 << 30
X86 = arch.get("x86_64")
PLUGIN = REPO / "qemu_plugin"


def test_x86_pc_ram_below_the_hole_is_one_range():
    for size in (64 << 20, GiB, 2 * GiB, 3 * GiB):
        assert X86.ram_layout(size).ranges == (RamRange(0, 0, size),)


def test_x86_pc_ram_beyond_3g_continues_at_4g():
    """QEMU's own example, pc_piix.c: `-M pc -m 4G` -> 3072M low, 1024M
    high; the high part is the file from 3 GiB on, mapped at 4 GiB."""
    assert RAM_BELOW_4G == 3 * GiB
    assert X86.machine == f"pc,max-ram-below-4g={3 * GiB}"
    assert X86.ram_layout(4 * GiB).ranges == (
        RamRange(0, 0, 3 * GiB), RamRange(4 * GiB, 3 * GiB, GiB))
    six = X86.ram_layout(6 * GiB)
    assert six.offset(3 * GiB - 8, 8) == 3 * GiB - 8
    assert six.offset(3 * GiB, 1) is None             # the PCI hole
    assert six.offset(4 * GiB - 1, 1) is None
    assert six.offset(4 * GiB, 8) == 3 * GiB
    assert six.offset(7 * GiB - 8, 8) == 6 * GiB - 8
    assert six.offset(7 * GiB - 4, 8) is None         # past the end
    assert six.offset(3 * GiB - 4, 8) is None         # straddles the hole
    assert six.gpa(3 * GiB - 1) == 3 * GiB - 1
    assert six.gpa(3 * GiB) == 4 * GiB
    assert six.gpa(6 * GiB) is None


def test_virt_ram_is_one_range_from_its_base():
    for name, base in (("aarch64", 0x40000000), ("riscv64", 0x80000000)):
        layout = arch.get(name).ram_layout(16 * GiB)
        assert layout.ranges == (RamRange(base, 0, 16 * GiB),)
        assert layout.offset(base - 1) is None
        assert layout.offset(base + 5 * GiB, 4096) == 5 * GiB
        assert layout.gpa(16 * GiB - 1) == base + 16 * GiB - 1


def test_ram_offset_covers_the_largest_ram():
    assert X86.ram_offset(0xbffff000) == 0xbffff000
    assert X86.ram_offset(0xc0000000) is None
    assert X86.ram_offset(0x400000000) == 0x400000000 - GiB
    assert abi.MAX_RAM_MB << 20 >= 16 * GiB


def test_bad_layouts_are_refused():
    for args in ((0, -1), (-1, GiB), (0x80000000, GiB, (0x1000, 0x2000)),
                 (0, GiB, (2 * GiB, GiB))):
        with pytest.raises(ValueError):
            RamLayout(*args)


def cases():
    """(target, size, gpa, len, offset) around every range's edges."""
    out = []
    for name, a in sorted(arch.ARCHES.items()):
        for size in (64 << 20, 2 * GiB, 3 * GiB, 3 * GiB + 4096, 6 * GiB,
                     16 * GiB):
            layout = a.ram_layout(size)
            edges = {0, a.ram_base, 2 ** 64 - 8}
            for r in layout.ranges:
                edges |= {r.gpa, r.gpa + r.size, r.offset,
                          r.offset + r.size}
            for e in sorted(edges):
                for d in (-4096, -8, -1, 0, 1, 4096):
                    if 0 <= e + d < 2 ** 64 - 8:
                        for length in (1, 8, 4096):
                            out.append((name, size, e + d, length, e + d))
    return out


@pytest.fixture(scope="module")
def twin(tmp_path_factory):
    cc = shutil.which("gcc")
    pkg = shutil.which("pkg-config")
    if not cc or not pkg:
        pytest.skip("needs gcc and pkg-config (the C twin)")
    flags = subprocess.run([pkg, "--cflags", "--libs", "glib-2.0", "capstone"],
                           capture_output=True, text=True)
    if flags.returncode:
        pytest.skip(f"pkg-config: {flags.stderr.strip()} (the C twin needs "
                    "glib-2.0 and capstone: scripts/setup.sh)")
    exe = tmp_path_factory.mktemp("twin") / "ramlayout_twin"
    src = [PLUGIN / "tests/ramlayout_twin.c", PLUGIN / "pvperf/ramlayout.c"] \
        + sorted((PLUGIN / "arch").glob("*.c"))
    subprocess.run([cc, "-O2", "-Wall", "-Werror", "-I", PLUGIN / "arch",
                    "-I", PLUGIN / "pvperf", "-I", REPO / "contracts",
                    "-o", exe, *src, *flags.stdout.split()], check=True)
    return exe


def test_c_twin_maps_as_python_does(twin):
    todo = cases()
    r = subprocess.run([twin], input="".join(
        f"{t} {s:x} {g:x} {n:x} {o:x}\n" for t, s, g, n, o in todo),
        capture_output=True, text=True, check=True)
    got = r.stdout.splitlines()
    assert len(got) == len(todo)
    hits = 0
    for (name, size, gpa, length, offset), line in zip(todo, got):
        layout = arch.get(name).ram_layout(size)
        want_off, want_gpa = layout.offset(gpa, length), layout.gpa(offset)
        hits += want_off is not None
        assert line == " ".join("-" if v is None else f"{v:x}" for v in
                                (want_off, want_gpa)), (name, size, hex(gpa))
    assert 0 < hits < len(todo)      # both answers were exercised
