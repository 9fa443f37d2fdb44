"""Unit tests for pyhost/image/: the pure pieces (newc writer/reader,
bzImage extractor, ELF readers, module dependencies, cache key), with no
network and no VM.  One optional test boots the cached image; it runs only
with PVPERF_IMAGE_BOOT_TEST=1 (it needs a built image and takes ~5 s)."""
from __future__ import annotations

import gzip
import json
import lzma
import os
import shutil
import stat
import struct
import subprocess
from pathlib import Path

import pytest

from pyhost.errors import ImageError
from pyhost.image import apt, build, host, kernel, memo, smoke, store, sysmap
from pyhost.image import recipe as image_recipe
from pyhost.image import root as image_root
from pyhost.image import inputs as image_inputs
from pyhost.image.cpio import CpioWriter, read_newc
from pyhost.image.kernel import extract_vmlinux, pvh_entry, read_modinfo
from pyhost.image.modules import ModuleDB

# ---------------------------------------------------------------------------
# tiny ELF64 builders


def make_elf(sections: dict[str, bytes] | None = None,
             notes: list[tuple[bytes, int, bytes]] | None = None,
             load_vaddr: int = 0xFFFFFFFF81000000) -> bytes:
    """An ELF64 LE file with the given sections (plus .shstrtab), a PT_LOAD
    at ``load_vaddr`` and one PT_NOTE holding ``notes``."""
    def pad4(b: bytes) -> bytes:
        return b + b"\0" * (-len(b) % 4)

    note_blob = b"".join(
        struct.pack("<III", len(name) + 1, len(desc), ntype)
        + pad4(name + b"\0") + pad4(desc)
        for name, ntype, desc in (notes or []))
    sections = dict(sections or {})
    names = list(sections) + [".shstrtab"]
    shstrtab = b"\0" + b"".join(n.encode() + b"\0" for n in names)
    sections[".shstrtab"] = shstrtab
    phnum = 2
    body_off = 64 + 56 * phnum
    body = bytearray(note_blob)
    offsets = {}
    for n in names:
        offsets[n] = body_off + len(body)
        body += sections[n]
    shoff = body_off + len(body)
    ehdr = (b"\x7fELF" + bytes([2, 1, 1]) + b"\0" * 9
            + struct.pack("<HHIQQQIHHHHHH", 2, 62, 1, 0, 64, shoff, 0, 64,
                          56, phnum, 64, len(names) + 1, len(names)))
    phdrs = struct.pack("<IIQQQQQQ", 1, 5, 0, load_vaddr, 0, 0, 0, 0x1000)
    phdrs += struct.pack("<IIQQQQQQ", 4, 4, body_off, 0, 0, len(note_blob),
                         len(note_blob), 4)
    shdrs = b"\0" * 64
    name_off = 1
    for n in names:
        shdrs += struct.pack("<IIQQQQIIQQ", name_off, 3 if n == ".shstrtab"
                             else 1, 0, 0, offsets[n], len(sections[n]),
                             0, 0, 1, 0)
        name_off += len(n) + 1
    return bytes(ehdr + phdrs + body + shdrs)


def make_ko(name: str, depends: list[str] = (), extra: list[str] = ()) -> bytes:
    info = [f"name={name}", f"depends={','.join(depends)}",
            "license=GPL", *extra]
    return make_elf({".modinfo": b"\0".join(s.encode() for s in info) + b"\0",
                     ".text": b"\xc3"})


PVH_ELF = make_elf(notes=[(b"Linux", 6, b"6.1.0"),
                          (b"Xen", 18, struct.pack("<I", 0x1000850))])


# ---------------------------------------------------------------------------
# newc cpio


def build_sample_archive(tmp_path: Path) -> bytes:
    src = tmp_path / "big.bin"
    src.write_bytes(bytes(range(256)) * 41 + b"xyz")      # odd size
    out = tmp_path / "a.cpio"
    with open(out, "wb") as f:
        w = CpioWriter(f)
        w.add_dir("bin")
        w.add_file("bin/busybox", src, 0o755)
        w.add_symlink("bin/sh", "busybox")
        w.add_file("init", b"#!/bin/sh\n", 0o755)
        w.add_dir("dev")
        w.add_device("dev/console", 5, 1, 0o600)
        w.add_file("etc-empty", b"")
        w.close()
    return out.read_bytes()


def test_cpio_roundtrip(tmp_path):
    data = build_sample_archive(tmp_path)
    assert len(data) % 4 == 0
    entries = {e.name: e for e in read_newc(data)}
    assert list(entries) == ["bin", "bin/busybox", "bin/sh", "init", "dev",
                             "dev/console", "etc-empty"]
    assert all(e.uid == 0 and e.gid == 0 for e in entries.values())
    assert stat.S_ISDIR(entries["bin"].mode)
    bb = entries["bin/busybox"]
    assert stat.S_ISREG(bb.mode) and stat.S_IMODE(bb.mode) == 0o755
    assert bb.data == (tmp_path / "big.bin").read_bytes()
    assert stat.S_ISLNK(entries["bin/sh"].mode)
    assert entries["bin/sh"].data == b"busybox"
    con = entries["dev/console"]
    assert stat.S_ISCHR(con.mode) and con.rdev == (5, 1)
    assert entries["etc-empty"].data == b""


@pytest.mark.skipif(not shutil.which("cpio"), reason="GNU cpio not installed")
def test_cpio_readable_by_gnu_cpio(tmp_path):
    data = build_sample_archive(tmp_path)
    proc = subprocess.run(["cpio", "-t", "--quiet"], input=data,
                          capture_output=True, check=True)
    assert proc.stdout.decode().split() == [
        "bin", "bin/busybox", "bin/sh", "init", "dev", "dev/console",
        "etc-empty"]
    listing = subprocess.run(["cpio", "-tv", "--quiet", "--numeric-uid-gid"],
                             input=data, capture_output=True,
                             check=True).stdout.decode()
    assert "0        0" in listing.splitlines()[1].replace("  ", "  ")


def test_cpio_add_tree_keeps_modes_and_links(tmp_path):
    root = tmp_path / "root"
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "usr" / "bin" / "tool").write_bytes(b"\x7fELF")
    os.chmod(root / "usr" / "bin" / "tool", 0o750)
    (root / "bin").mkdir()
    os.symlink("../usr/bin/tool", root / "bin" / "tool")
    out = tmp_path / "t.cpio"
    with open(out, "wb") as f:
        w = CpioWriter(f)
        w.add_tree(root)
        w.close()
    entries = read_newc(out.read_bytes())
    names = [e.name for e in entries]
    assert sorted(names) == ["bin", "bin/tool", "usr", "usr/bin",
                             "usr/bin/tool"]
    by = {e.name: e for e in entries}
    assert stat.S_IMODE(by["usr/bin/tool"].mode) == 0o750
    assert by["bin/tool"].data == b"../usr/bin/tool"
    # parents always precede children
    for i, n in enumerate(names):
        if "/" in n:
            assert names.index(n.rsplit("/", 1)[0]) < i


def test_cpio_rejects_escaping_names(tmp_path):
    with open(tmp_path / "x", "wb") as f:
        w = CpioWriter(f)
        with pytest.raises(ValueError):
            w.add_file("../etc/passwd", b"")


# ---------------------------------------------------------------------------
# bzImage -> vmlinux


def fake_bzimage(payload: bytes, header: bool = True) -> bytes:
    """Setup area (2 sectors) + protected-mode code containing a decoy
    XZ magic, then the payload and trailing bytes, like a real bzImage."""
    setup = bytearray(1024)
    pm = bytearray(b"\x90" * 64 + bytes.fromhex("fd377a585a00") + b"junk" * 4)
    if header:
        setup[0x1F1] = 1                              # setup_sects
        setup[0x202:0x206] = b"HdrS"
        struct.pack_into("<H", setup, 0x206, 0x020F)
        struct.pack_into("<I", setup, 0x248, len(pm))  # payload_offset
        struct.pack_into("<I", setup, 0x24C, len(payload))
    return bytes(setup + pm + payload + b"\xff" * 37)


@pytest.mark.parametrize("header", [True, False])
def test_extract_vmlinux_xz(header):
    xz = lzma.compress(PVH_ELF, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC32,
                       filters=[{"id": lzma.FILTER_X86},
                                {"id": lzma.FILTER_LZMA2}])
    blob = fake_bzimage(xz + struct.pack("<I", len(PVH_ELF)), header)
    assert extract_vmlinux(blob) == PVH_ELF


def test_extract_vmlinux_gzip():
    assert extract_vmlinux(fake_bzimage(gzip.compress(PVH_ELF))) == PVH_ELF


def test_extract_vmlinux_rejects_non_elf():
    blob = fake_bzimage(lzma.compress(b"not an elf" * 10,
                                      format=lzma.FORMAT_XZ))
    with pytest.raises(ValueError, match="ELF"):
        extract_vmlinux(blob)


def test_pvh_entry_and_banner():
    assert pvh_entry(PVH_ELF) == 0x1000850
    assert pvh_entry(make_elf(notes=[(b"Linux", 6, b"x")])) is None
    with pytest.raises(ValueError):
        pvh_entry(b"MZ" + b"\0" * 100)
    assert kernel.kernel_banner(b"\0Linux version 6.1.0-56-amd64 (x) #1\n\0") \
        == "Linux version 6.1.0-56-amd64 (x) #1"
    assert kernel.first_load_vaddr(PVH_ELF) == 0xFFFFFFFF81000000


def test_read_modinfo():
    info = read_modinfo(make_ko("9p", ["netfs", "9pnet"],
                                ["parmtype=ksym_perf_event_overflow:ulong",
                                 "parmtype=debug:int"]))
    assert info["name"] == ["9p"]
    assert info["depends"] == ["netfs,9pnet"]


# ---------------------------------------------------------------------------
# module dependencies

MODULES_DEP = """\
kernel/fs/9p/9p.ko: kernel/fs/fscache/fscache.ko kernel/fs/netfs/netfs.ko kernel/net/9p/9pnet.ko
kernel/fs/fscache/fscache.ko: kernel/fs/netfs/netfs.ko
kernel/fs/netfs/netfs.ko:
kernel/net/9p/9pnet.ko:
kernel/net/9p/9pnet_virtio.ko: kernel/net/9p/9pnet.ko kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/virtio/virtio.ko: kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/virtio/virtio_ring.ko:
kernel/drivers/char/virtio_console.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/firmware/qemu-fw-cfg.ko:
"""


def assert_deps_first(order, db):
    for i, name in enumerate(order):
        for dep in db.deps(name):
            if dep in db.paths:
                assert order.index(dep) < i, (dep, name)


def test_modules_dep_load_order():
    db = ModuleDB.from_modules_dep(MODULES_DEP, ["kernel/fs/9p/builtin.ko"])
    order = db.load_order(["virtio_console", "qemu_fw_cfg", "9pnet_virtio",
                           "9p", "builtin"])
    assert sorted(order) == sorted(["virtio_ring", "virtio", "virtio_console",
                                    "qemu_fw_cfg", "9pnet", "9pnet_virtio",
                                    "netfs", "fscache", "9p"])
    assert len(order) == len(set(order))
    assert_deps_first(order, db)
    assert "qemu_fw_cfg" in db.paths           # '-' in file name -> '_'


def test_modules_dep_missing_and_cycle():
    db = ModuleDB.from_modules_dep(MODULES_DEP)
    with pytest.raises(KeyError):
        db.load_order(["virtio_net"])
    cyc = ModuleDB.from_modules_dep("a.ko: b.ko\nb.ko: a.ko\n")
    with pytest.raises(ValueError, match="cycle"):
        cyc.load_order(["a"])


def test_modules_dep_text_roundtrip():
    db = ModuleDB.from_modules_dep(MODULES_DEP)
    order = db.load_order(["9p", "virtio_console"])
    text = db.modules_dep_text(order)
    again = ModuleDB.from_modules_dep(text)
    again_order = again.load_order(["9p", "virtio_console"])
    assert sorted(again_order) == sorted(order)
    assert_deps_first(again_order, db)
    assert_deps_first(order, again)
    # depmod style: the module loaded first is listed last
    line = next(l for l in text.splitlines() if l.startswith("kernel/fs/9p/9p.ko"))
    assert line.split()[-1] in ("kernel/fs/netfs/netfs.ko",
                                "kernel/net/9p/9pnet.ko")


def test_module_tree_without_modules_dep(tmp_path):
    """Debian's packages ship no modules.dep: read .modinfo instead."""
    moddir = tmp_path / "lib" / "modules" / "6.1.0-test"
    kos = {"drivers/virtio/virtio_ring.ko": ("virtio_ring", []),
           "drivers/virtio/virtio.ko": ("virtio", ["virtio_ring"]),
           "drivers/virtio/virtio_pci.ko": ("virtio_pci", ["virtio",
                                                           "virtio_ring"]),
           "fs/9p/9p.ko": ("9p", ["9pnet"]),
           "net/9p/9pnet.ko": ("9pnet", []),
           "lib/crc32c_generic.ko": ("crc32c_generic", []),
           "fs/ext4/ext4.ko": ("ext4", [])}
    for rel, (name, deps) in kos.items():
        p = moddir / "kernel" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        extra = ["softdep=pre: crc32c_generic post: nothere"] \
            if name == "9p" else []
        p.write_bytes(make_ko(name, deps, extra))
    (moddir / "modules.builtin").write_text("kernel/drivers/virtio/virtio_anchor.ko\n")
    db = ModuleDB.from_tree(moddir)
    order = db.load_order(["virtio_pci", "9p", "virtio_anchor"])
    assert sorted(order) == ["9p", "9pnet", "crc32c_generic", "virtio",
                             "virtio_pci", "virtio_ring"]
    assert_deps_first(order, db)
    assert "ext4" not in order


# ---------------------------------------------------------------------------
# apt parsing, System.map


def test_apt_parsing():
    recs = apt.parse_apt_records(
        "Package: linux-image-amd64\nVersion: 6.1.192-2\n"
        "Depends: linux-image-6.1.0-56-amd64 (= 6.1.192-2)\n\n"
        "Package: busybox-static\nVersion: 1:1.35.0-4\nDescription: x\n"
        " continued\n")
    assert [r["Package"] for r in recs] == ["linux-image-amd64",
                                            "busybox-static"]
    assert apt.kernel_from_depends(recs[0]["Depends"]) == (
        "linux-image-6.1.0-56-amd64", "6.1.192-2")
    assert apt.kernel_from_depends(
        "kmod, linux-image-6.1.0-9-amd64-unsigned | linux-image-6.1.0-9-amd64"
    ) == ("linux-image-6.1.0-9-amd64-unsigned", None)
    assert apt.kernel_from_depends("kmod, linux-base (>= 4.3~)") is None
    assert apt.deb_filename("busybox-static", "1:1.35") == \
        "busybox-static_1%3a1.35_"


def test_system_map_from_kallsyms():
    text = ("ffffffff81000100 T second\n"
            "ffffffff81000000 T _text\n"
            "ffffffffc0200000 t virtio_init\t[virtio]\n"
            "0000000000000000 A fixed_percpu_data\n")
    assert sysmap.system_map_from_kallsyms(text) == (
        "0000000000000000 A fixed_percpu_data\n"
        "ffffffff81000000 T _text\n"
        "ffffffff81000100 T second\n")


# ---------------------------------------------------------------------------
# cache key


@pytest.fixture
def fake_inputs(tmp_path, monkeypatch):
    """gather_inputs() against a temporary recipe and fake host tools."""
    recipes = tmp_path / "images"
    d = recipes / "x86_64"          # the host's, which "default" names
    d.mkdir(parents=True)
    (d / "recipe.json").write_text(json.dumps({
        "kernel": {"package": "linux-image-amd64"},
        "busybox": {"package": "busybox-static"},
        "perf": {"package": "linux-perf"},
        "modules": ["9p"]}))
    (d / "init").write_text("#!/bin/sh\n")
    perf = tmp_path / "perf"
    perf.write_bytes(b"\x7fELF perf")
    lib = tmp_path / "libc.so.6"
    lib.write_bytes(b"\x7fELF libc")
    versions = {"linux-image-6.1.0-56-amd64": "6.1.192-2",
                "busybox-static": "1:1.35.0-4"}
    monkeypatch.setattr(image_recipe, "recipe_dir", lambda name: recipes / name)
    monkeypatch.setattr(apt, "resolve_packages", lambda meta, others, ctx=None,
                        kernel_release=None: (
        "linux-image-6.1.0-56-amd64", dict(versions)))
    monkeypatch.setattr(host, "find_perf_binary", lambda r: (perf, "6.1.187-1"))
    monkeypatch.setattr(host, "ldd_libraries", lambda b: [
        ("/lib/x86_64-linux-gnu/libc.so.6", lib)])
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    class Ctx:
        pass
    ctx = Ctx()
    ctx.recipe, ctx.perf, ctx.lib, ctx.versions = d, perf, lib, versions
    ctx.tmp = tmp_path
    ctx.hash = lambda driver=None: image_inputs.gather_inputs("default", driver).hash
    return ctx


def test_cache_key_stable(fake_inputs):
    assert fake_inputs.hash() == fake_inputs.hash()


def test_cache_key_recipe_change(fake_inputs):
    before = fake_inputs.hash()
    (fake_inputs.recipe / "init").write_text("#!/bin/sh\necho changed\n")
    assert fake_inputs.hash() != before
    before = fake_inputs.hash()
    (fake_inputs.recipe / "overlay").mkdir()
    (fake_inputs.recipe / "overlay" / "motd").write_text("hi\n")
    assert fake_inputs.hash() != before


def test_cache_key_package_version_change(fake_inputs):
    before = fake_inputs.hash()
    fake_inputs.versions["busybox-static"] = "1:1.36.0-1"
    assert fake_inputs.hash() != before


def test_cache_key_driver_change(fake_inputs):
    ko = fake_inputs.tmp / "pvperf.ko"
    ko.write_bytes(make_ko("pvperf"))
    without, with_ko = fake_inputs.hash(None), fake_inputs.hash(ko)
    assert without != with_ko
    ko.write_bytes(make_ko("pvperf", extra=["parmtype=x:int"]))
    assert fake_inputs.hash(ko) not in (without, with_ko)
    with pytest.raises(ImageError, match="PMU driver"):
        fake_inputs.hash(fake_inputs.tmp / "missing.ko")


def test_cache_key_host_perf_change(fake_inputs):
    before = fake_inputs.hash()
    fake_inputs.lib.write_bytes(b"\x7fELF libc, a longer new version")
    assert fake_inputs.hash() != before


def test_cache_key_builder_change(fake_inputs, monkeypatch):
    before = fake_inputs.hash()
    monkeypatch.setattr(image_inputs, "builder_hash", lambda: "0" * 64)
    assert fake_inputs.hash() != before


def test_image_status_without_image(fake_inputs):
    assert build.image_status("default", driver_ko=None) is None


# ---------------------------------------------------------------------------
# recipe and /init


REPO = Path(__file__).resolve().parents[3]


def test_default_recipe_loads():
    r = image_recipe.load_recipe("default")
    assert r.init.is_file()
    assert "virtio_console" in r.modules and "9p" in r.modules
    # perf annotate runs `objdump` from PATH
    assert image_recipe.ToolSpec("binutils", "/usr/bin/objdump",
                          "/usr/bin/objdump") in r.tools


def test_init_powers_off_and_opens_perf():
    """The names /init shares with pyhost: tests/unit/test_guest_contract.py."""
    init = (REPO / "images" / "x86_64" / "init").read_text()
    for word in ("poweroff -f", "perf_event_paranoid", "kptr_restrict"):
        assert word in init, word


def test_init_parses_with_busybox():
    bb = store.image_dir("x86_64") / "root" / "bin" / "busybox"
    if not bb.exists():
        pytest.skip(f"no built image with busybox at {bb} "
                    "(run pvperf image build)")
    subprocess.run([str(bb), "sh", "-n",
                    str(REPO / "images" / "x86_64" / "init")], check=True)


@pytest.mark.skipif(os.environ.get("PVPERF_IMAGE_BOOT_TEST") != "1",
                    reason="boots the cached image; set PVPERF_IMAGE_BOOT_TEST=1")
def test_cached_image_boots():
    img = build.image_status("default")
    if img is None:
        pytest.skip("image missing or out of date: pvperf image build")
    kallsyms, perf_version = smoke.smoke_boot(img.vmlinux, img.initramfs)
    assert " T _text" in kallsyms
    assert perf_version.startswith("perf version")


def test_driver_only_update_reuses_image(fake_inputs):
    """A changed driver swaps the .ko in the cached tree and rewrites the
    cpio, without unpacking or booting anything; stale build dirs go."""
    inputs = image_inputs.gather_inputs("default", None)
    final = store.image_dir("x86_64")
    (final / "root" / "bin").mkdir(parents=True)
    (final / "root" / "init").write_text("#!/bin/sh\n")
    os.symlink("busybox", final / "root" / "bin" / "sh")
    (final / "vmlinux").write_bytes(PVH_ELF)
    (final / "System.map").write_text("ffffffff81000000 T _text\n")
    (final / "initramfs.cpio").write_bytes(b"")
    (final / "manifest.json").write_text(json.dumps({
        "kernel_version": "6.1.0-test", "input_hash": inputs.hash,
        "base_hash": inputs.base_hash}))
    stale = final.parent / ".build-x86_64-stale"
    stale.mkdir()
    assert build.image_status("default", driver_ko=None) is not None

    ko = fake_inputs.tmp / "pvperf.ko"
    ko.write_bytes(make_ko("pvperf", extra=[
        "parmtype=ksym_perf_event_overflow:ulong"]))
    assert build.image_status("default", driver_ko=ko) is None
    steps = []
    img = build.build_image("default", driver_ko=ko,
                            progress=lambda i, n, m: steps.append(i))
    assert 3 not in steps and 8 not in steps          # no unpack, no boot
    assert not stale.exists()
    assert img.kernel_version == "6.1.0-test"
    assert build.image_status("default", driver_ko=ko) == img
    entries = {e.name: e for e in read_newc(img.initramfs.read_bytes())}
    assert entries[image_root.GUEST_DRIVER_PATH].data == ko.read_bytes()
    assert entries["bin/sh"].data == b"busybox"
    assert "dev/console" in entries
    assert (img.root / image_root.GUEST_DRIVER_PATH).read_bytes() == ko.read_bytes()

    img = build.build_image("default", driver_ko=None, progress=None)
    names = {e.name for e in read_newc(img.initramfs.read_bytes())}
    assert image_root.GUEST_DRIVER_PATH not in names
    assert "lib/modules/pvperf" not in names


# ---------------------------------------------------------------------------
# recipe tools (extra host programs such as objdump, with their libraries)


def test_parse_tools():
    assert image_recipe.parse_tools(None) == []
    assert image_recipe.parse_tools([
        {"package": "binutils", "binary": "/usr/bin/objdump"},
        {"package": "x", "binary": "/usr/bin/x-1.2", "guest": "/usr/bin/x"},
    ]) == [image_recipe.ToolSpec("binutils", "/usr/bin/objdump", "/usr/bin/objdump"),
           image_recipe.ToolSpec("x", "/usr/bin/x-1.2", "/usr/bin/x")]
    bad = [
        {"binary": "/usr/bin/objdump"},                       # no package
        {"package": "binutils"},                              # no binary
        {"package": "binutils", "binary": "objdump"},         # relative
        {"package": "b", "binary": "/usr/bin/x", "guest": "/usr/../etc/x"},
        {"package": "b", "binary": "/usr/bin/x", "guest": "/usr/bin/perf"},
        {"package": "b", "binary": "/usr/bin/x", "extra": 1},  # unknown key
        "binutils",
    ]
    for item in bad:
        with pytest.raises(ValueError):
            image_recipe.parse_tools([item])
    with pytest.raises(ValueError, match="already taken"):
        image_recipe.parse_tools([{"package": "a", "binary": "/usr/bin/x"},
                           {"package": "b", "binary": "/bin/x",
                            "guest": "/usr/bin/x"}])
    with pytest.raises(ValueError, match="list"):
        image_recipe.parse_tools({"package": "binutils"})


def test_malformed_tools_key_is_an_image_error(fake_inputs):
    recipe = json.loads((fake_inputs.recipe / "recipe.json").read_text())
    recipe["tools"] = [{"package": "binutils", "binary": "objdump"}]
    (fake_inputs.recipe / "recipe.json").write_text(json.dumps(recipe))
    with pytest.raises(ImageError, match="malformed") as e:
        image_recipe.load_recipe("default")
    assert "absolute" in str(e.value)


def _completed(rc: int, out: str = "", err: str = ""):
    return subprocess.CompletedProcess([], rc, out, err)


def test_find_tool_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # memo
    spec = image_recipe.ToolSpec("binutils", str(tmp_path / "objdump"),
                          "/usr/bin/objdump")
    # package not installed: dpkg-query fails
    monkeypatch.setattr(host, "run", lambda cmd, *a, **k: _completed(
        1, err="dpkg-query: no packages found matching binutils"))
    with pytest.raises(ImageError, match="binutils is not installed") as e:
        host.find_tool(spec)
    assert "apt-get install binutils" in str(e.value)
    # installed, but the binary is missing
    monkeypatch.setattr(host, "run", lambda cmd, *a, **k: _completed(
        0, out="install ok installed\t2.40-2"))
    with pytest.raises(ImageError, match="does not exist") as e:
        host.find_tool(spec)
    assert "2.40-2" in str(e.value)
    # a dangling symlink is missing too
    os.symlink("gone", tmp_path / "objdump")
    with pytest.raises(ImageError, match="does not exist"):
        host.find_tool(spec)
    # not an ELF program (a script would need its interpreter)
    (tmp_path / "gone").write_text("#!/bin/sh\n")
    with pytest.raises(ImageError, match="not an ELF"):
        host.find_tool(spec)
    # the real thing, through the symlink
    (tmp_path / "gone").write_bytes(b"\x7fELF objdump")
    assert host.find_tool(spec) == (tmp_path / "gone", "2.40-2")


def test_ldd_of_a_static_tool(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # memo
    monkeypatch.setattr(host, "run", lambda cmd, *a, **k: _completed(
        1, err="\tnot a dynamic executable\n"))
    assert host.ldd_libraries(Path("/static")) == []
    monkeypatch.setattr(host, "run", lambda cmd, *a, **k: _completed(
        1, err="ldd: /x: No such file or directory\n"))
    with pytest.raises(ImageError, match="ldd failed"):
        host.ldd_libraries(Path("/x"))


def test_host_queries_are_remembered_until_their_inputs_change(
        tmp_path, monkeypatch):
    """dpkg-query and ldd run once per package state (and, for ldd, per
    binary file): the image check before every run then costs no
    subprocess.  A change of the package state, or of the binary, asks
    again; a failed query is not remembered."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    status = tmp_path / "status"
    status.write_text("a")
    monkeypatch.setattr(memo, "PACKAGE_STATE", (str(status),))
    calls = []

    def fake_run(cmd, *a, **k):
        calls.append(cmd[0])
        if cmd[0] == "ldd":
            return _completed(0, out="\t/lib64/ld-linux-x86-64.so.2 "
                              "(0x00007f0000000000)\n")
        return _completed(0, out=f"install ok installed\t{len(calls)}")

    monkeypatch.setattr(host, "run", fake_run)
    binary = tmp_path / "prog"
    binary.write_bytes(b"\x7fELF one")
    assert host.installed_version("p", "test") == "1"
    assert host.installed_version("p", "test") == "1"
    libs = host.ldd_libraries(binary)
    assert host.ldd_libraries(binary) == libs
    assert libs[0][0] == "/lib64/ld-linux-x86-64.so.2"
    assert calls == ["dpkg-query", "ldd"]
    binary.write_bytes(b"\x7fELF two, longer")        # another binary
    host.ldd_libraries(binary)
    assert calls == ["dpkg-query", "ldd", "ldd"]
    os.utime(status, ns=(1, 1))                       # dpkg ran
    assert host.installed_version("p", "test") == "4"
    monkeypatch.setattr(host, "run", lambda cmd, *a, **k: _completed(1))
    os.utime(status, ns=(2, 2))
    with pytest.raises(ImageError, match="not installed"):
        host.installed_version("p", "test")
    monkeypatch.setattr(host, "run", fake_run)
    assert host.installed_version("p", "test") == "5"


@pytest.fixture
def tool_inputs(fake_inputs, monkeypatch):
    """fake_inputs plus a recipe tool: /usr/bin/objdump from binutils, a
    symlink to the real ELF, with its own library and one shared with perf."""
    t = fake_inputs.tmp
    real = t / "x86_64-linux-gnu-objdump"
    real.write_bytes(b"\x7fELF objdump")
    os.symlink(real.name, t / "objdump")
    bfd = t / "libbfd.so"
    bfd.write_bytes(b"\x7fELF bfd")
    recipe = json.loads((fake_inputs.recipe / "recipe.json").read_text())
    recipe["tools"] = [{"package": "binutils", "binary": str(t / "objdump"),
                        "guest": "/usr/bin/objdump"}]
    (fake_inputs.recipe / "recipe.json").write_text(json.dumps(recipe))
    tool_version = {"v": "2.40-2"}
    monkeypatch.setattr(host, "installed_version",
                        lambda pkg, purpose: tool_version["v"])
    libc = ("/lib/x86_64-linux-gnu/libc.so.6", fake_inputs.lib)
    monkeypatch.setattr(host, "ldd_libraries", lambda b: (
        [libc] if b == fake_inputs.perf else
        [("/lib/x86_64-linux-gnu/libbfd-2.40-system.so", bfd), libc]))
    fake_inputs.tool, fake_inputs.bfd = real, bfd
    fake_inputs.tool_version = tool_version
    return fake_inputs


def test_tool_inputs_enter_the_hash(tool_inputs):
    inputs = image_inputs.gather_inputs("default", None)
    assert [t.host for t in inputs.tools] == [tool_inputs.tool]
    assert inputs.versions["binutils"] == "2.40-2"
    assert inputs.data["packages"]["binutils"] == "2.40-2"
    assert inputs.data["tools"] == {"/usr/bin/objdump": str(tool_inputs.tool)}
    for f in (tool_inputs.tool, tool_inputs.bfd, tool_inputs.lib,
              tool_inputs.perf):
        assert str(f) in inputs.data["host_files"], f
    assert inputs.programs() == [("/usr/bin/perf", tool_inputs.perf),
                                 ("/usr/bin/objdump", tool_inputs.tool)]
    assert sorted(g for g, _ in inputs.libraries()) == [
        "/lib/x86_64-linux-gnu/libbfd-2.40-system.so",
        "/lib/x86_64-linux-gnu/libc.so.6"]

    before = tool_inputs.hash()
    tool_inputs.tool.write_bytes(b"\x7fELF objdump, a longer new build")
    assert tool_inputs.hash() != before           # the tool itself
    before = tool_inputs.hash()
    tool_inputs.bfd.write_bytes(b"\x7fELF libbfd, a longer new build")
    assert tool_inputs.hash() != before           # one of its libraries
    before = tool_inputs.hash()
    tool_inputs.tool_version["v"] = "2.41-1"
    assert tool_inputs.hash() != before           # its package version
    before = tool_inputs.hash()
    other = tool_inputs.tmp / "objdump-2"
    other.write_bytes(tool_inputs.tool.read_bytes())
    shutil.copystat(tool_inputs.tool, other)
    os.unlink(tool_inputs.tmp / "objdump")
    os.symlink(other.name, tool_inputs.tmp / "objdump")
    assert tool_inputs.hash() != before           # the symlink's target


def test_tools_are_installed_with_their_libraries(tool_inputs, tmp_path):
    inputs = image_inputs.gather_inputs("default", None)
    root = tmp_path / "root"
    (root / "usr" / "bin").mkdir(parents=True)
    os.symlink("../../bin/busybox", root / "usr" / "bin" / "objdump")
    image_root.install_programs(root, inputs)
    objdump = root / "usr" / "bin" / "objdump"
    assert not objdump.is_symlink()               # an applet never shadows it
    assert objdump.read_bytes() == tool_inputs.tool.read_bytes()
    assert stat.S_IMODE(objdump.stat().st_mode) == 0o755
    assert (root / "usr/bin/perf").read_bytes() == tool_inputs.perf.read_bytes()
    assert (root / "lib/x86_64-linux-gnu/libbfd-2.40-system.so").read_bytes() \
        == tool_inputs.bfd.read_bytes()
    assert (root / "lib/x86_64-linux-gnu/libc.so.6").read_bytes() \
        == tool_inputs.lib.read_bytes()


def test_smoke_boot_checks_that_tools_load():
    cmd = smoke.smoke_command(["/usr/bin/objdump"])
    assert cmd.startswith("/lib64/ld-linux-x86-64.so.2 --list /usr/bin/objdump")
    assert cmd.endswith("perf --version >&2")
    assert smoke.smoke_command() == (smoke.HELPER_CHECK + " && cat "
                                     "/proc/kallsyms && perf --version >&2")


def _sh(cmd: str, path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["/bin/sh", "-c", cmd], env={"PATH": str(path)},
                          capture_output=True, text=True)


def test_smoke_boot_refuses_an_image_without_addr2line(tmp_path):
    """perf report dies of SIGPIPE without addr2line: the test
    boot's command stops with exit 3 and a tagged line when it is
    missing or does not run, and goes on when it runs."""
    cmd = smoke.HELPER_CHECK + " && echo went-on"
    r = _sh(cmd, tmp_path)                                  # missing
    assert r.returncode == 3 and r.stdout == ""
    assert r.stderr.splitlines()[-1].startswith(
        smoke.SMOKE_TAG + " addr2line does not run")
    a2l = tmp_path / "addr2line"
    a2l.write_text("#!/bin/sh\nexit 1\n")                   # broken
    a2l.chmod(0o755)
    assert _sh(cmd, tmp_path).returncode == 3
    a2l.write_text("#!/bin/sh\necho '??'\necho '??:0'\n")  # runs
    r = _sh(cmd, tmp_path)
    assert r.returncode == 0 and r.stdout == "went-on\n"
    # a failing tool check is not blamed on addr2line
    r = _sh("false && " + cmd, tmp_path)
    assert r.returncode == 1 and smoke.SMOKE_TAG not in r.stderr


def test_default_image_dir_is_the_host_architectures_recipe():
    """"default" names the host architecture's own recipe (images/x86_64
    on this host) wherever an image is found, its cache directory too:
    a test reading the default image's root must find the built one."""
    from pyhost import arch
    assert store.image_dir() == store.image_dir("default") \
        == store.images_dir() / arch.host().default_recipe
    assert store.image_dir("py") == store.images_dir() / "py"
