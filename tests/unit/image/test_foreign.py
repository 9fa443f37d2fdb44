"""image/foreign.py: another architecture's programs without running
them (busybox's applet table, the DT_NEEDED closure in an unpacked
tree), and image/aptdir.py: the private apt directory's sources."""
import os
import shutil
from pathlib import Path

import pytest

from pyhost import arch
from pyhost.errors import ImageError
from pyhost.image import aptdir, foreign
from pyhost.image.foreign import dynamic_needs


def test_busybox_applets_from_the_binary_table():
    blob = b"\x7fELF...junk\0[\0[[\0ash\0ls\0sh\0zcat\0\0more junk"
    assert foreign.busybox_applets(blob) == ["[", "[[", "ash", "ls", "sh",
                                             "zcat"]
    with pytest.raises(ValueError):
        foreign.busybox_applets(b"no table here")
    with pytest.raises(ValueError):            # not sorted: not the table
        foreign.busybox_applets(b"[\0[[\0sh\0ash\0\0")


def test_resolve_in_tree_follows_relative_and_absolute_links(tmp_path):
    (tmp_path / "lib/t").mkdir(parents=True)
    (tmp_path / "lib/t/libx.so.1.2").write_text("x")
    os.symlink("libx.so.1.2", tmp_path / "lib/t/libx.so.1")
    os.symlink("/lib/t/libx.so.1", tmp_path / "lib/abs")     # absolute
    os.symlink("lib", tmp_path / "usrlib")                   # a directory
    real = tmp_path / "lib/t/libx.so.1.2"
    for guest in ("/lib/t/libx.so.1", "/lib/abs", "/usrlib/t/libx.so.1"):
        assert foreign.resolve_in_tree(tmp_path, guest) == real
    assert foreign.resolve_in_tree(tmp_path, "/lib/t/missing") is None


def test_library_dirs_from_the_trees_ld_so_conf(tmp_path):
    conf = tmp_path / "etc/ld.so.conf.d"
    conf.mkdir(parents=True)
    (conf / "t.conf").write_text("# multiarch\n/lib/t\n/usr/lib/t\n")
    assert foreign.library_dirs(tmp_path) == ["/lib/t", "/usr/lib/t",
                                              "/lib", "/usr/lib"]


def _host_tree(tmp_path: Path) -> tuple[Path, str, list[str]]:
    """A tree holding the host's /usr/bin/true and its libraries in a
    private directory named by the tree's ld.so.conf.d."""
    data = Path("/usr/bin/true").read_bytes()
    needed, _, interp = dynamic_needs(data)
    tree = tmp_path / "tree"
    (tree / "usr/bin").mkdir(parents=True)
    shutil.copy("/usr/bin/true", tree / "usr/bin/true")
    (tree / "opt/libs").mkdir(parents=True)
    for name in needed:
        host_lib = next(p for d in ("/lib", "/usr/lib", "/lib64")
                        for p in Path(d).rglob(name) if p.exists())
        shutil.copy(host_lib, tree / "opt/libs" / name)
    (tree / interp.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(os.path.realpath(interp), tree / interp.lstrip("/"))
    (tree / "etc/ld.so.conf.d").mkdir(parents=True)
    (tree / "etc/ld.so.conf.d/t.conf").write_text("/opt/libs\n")
    return tree, interp, needed


def test_library_closure_and_install(tmp_path):
    tree, interp, needed = _host_tree(tmp_path)
    closure = dict(foreign.library_closure(tree, ["/usr/bin/true"]))
    assert set(closure) == {interp, *(f"/opt/libs/{n}" for n in needed)}
    root = tmp_path / "root"
    copied = foreign.install_programs(root, tree,
                                      [("/bin/mytrue", Path("/usr/bin/true"))])
    assert (root / "bin/mytrue").read_bytes() == \
        Path("/usr/bin/true").read_bytes()
    assert copied == len(closure)
    assert all((root / g.lstrip("/")).is_file() for g in closure)


def test_a_missing_library_is_named(tmp_path):
    tree, _, needed = _host_tree(tmp_path)
    (tree / "opt/libs" / needed[0]).unlink()
    with pytest.raises(ImageError, match=needed[0].replace(".", r"\.")):
        foreign.library_closure(tree, ["/usr/bin/true"])


def test_sources_keep_binary_entries_only():
    deb822 = ("Types: deb deb-src\nURIs: http://m/debian\nSuites: s\n"
              "Components: main\n\nTypes: deb-src\nURIs: http://m/src\n"
              "Suites: s\n\nTypes: deb\nEnabled: no\nURIs: http://off\n")
    out = aptdir.deb822_binary_only(deb822)
    assert out == ("Types: deb\nURIs: http://m/debian\nSuites: s\n"
                   "Components: main\n")
    assert aptdir.one_line_binary_only(
        "deb http://m s main\ndeb-src http://m s main\n# deb x\n") == \
        "deb http://m s main\n"


def test_apt_context_per_architecture(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    native = aptdir.for_arch(arch.host())
    assert native.options() == [] and native.memo_key() == []
    other = next(a for a in arch.ARCHES.values() if not a.runs_on_host())
    ctx = aptdir.for_arch(other)
    opts = ctx.options()
    assert f"APT::Architecture={other.debian_arch}" in opts
    assert f"Dir::State::status={ctx.directory}/state/status" in opts
    assert "Dir::Etc::SourceList=/dev/null" in opts
    assert ctx.debs_dir() != native.debs_dir()
    assert str(ctx.directory).startswith(str(tmp_path))


def test_another_suite_retargets_the_hosts_own_release_only():
    """A recipe's ``suite`` takes the host's entries for its own release
    (not -updates, -security, -backports) with the suite in its place."""
    deb822 = ("Types: deb\nURIs: http://m/debian\nSuites: rel rel-updates\n"
              "Components: main\nSigned-By: /k.gpg\n\n"
              "Types: deb\nURIs: http://m/debian-security\n"
              "Suites: rel-security\nComponents: main\n")
    one_line = ("deb [signed-by=/k.gpg arch=amd64] http://m/debian rel main\n"
                "deb http://m/debian rel-backports main\n"
                "deb http://other/apt cloud-rel main\n")
    out = aptdir.retarget({"debian.sources": deb822, "host.list": one_line,
                           "else.list": "deb http://x nodistro main\n"},
                          "rel", "new")
    assert out == {
        "debian.sources": "Types: deb\nURIs: http://m/debian\nSuites: new\n"
                          "Components: main\nSigned-By: /k.gpg\n",
        "host.list": "deb [signed-by=/k.gpg arch=amd64] http://m/debian "
                     "new main\n"}


def test_a_broken_index_is_named():
    """apt-get update's complaint about an index mid-sync (as trixie's
    riscv64 -updates/-security gave) is what the build reports."""
    out = ("Get:1 http://m/debian new InRelease\n"
           "E: Failed to fetch http://m/debian/dists/new-updates/main/"
           "binary-riscv64/Packages.xz  File has unexpected size (1234 != "
           "5678). Mirror sync in progress? [IP: 1.2.3.4 80]\n"
           "E: Some index files failed to download. They have been ignored,"
           " or old ones used instead.\n")
    got = aptdir.broken_indexes(out)
    assert len(got) == 2 and "new-updates" in got[0]
    assert aptdir.broken_indexes("Hit:1 http://m/debian new InRelease\n") \
        == []


def test_apt_context_per_suite(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    other = next(a for a in arch.ARCHES.values() if not a.runs_on_host())
    plain, newer = aptdir.for_arch(other), aptdir.for_arch(other, "new")
    assert plain.directory != newer.directory and newer.suite == "new"
    assert "new" in newer.memo_key() and "new" not in plain.memo_key()
    # the host's own architecture from another suite is private too
    assert aptdir.for_arch(arch.host(), "new").directory is not None


def test_a_usr_merged_tree_resolves_lib_through_usr(tmp_path):
    """trixie's libc6 ships /usr/lib/ld-linux-*.so.1 and leaves the
    /lib -> usr/lib link to base-files, outside the closure."""
    loader = tmp_path / "usr" / "lib" / "ld-x.so.1"
    loader.parent.mkdir(parents=True)
    loader.write_bytes(b"\x7fELF")
    assert foreign.resolve_in_tree(tmp_path, "/lib/ld-x.so.1") == loader
    assert foreign.resolve_in_tree(tmp_path, "/usr/lib/ld-x.so.1") == loader
    assert foreign.resolve_in_tree(tmp_path, "/opt/ld-x.so.1") is None
