"""A recipe's package_suites (pyhost/image/aptdir.py, recipe.py): an
image that installs such a package gets an apt context with that suite's
sources derived from the host's like its own suite's, its own suite
ranked first and the package pinned to the other; one without keeps the
plain context.  Here the pieces apt reads; apt's answer from the real
riscv64 lists is the valgrind image tests/vm/test_counting.py boots."""
from pyhost.image import aptdir
from pyhost.image.recipe import parse_package_suites

import pytest

HOST = {"debian.sources": (
    "Types: deb deb-src\nURIs: http://mirror.example/debian\n"
    "Suites: bookworm bookworm-updates\nComponents: main\n\n"
    "Types: deb\nURIs: http://mirror.example/debian-security\n"
    "Suites: bookworm-security\nComponents: main\n")}


@pytest.fixture
def host(monkeypatch, tmp_path):
    monkeypatch.setattr(aptdir, "host_sources",
                        lambda: {k: aptdir.deb822_binary_only(v)
                                 for k, v in HOST.items()})
    monkeypatch.setattr(aptdir, "host_codename", lambda: "bookworm")
    monkeypatch.setattr(aptdir, "HOST_PREFERENCES", tmp_path / "none")
    monkeypatch.setattr(aptdir, "cache_dir", lambda: tmp_path)
    return tmp_path


class FakeRecipe:
    arch, suite = "riscv64", "trixie"
    package_suites = {"valgrind": "sid"}
    packages: list = []
    perf_package, tools = "linux-perf", []

    def userland_from_debs(self):
        return True


class PerfFromSid(FakeRecipe):
    package_suites = {"valgrind": "sid", "linux-perf": "sid", "libc6": "sid"}


def test_an_image_without_the_package_keeps_the_plain_context(host):
    ctx = aptdir.for_recipe(FakeRecipe())
    assert ctx.directory == host / "apt" / "riscv64-trixie"
    assert ctx.pins == () and ctx.extra_suites == ()
    assert "APT::Default-Release" not in " ".join(map(str, ctx.options()))
    assert list(ctx.sources().values()) == [
        "Types: deb\nURIs: http://mirror.example/debian\n"
        "Suites: trixie\nComponents: main\n"]


def test_the_other_suite_joins_derived_alike_ranked_below_but_the_pin(host):
    ctx = aptdir.for_recipe(FakeRecipe(), ["strace", "valgrind"])
    assert ctx.directory == host / "apt" / "riscv64-trixie+sid"
    assert ctx.pins == (("valgrind", "sid"),)
    srcs = ctx.sources()
    assert sorted(srcs) == ["debian.sources", "sid-debian.sources"]
    assert srcs["sid-debian.sources"] == srcs["debian.sources"].replace(
        "Suites: trixie", "Suites: sid")
    opts = ctx.options()
    pairs = dict(o.split("=", 1) for o in opts[1::2])
    assert pairs["APT::Default-Release"] == "trixie"
    assert pairs["Dir::Etc::Preferences"] == str(ctx.preferences_file())
    assert ctx.preferences_file().parent == ctx.directory
    assert ctx.preferences() == ("\nPackage: valgrind\nPin: release n=sid\n"
                                 "Pin-Priority: 995\n")
    assert "valgrind/sid" in ctx.memo_key()


def test_a_missing_index_of_the_other_suite_is_named(host):
    ctx = aptdir.for_recipe(FakeRecipe(), ["valgrind"])
    lists = ctx.directory / "lists"
    lists.mkdir(parents=True)
    (lists / "m_debian_dists_trixie_main_binary-riscv64_Packages").touch()
    assert ctx.suites_without_lists() == ["sid"] and not ctx.has_lists()
    (lists / "m_debian_dists_sid_main_binary-riscv64_Packages.lz4").touch()
    assert ctx.suites_without_lists() == [] and ctx.has_lists()


def test_the_recipe_key_is_checked():
    assert parse_package_suites({"valgrind": "sid"}) == {"valgrind": "sid"}
    for bad in (["valgrind"], {"Valgrind": "sid"}, {"valgrind": 3}):
        with pytest.raises(ValueError):
            parse_package_suites(bad)


def test_perf_from_another_suite_pins_the_whole_set_in_every_image(host):
    """perf comes from .debs on riscv64: a recipe that takes it from sid
    pins sid's libc6 with it in the base image, and valgrind's closure of
    an image that adds it gets the same libc6 (the first closure
    unpacked wins: two libc6 versions would leave perf's libpython3.14
    without its GLIBC_2.42)."""
    base = aptdir.for_recipe(PerfFromSid())
    added = aptdir.for_recipe(PerfFromSid(), ["valgrind"])
    assert base.pins == added.pins == (("libc6", "sid"), ("linux-perf", "sid"),
                                       ("valgrind", "sid"))
    assert base.directory == host / "apt" / "riscv64-trixie+sid"
    assert "Package: libc6\nPin: release n=sid" in base.preferences()


def test_pin_sets_sharing_a_directory_keep_their_own_preferences(host):
    one = aptdir.for_recipe(FakeRecipe(), ["valgrind"])
    other = aptdir.for_recipe(PerfFromSid())
    assert one.directory == other.directory
    assert one.preferences_file() != other.preferences_file()
