"""The host's geometry checks (pyhost/pmu/geometry.py) accept exactly what
the plugin's do: the cases of the plugin's C unit test
(qemu_plugin/tests/models_test.c, run by `make check`), read from its
source, through the Python parsers."""
import re

import pytest

from pyhost.pmu import geometry

from support import REPO

C_TEST = REPO / "qemu_plugin" / "tests" / "models_test.c"


def c_cases(function: str) -> list[tuple[str, bool]]:
    """The {"text", ok} table of a test function of models_test.c."""
    body = C_TEST.read_text().split(f"static void {function}(void)")[1]
    table = body.split("};")[0]
    return [(t, ok == "true") for t, ok in
            re.findall(r'\{\s*"([^"]*)",\s*(true|false)\s*\}', table)]


def accepts(parse, text: str) -> bool:
    try:
        parse(text)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("function,parse", [
    ("test_geometry", geometry.parse_geometry),
    ("test_tlb_geometry", geometry.parse_tlb)])
def test_python_checks_agree_with_the_plugin(function, parse):
    cases = c_cases(function)
    assert len(cases) >= 10
    assert [(t, accepts(parse, t)) for t, _ in cases] == cases


def test_defaults_are_valid():
    for text in (geometry.DEFAULT_I1, geometry.DEFAULT_D1,
                 geometry.DEFAULT_LL):
        geometry.parse_geometry(text)
    for text in (geometry.DEFAULT_ITLB, geometry.DEFAULT_DTLB):
        geometry.parse_tlb(text)


MODEL_CONFIG = REPO / "qemu_plugin" / "pvperf" / "model_config.c"
# penalty option -> the model counters it sets (model_config.c's table)
PENALTY_COUNTERS = {
    "L1": ("I1_MISS", "D1_READ_MISS", "D1_WRITE_MISS"),
    "LL": ("LL_IMISS", "LL_READ_MISS", "LL_WRITE_MISS"),
    "TLB": ("DTLB_READ_MISS", "DTLB_WRITE_MISS", "ITLB_MISS"),
    "BR": ("COND_MISS", "IND_MISS"),
}


def c_defaults() -> tuple[dict[str, str], dict[str, int]]:
    """The plugin's default geometries ("S,A,L"; TLBs "ENTRIES,A,PAGE")
    and penalties (per model counter), read from mcfg's initialiser."""
    src = MODEL_CONFIG.read_text()
    init = src.split("struct model_config mcfg = {")[1].split("\n};")[0]
    geo = {}
    for name, a, b, c in re.findall(
            r"\.(\w+) = \{ ([\d *]+), (\d+), (\d+) \}", init):
        size = eval(a, {})          # "128 * 4096": digits and '*' only
        geo[name] = f"{size // int(c)},{b},{c}" if "tlb" in name \
            else f"{size},{b},{c}"
    penalties = {k: int(v) for k, v in
                 re.findall(r"\[PVPERF_M_(\w+)\] = (\d+)", init)}
    return geo, penalties


def test_defaults_agree_with_the_plugin():
    """pvperf's documented defaults (results, help, bench) are the ones
    the plugin uses when an option is not given."""
    geo, penalties = c_defaults()
    assert geo == {"i1": geometry.DEFAULT_I1, "d1": geometry.DEFAULT_D1,
                   "ll": geometry.DEFAULT_LL, "itlb": geometry.DEFAULT_ITLB,
                   "dtlb": geometry.DEFAULT_DTLB}
    assert penalties == {ctr: geometry.DEFAULT_PENALTIES[name]
                         for name, ctrs in PENALTY_COUNTERS.items()
                         for ctr in ctrs}
