"""pyhost.symbols on synthetic ELF files (tests/elfwriter.py)."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from elfwriter import ElfWriter
from pyhost import arch
from pyhost.profile import symbols
from support import PROGRAMS


def make_elf(tmp_path, name, funcs, base=0x401000, etype="EXEC"):
    w = ElfWriter(base=base, etype=etype)
    for fn, code in funcs:
        w.function(fn, code)
    path = tmp_path / name
    path.write_bytes(w.build())
    return path


def test_elf_function_lookup(tmp_path):
    p = make_elf(tmp_path, "prog", [("cold", b"\x90" * 10),
                                    ("hot", b"\xc3" * 6)])
    img = symbols.ElfImage(p)
    assert img.symbols.lookup(0x401000).name == "cold"
    assert img.symbols.lookup(0x40100a).name == "hot"
    assert img.symbols.lookup(0x401010) is None


def test_same_vaddr_two_programs_told_apart_by_bytes(tmp_path):
    a = make_elf(tmp_path, "a", [("alpha", b"\x48\x31\xc0" * 4)])
    b = make_elf(tmp_path, "b", [("beta", b"\x48\x31\xdb" * 4)])
    maps = [symbols.Mapping(0x401000, 0x402000, 0x1000, "/mnt/host/a"),
            symbols.Mapping(0x401000, 0x402000, 0x1000, "/mnt/host/b")]
    u = symbols.GuestUserSymbols(None, tmp_path, maps)
    assert u.guestpc_to_symbol(0x401000, b"\x48\x31\xdb")[0].name == "beta"
    assert u.guestpc_to_symbol(0x401000, b"\x48\x31\xc0")[0].name == "alpha"


def test_pie_placed_by_maps(tmp_path):
    p = make_elf(tmp_path, "pie", [("f", b"\x55" * 8), ("g", b"\x5d" * 8)],
                 base=0x1000, etype="DYN")
    maps = symbols.Mapping.parse_maps(
        "55550000000-55550002000 r-xp 00000000 00:1f 12 /mnt/host/pie\n")
    u = symbols.GuestUserSymbols(None, tmp_path, maps)
    sym, img = u.guestpc_to_symbol(0x55550001008, b"\x5d")
    assert sym.name == "g" and img.path == p


def test_static_exec_without_maps(tmp_path):
    p = make_elf(tmp_path, "st", [("main", b"\x90\xc3")])
    u = symbols.GuestUserSymbols(None, tmp_path, [], extra_elves=[p])
    assert u.guestpc_to_symbol(0x401001, b"\xc3")[0].name == "main"
    assert u.guestpc_to_symbol(0x401001, b"\xcc") is None


def test_kernel_symbols_with_modules():
    system_map = ("ffffffff81000000 T _stext\nffffffff81000100 t foo\n"
                  "ffffffff81000200 D data\n")
    modsyms = "ffffffffc0000000 t pv_open\t[pvperf]\n"
    k = symbols.kernel_symbols(system_map, modsyms)
    assert k.lookup(0xffffffff81000150).name == "foo"
    m = k.lookup(0xffffffffc0000010)
    assert m.name == "pv_open" and m.dso == "[pvperf]"


def test_host_qemu_symbols():
    hs = symbols.HostSymbols()
    name = hs.dso_offset_to_name("/usr/bin/qemu-system-x86_64", 0x1)
    assert name  # a named or "qemu-system-x86_64!…" label, never empty


def shared_pie(tmp_path):
    """One PIE (f, g) mapped by pid 1 at 0x55550000000 and by pid 2 at
    0x7f0000000000: (its path, pid 2's mappings, the symbolizer)."""
    p = make_elf(tmp_path, "pie", [("f", b"\x55" * 8), ("g", b"\x5d" * 8)],
                 base=0x1000, etype="DYN")
    one = symbols.Mapping.parse_maps(
        "55550000000-55550002000 r-xp 00000000 00:1f 12 /mnt/host/pie\n")
    two = symbols.Mapping.parse_maps(
        "7f0000000000-7f0000002000 r-xp 00000000 00:1f 12 /mnt/host/pie\n")
    return p, two, symbols.GuestUserSymbols(None, tmp_path, {1: one, 2: two})


def test_relocate_into_another_process(tmp_path):
    # pid 2 runs the TB pid 1 translated at pid 1's address
    p, two, u = shared_pie(tmp_path)
    code = b"\x5d" * 8
    assert u.has_code(1, 0x55550001008, code)
    assert not u.has_code(2, 0x55550001008, code)
    moved = u.relocate(0x55550001008, code, 2)
    assert moved == 0x7F0000001008
    sym, img = u.guestpc_to_symbol(moved, code, 2)
    assert sym.name == "g" and img.path == p
    # without a snapshot of the translator: found by bytes at the same
    # page offset in pid 2's mappings
    u2 = symbols.GuestUserSymbols(None, tmp_path, {2: two})
    assert u2.relocate(0x55550001008, code, 2) == 0x7F0000001008


@pytest.mark.parametrize("prog,arch_name,objdump", [
    ("qs", "x86_64", "objdump"),
    ("aarch64/rand", "aarch64", "aarch64-linux-gnu-objdump")])
def test_plt_stubs_named_as_objdump_names_them(prog, arch_name, objdump):
    path = PROGRAMS / prog
    if not path.exists() or shutil.which(objdump) is None:
        pytest.skip(f"{prog} or {objdump} missing (make -C "
                    "tests/guest_programs all)")
    listing = subprocess.run([objdump, "-d", "-j", ".plt", str(path)],
                             capture_output=True, text=True,
                             check=True).stdout
    # the section's header: ".plt" to aarch64's objdump, the first stub
    # less 0x10 to x86_64's ("free@plt-0x10"); pvperf says ".plt" for both
    expected = {int(a, 16): ".plt" if n == ".plt" or "@plt-" in n else n
                for a, n in re.findall(r"^([0-9a-f]+) <(\w+@plt(?:-0x\w+)?|"
                                       r"\.plt)>:$", listing, re.M)}
    img = symbols.ElfImage(path, plt_entry=arch.get(arch_name).plt_entry)
    named = {s.start: s.name for s in img.symbols._syms
             if s.name.endswith("@plt") or s.name == ".plt"}
    assert ".plt" in expected.values() and named == expected
    for start in expected:
        assert img.symbols.lookup(start + 4).name == expected[start]


def test_dso_offset_is_the_same_in_every_process(tmp_path):
    # code no symbol names (past g), run by two processes that map the
    # file at two ASLR bases: one name, the file and its offset
    _, _, u = shared_pie(tmp_path)
    assert u.dso_offset(0x55550001800, b"", 1) == ("/mnt/host/pie", 0x1800)
    assert u.dso_offset(0x7F0000001800, b"", 2) == ("/mnt/host/pie", 0x1800)
    # a file the host does not have: still named by the snapshot's maps
    gone = symbols.Mapping.parse_maps(
        "7f0000000000-7f0000002000 r-xp 00003000 00:1f 12 /lib/x.so\n")
    u2 = symbols.GuestUserSymbols(None, tmp_path, {3: gone})
    assert u2.dso_offset(0x7F0000000010, b"\x90", 3) == ("/lib/x.so", 0x3010)
    assert u2.dso_offset(0x7F0000000010, b"\x90", 4) is None


def test_why_an_emulator_file_has_no_names(tmp_path):
    stripped = symbols.ElfImage(make_elf(tmp_path, "stripped", []))
    assert stripped.why_unnamed().startswith("stripped: no function symbols")
    named = symbols.ElfImage(make_elf(tmp_path, "named", [("f", b"\x90")]))
    assert named.why_unnamed().startswith("not inside any function")
    assert symbols.HostSymbols().why_unnamed(str(tmp_path / "none")) == \
        "not readable on the host"
