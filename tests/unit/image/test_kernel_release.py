"""What an image of another Debian kernel needs from the builder (the
linux-6.12 recipe): a kernel and perf of a named apt release, a zstd
bzImage payload, compressed modules, and the driver built for that
kernel picked by its vermagic."""
from __future__ import annotations

import gzip
import json
import lzma
import shutil
import subprocess

import pytest

from pyhost.errors import ImageError
from pyhost.image import apt, inputs as image_inputs, recipe as image_recipe
from pyhost.image.kernel import extract_vmlinux
from pyhost.image.modules import ModuleDB, read_module, uncompressed
from pyhost.paths import REPO_ROOT
from test_image import PVH_ELF, fake_bzimage, make_ko

# ---------------------------------------------------------------------------
# the recipe's release keys


def write_recipe(tmp_path, monkeypatch, **keys):
    d = tmp_path / "images" / "k"
    d.mkdir(parents=True)
    raw = {"kernel": {"package": "linux-image-amd64"},
           "busybox": {"package": "busybox-static"},
           "perf": {"package": "linux-perf"}, "modules": []}
    for key, release in keys.items():
        raw[key]["release"] = release
    (d / "recipe.json").write_text(json.dumps(raw))
    (d / "init").write_text("#!/bin/sh\n")
    monkeypatch.setattr(image_recipe, "recipe_dir",
                        lambda name: tmp_path / "images" / name)
    return image_recipe


def test_release_keys(tmp_path, monkeypatch):
    r = write_recipe(tmp_path, monkeypatch, kernel="bookworm-backports",
                     perf="bookworm-backports").load_recipe("k")
    assert (r.kernel_release, r.perf_release) == ("bookworm-backports",) * 2
    assert r.userland_from_debs()       # the host keeps its own perf


def test_no_release_takes_the_hosts_perf(tmp_path, monkeypatch):
    r = write_recipe(tmp_path, monkeypatch).load_recipe("k")
    assert r.kernel_release is None and not r.userland_from_debs()


@pytest.mark.parametrize("bad", ["-o Foo=1", "a b", "", 7])
def test_bad_release_is_refused(tmp_path, monkeypatch, bad):
    mod = write_recipe(tmp_path, monkeypatch, kernel=bad)
    with pytest.raises(ImageError, match="release"):
        mod.load_recipe("k")


def test_the_612_recipe_names_its_release():
    raw = json.loads((REPO_ROOT / "images" / "linux-6.12" /
                      "recipe.json").read_text())
    assert raw["kernel"]["release"] == raw["perf"]["release"] == \
        "bookworm-backports"
    assert apt.release_options("bookworm-backports") == \
        ["-o", "APT::Default-Release=bookworm-backports"]
    assert apt.release_options(None) == []


# ---------------------------------------------------------------------------
# zstd bzImage payload (Debian's 6.12)


@pytest.mark.skipif(shutil.which("zstd") is None, reason="no zstd program")
def test_extract_vmlinux_zstd():
    payload = subprocess.run(["zstd", "-q", "-c"], input=PVH_ELF,
                             capture_output=True, check=True).stdout
    # the kernel appends the decompressed size after the frame
    blob = fake_bzimage(payload + len(PVH_ELF).to_bytes(4, "little"))
    assert extract_vmlinux(blob) == PVH_ELF


# ---------------------------------------------------------------------------
# compressed modules


def test_modules_decompressed_by_suffix(tmp_path):
    ko = make_ko("9p", ["9pnet"])
    (tmp_path / "a.ko.xz").write_bytes(lzma.compress(ko))
    (tmp_path / "b.ko.gz").write_bytes(gzip.compress(ko))
    (tmp_path / "c.ko").write_bytes(ko)
    (tmp_path / "d.ko.zst").write_bytes(b"(\xb5/\xfd")
    for name in ("a.ko.xz", "b.ko.gz", "c.ko"):
        assert read_module(tmp_path / name) == ko
    with pytest.raises(ValueError, match="zstd"):
        read_module(tmp_path / "d.ko.zst")
    assert uncompressed("kernel/fs/9p/9p.ko.xz") == "kernel/fs/9p/9p.ko"
    assert uncompressed("kernel/fs/9p/9p.ko") == "kernel/fs/9p/9p.ko"


def test_modules_dep_of_xz_modules_names_the_decompressed_files(tmp_path):
    moddir = tmp_path / "6.12.0-test"
    for rel, name, deps in (("fs/9p/9p.ko.xz", "9p", ["9pnet"]),
                            ("net/9p/9pnet.ko.xz", "9pnet", [])):
        p = moddir / "kernel" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(lzma.compress(make_ko(name, deps)))
    db = ModuleDB.from_tree(moddir)
    order = db.load_order(["9p"])
    assert order == ["9pnet", "9p"]
    assert db.modules_dep_text(order, uncompressed) == (
        "kernel/net/9p/9pnet.ko:\n"
        "kernel/fs/9p/9p.ko: kernel/net/9p/9pnet.ko\n")


# ---------------------------------------------------------------------------
# the default driver: the build whose vermagic names the image's kernel


def write_kos(tmp_path) -> dict:
    """A 6.1 driver beside the sources and a linux-6.12 one:
    {release: path}."""
    kos = {}
    for d, release in (("", "6.1.0-56-amd64"),
                       ("linux-6.12", "6.12.95+deb12-amd64")):
        p = tmp_path / d / "pvperf.ko"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(make_ko("pvperf", extra=[
            f"vermagic={release} SMP preempt mod_unload modversions "]))
        kos[release] = p
    return kos


def test_default_driver_is_the_one_built_for_the_kernel(tmp_path, monkeypatch):
    kos = write_kos(tmp_path)
    monkeypatch.setattr(image_inputs, "driver_ko_paths", lambda arch: (
        tmp_path / "pvperf.ko", tmp_path / "amd64" / "pvperf.ko",
        tmp_path / "linux-6.12" / "pvperf.ko"))
    monkeypatch.setattr(image_inputs, "_elf_machine", lambda p: "EM_X86_64")
    arch = image_inputs.arch.get("x86_64")
    pick = image_inputs._default_driver
    for release, ko in kos.items():
        assert pick(image_inputs.DEFAULT_DRIVER, arch, release) == ko
    assert pick(image_inputs.DEFAULT_DRIVER, arch, "6.13.0-1-amd64") is None
    assert pick(None, arch, "6.1.0-56-amd64") is None


def test_a_driver_built_for_the_previous_abi_is_named(tmp_path, monkeypatch):
    """The archive published 6.1.0-57 after the driver was built for -56:
    the image build names the stale driver (the image would count
    nothing); linux-6.12's driver is not the 6.1 image's stale one."""
    write_kos(tmp_path)
    monkeypatch.setattr(image_inputs, "driver_ko_paths", lambda arch: (
        tmp_path / "pvperf.ko", tmp_path / "linux-6.12" / "pvperf.ko"))
    monkeypatch.setattr(image_inputs, "_elf_machine", lambda p: "EM_X86_64")
    arch = image_inputs.arch.get("x86_64")
    stale = image_inputs.stale_driver
    assert stale(arch, "6.1.0-57-amd64") == \
        f"{tmp_path / 'pvperf.ko'} is built for 6.1.0-56-amd64"
    assert stale(arch, "6.1.0-56-amd64") is None
    assert stale(arch, "6.12.96+deb12-amd64") == \
        f"{tmp_path / 'linux-6.12' / 'pvperf.ko'} is built for " \
        "6.12.95+deb12-amd64"
    (tmp_path / "pvperf.ko").unlink()
    assert stale(arch, "6.1.0-57-amd64") is None
