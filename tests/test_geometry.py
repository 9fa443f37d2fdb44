"""The host's geometry checks (pyhost/pmu/geometry.py) accept exactly what
the plugin's do: the cases of the plugin's C unit test
(qemu_plugin/tests/models_test.c, run by `make check`), read from its
source, through the Python parsers."""
import re

import pytest

from pyhost.pmu import geometry

from conftest import REPO

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
