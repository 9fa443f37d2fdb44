"""QEMU's prologue in a host profile (pyhost/profile/resolve.py): the
code buffer's head before its first TB is emulator code, named
"[tcg prologue]", not a code-cache sample left unresolved.  Addresses
from a riscv64 guest's profile at smp 2 (2026-11-29): QEMU's code
buffer mapped at 0x7f422c000000, its first TB at +0x100, and 51 samples
at +0x0 to +0x28 (a vCPU thread going in and out of translated code
while its vCPU idles)."""
from __future__ import annotations

from types import SimpleNamespace

from pyhost.profile.hostperf import Frame, PerfSample
from pyhost.profile.resolve import (PROLOGUE, Resolver, resolve_sample,
                                    tcg_prologue)

BUF = 0x7f422c000000
CODE_CACHE = [(BUF, BUF + 0x4000000)]
QEMU = "/usr/bin/qemu-system-riscv64"


def tbs(*starts):
    return [SimpleNamespace(host_start=s) for s in starts]


def test_the_prologue_is_the_gap_before_the_first_tb():
    assert tcg_prologue(CODE_CACHE, tbs(BUF + 0x280, BUF + 0x100)) == \
        (BUF, BUF + 0x100)


def test_no_prologue_without_translations_or_with_a_wide_gap():
    assert tcg_prologue(CODE_CACHE, []) is None
    assert tcg_prologue(CODE_CACHE, tbs(BUF + 0x100000)) is None
    assert tcg_prologue([(0x1000, 0x2000)], tbs(BUF + 0x100)) is None


def test_a_sample_in_the_prologue_is_emulator_code():
    r = Resolver(rmap=SimpleNamespace(generation_at=lambda t: 0),
                 kernel=None, user=None, host=None, code_cache=CODE_CACHE,
                 prologue=(BUF, BUF + 0x100))
    s = PerfSample("CPU 1/TCG", 8874, 35869.766841, [
        Frame(BUF + 0x24, "[unknown]", "//anon"),
        Frame(0x5a1000, "cpu_exec", QEMU)])
    out = resolve_sample(r, s)
    assert (out["space"], out["symbol"]) == ("emulator", PROLOGUE)
    assert not out["code_cache"] and not out["resolved"]
    assert out["host_stack"] == [PROLOGUE]
