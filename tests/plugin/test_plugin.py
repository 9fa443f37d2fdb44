# SPDX-License-Identifier: GPL-2.0-or-later
"""Tests of the pvperf TCG plugin (qemu_plugin/) without a guest driver.

The guest is qemu_plugin/tests/pvtest.S, a freestanding multiboot kernel
that enters long mode, runs its kernel code in the kernel half and its user
code in ring 3, and issues pvperf hypercalls (marker stores) itself.  A
fake service (pvharness.FakeService) answers the hypercalls and records each counter
snapshot; expected counts come from objdump on the guest ELF, so they are
independent of QEMU, the plugin and capstone.

Needs qemu-system-x86_64 (override: PVPERF_QEMU=/path/to/qemu-system-x86_64)
and the build tools of qemu_plugin/Makefile, but no guest image.  Each run
boots in ~0.1 s; PVPERF_SKIP_VM=1 skips them with the other VM tests.
"""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pyhost import abi

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "qemu_plugin" / "tests"))
import pvharness as h  # noqa: E402
from support import make  # noqa: E402

pytestmark = [
    pytest.mark.skipif(
        not h.qemu_available(),
        reason=f"{h.QEMU} not found; set PVPERF_QEMU=/path/to/qemu-system-x86_64"),
    pytest.mark.skipif(os.environ.get("PVPERF_SKIP_VM") == "1",
                       reason="PVPERF_SKIP_VM=1 is set"),
]

U64 = (1 << 64) - 1


@pytest.fixture(scope="module")
def guest():
    h.build()
    return h.Guest(h.TESTS_DIR / "pvtest.elf")


def add(*parts):
    return tuple(map(sum, zip(*parts)))


def times(n, part):
    return tuple(n * x for x in part)


def loop(g, name):
    n = g.n({"r_loopA": "n_loopA", "r_loopB": "n_loopB", "r_loopC": "n_loopC",
             "r_loopF": "n_loopF", "r_loopD": "n_loopD", "r_loopE": "n_loopE",
             "r_loopAP": "n_loopAP"}[name])
    return times(n, g.count(name, name + "_end"))


def kernel(insns_branches):
    i, b = insns_branches
    return (i, 0, b, 0)


def expected_deltas(g):
    """(mark a, mark b) -> (insn kernel, insn user, branch kernel, branch user)."""
    pf_head = g.count("pf_entry", "r_pf_report")
    pf_report = g.count("r_pf_report", "r_pf_tail")
    pf_tail = g.count("r_pf_tail", "r_pf_end")
    reported_faults = g.n("n_loopF") + 2     # stores, call *(%rdi), call's push
    k34 = add(g.count("r_m3_post", "r_iret_end"),
              g.count("prepare_fault_pages", "int80_entry"),
              times(reported_faults, add(pf_head, pf_report, pf_tail)),
              add(pf_head, pf_tail),           # the instruction-fetch fault
              g.count("int80_entry", "r_m4_post"))
    u34 = add(g.count("user_entry", "r_loopC"), loop(g, "r_loopC"),
              g.count("r_loopC_end", "r_loopF"), loop(g, "r_loopF"),
              g.count("r_loopF_end", "r_user_end"),
              times(2, g.count("user_fn", "user_fn_end")),
              (1, 1))                          # the `ret` on the fetch-fault page
    return {
        (1, 2): kernel(add(g.count("r_m1_post", "r_loopA"), loop(g, "r_loopA"),
                           g.count("r_loopA_end", "r_m2_post"))),
        (2, 3): kernel(add(g.count("r_m2_post", "r_m2_jmp_end"), loop(g, "r_loopB"),
                           g.count("r_loopB_end", "r_m3_post"))),
        (3, 4): (k34[0], u34[0], k34[1], u34[1]),
        # Mark 5's reply turns counting off: the rest of its TB (one pass of
        # loop D, up to the jnz) still runs counted, nothing after it.
        (5, 6): kernel(g.count("r_m5_post", "r_loopD_end")),
        # Mark 6 turns it on: its own TB ends at the jmp; the next TB counts.
        (6, 7): kernel(g.count("r_m6_jmp_end", "r_m7_post")),
        (7, 8): kernel(add(g.count("r_m7_post", "r_loopE"), loop(g, "r_loopE"),
                           g.count("r_loopE_end", "r_m8_post"))),
        (101, 102): kernel(add(g.count("r_ap1_post", "r_loopAP"), loop(g, "r_loopAP"),
                               g.count("r_loopAP_end", "r_ap2_post"))),
    }


def run_with_service(g, smp, count, policy=None, silent=False):
    ram = h.GuestRam()
    svc = h.FakeService(ram.map, policy=policy, silent=silent)
    try:
        res = h.run_guest(h.TESTS_DIR / "pvtest.bin", ram=ram, smp=smp,
                          append="smp2" if smp > 1 else None,
                          plugin_opts=[f"sock={svc.sock_opt}", f"ram={ram.path}",
                                       f"count={count}"])
    finally:
        svc.close()
        ram.close()
    return res, svc.records


def marks(records, op_read):
    """vcpu -> {mark number: counters} for the PVPERF_OP_READ marks."""
    out = {}
    for r in records:
        if r.op == op_read:
            out.setdefault(r.vcpu, {})[r.args[0]] = r.counters
    return out


def deltas(records, k):
    by_vcpu = marks(records, k["PVPERF_OP_READ"])
    out = {}
    for m in by_vcpu.values():
        for a, b in [(1, 2), (2, 3), (3, 4), (5, 6), (6, 7), (7, 8), (101, 102)]:
            if a in m and b in m:
                out[(a, b)] = tuple((y - x) & U64 for x, y in zip(m[a], m[b]))
    return out


CONFIGS = [(1, "off"), (1, "on"), (2, "off"), (2, "on")]


@pytest.mark.parametrize("smp,count", CONFIGS)
def test_counts_are_exact(guest, smp, count):
    k = h.consts()
    res, records = run_with_service(guest, smp, count)
    assert res.exit_code == 1, (res.returncode, res.stdout, res.stderr)
    got = deltas(records, k)
    want = expected_deltas(guest)
    if smp == 1:
        want.pop((101, 102))
    assert got == want


def test_loop_b_crosses_a_page(guest):
    """Precondition of (2, 3): an insn straddling a page end, which the x86
    translator cuts off a TB (QEMU 7.2 still showed it to plugins; the
    count of loop B checks that nothing counts it twice)."""
    straddle = guest.n("r_loopB_straddle")
    assert straddle // 4096 != (straddle + 9) // 4096
    assert guest.n("r_loopB") // 4096 == straddle // 4096
    # and of (5, 6): mark 5's TB runs through one pass of loop D
    assert guest.n("r_m5_post") // 4096 == guest.n("r_loopD_end") // 4096


def test_smp1_and_smp2_agree(guest):
    k = h.consts()
    d1 = deltas(run_with_service(guest, 1, "on")[1], k)
    d2 = deltas(run_with_service(guest, 2, "on")[1], k)
    assert (101, 102) in d2
    for pair in [(1, 2), (2, 3), (3, 4), (5, 6), (6, 7), (7, 8)]:
        assert d1[pair] == d2[pair], pair


@pytest.mark.parametrize("smp", [1, 2])
def test_marker_reaches_service_with_gpa(guest, smp):
    k = h.consts()
    res, records = run_with_service(guest, smp, "off")
    assert res.exit_code == 1
    block = {0: guest.n("hblock0"), 1: guest.n("hblock1")}
    post = {1: "r_m1_post", 2: "r_m2_post", 3: "r_m3_post", 4: "r_m4_post",
            5: "r_m5_post", 6: "r_m6_post", 7: "r_m7_post", 8: "r_m8_post",
            101: "r_ap1_post", 102: "r_ap2_post"}
    ops = [r.op for r in records]
    assert ops[0] == k["PVPERF_OP_PROBE"]
    assert k["PVPERF_OP_FAULT"] not in ops          # handled in the plugin
    assert records[0].insn_vaddr == h.KBASE + guest.n("r_probe_post") - 6
    for r in records:
        assert r.gpa == block[r.vcpu]
        if r.op == k["PVPERF_OP_READ"]:
            assert r.insn_vaddr == h.KBASE + guest.n(post[r.args[0]]) - 6
    assert len(records) == 9 + (2 if smp == 2 else 0)


def test_user_marker_is_ignored(guest):
    k = h.consts()
    res, records = run_with_service(guest, 1, "off")
    assert all(r.gpa != guest.n("user_block") for r in records)
    mark4 = marks(records, k["PVPERF_OP_READ"])[0]
    m4 = [r for r in records if r.op == k["PVPERF_OP_READ"] and r.args[0] == 4][0]
    assert m4.args[1] == h.RET_SENTINEL & U64      # its ->ret never written
    assert 4 in mark4


def exit_value(probe_code, mark1_code):
    # pvtest.S ret_code: 0, 1, 2 = -ENODEV, 3 = -ETIMEDOUT, 4 = untouched
    return probe_code | (mark1_code << 3)


def test_no_sock_option_fails_hypercalls_with_enodev():
    h.build()
    ram = h.GuestRam()
    try:
        res = h.run_guest(h.TESTS_DIR / "pvtest.bin", ram=ram,
                          plugin_opts=[f"ram={ram.path}"])
    finally:
        ram.close()
    assert res.exit_code == exit_value(2, 2), res.stderr


def test_unreachable_service_fails_with_enodev():
    h.build()
    ram = h.GuestRam()
    try:
        res = h.run_guest(h.TESTS_DIR / "pvtest.bin", ram=ram,
                          plugin_opts=["sock=@pvperf-test-nobody-listens",
                                       f"ram={ram.path}"])
    finally:
        ram.close()
    assert res.exit_code == exit_value(2, 2), res.stderr
    assert "unreachable" in res.stderr


def test_silent_service_times_out_then_fails_fast(guest):
    k = h.consts()
    res, records = run_with_service(guest, 1, "off", silent=True)
    assert res.exit_code == exit_value(3, 2), res.stderr
    assert "timed out" in res.stderr
    assert res.seconds >= k["PVPERF_PROTO_TIMEOUT_MS"] / 1000
    assert res.seconds < k["PVPERF_PROTO_TIMEOUT_MS"] / 1000 + 10
    assert [r.op for r in records] == [k["PVPERF_OP_PROBE"]]


def test_without_plugin_hypercalls_are_plain_stores():
    h.build()
    res = h.run_guest(h.TESTS_DIR / "pvtest.bin")
    assert res.exit_code == exit_value(4, 4)


def test_without_ram_markers_are_ignored_but_counting_works():
    h.build()
    res = h.run_guest(h.TESTS_DIR / "pvtest.bin",
                      plugin_opts=["count=on", "verbose=on"])
    assert res.exit_code == exit_value(4, 4)
    assert "vcpu 0: insn k=" in res.stderr


def test_quiet_unless_verbose():
    h.build()
    res = h.run_guest(h.TESTS_DIR / "pvtest.bin", plugin_opts=["count=on"])
    assert res.exit_code == exit_value(4, 4)
    assert "pvperf" not in res.stderr


@pytest.mark.parametrize("opt,needle", [
    ("bogus=1", "bogus"),
    ("ramsize=12x", "ramsize=12x"),
    ("ramsize=-1", "ramsize=-1"),
    ("count=maybe", "count=maybe"),
    ("sock=", "sock="),
    ("sock=@" + "x" * 200, "sock=@"),
    ("ram=/dev/shm/pvperf-test-does-not-exist", "No such file"),
])
def test_bad_options_refuse_to_load(opt, needle):
    h.build()
    res = h.run_guest(h.TESTS_DIR / "pvtest.bin", plugin_opts=[opt], timeout=30)
    assert res.returncode == 1 and "Could not load plugin" in res.stderr
    assert needle in res.stderr


@pytest.mark.parametrize("qemu,target", [
    ("qemu-system-i386", "i386"),
    ("qemu-system-arm", "arm"),
])
def test_other_targets_refuse_to_load_naming_the_target(qemu, target):
    """Only a target with an architecture file (qemu_plugin/arch/targets.c)
    loads; any other refuses in one line that names it."""
    if not shutil.which(qemu):
        pytest.skip(f"{qemu} not installed")
    h.build()
    res = subprocess.run([qemu, "-M", "none", "-display", "none",
                          "-plugin", str(h.PLUGIN_SO)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and "Could not load plugin" in res.stderr
    ours = [line for line in res.stderr.splitlines()
            if line.startswith("pvperf:")]
    assert ours == [f"pvperf: cannot run on target {target}: "
                    "pvperf knows x86_64, aarch64, riscv64"], res.stderr


@pytest.mark.parametrize("qemu", ["qemu-system-aarch64",
                                  "qemu-system-riscv64"])
def test_other_architectures_targets_load(qemu):
    """arm64 and riscv64 have architecture files (qemu_plugin/arch/): the
    plugin installs; the machine-less QEMU then quits from its monitor."""
    if not shutil.which(qemu):
        pytest.skip(f"{qemu} not installed")
    h.build()
    res = subprocess.run([qemu, "-M", "none", "-display",
                          "none", "-monitor", "stdio", "-plugin",
                          f"{h.PLUGIN_SO},verbose=on"],
                         input="quit\n", capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    assert "pvperf: 1 vCPU(s), counting off" in res.stdout + res.stderr


def test_riscv64_registers_are_offered(tmp_path):
    """Every register riscv64's table names (qemu_plugin/arch/riscv64.c:
    x1-x31 and pc for samples and captures, satp, the page-table write's
    sources, tp) is one QEMU's gdb XML offers plugins on the guest image's
    CPU (pyhost/arch/riscv64.py), as both plugins find them at a vCPU's
    creation: else each names the register it misses.  The names QEMU
    10.0 offers: images/riscv64/plugin-registers-rv64.txt."""
    from pyhost import arch
    rv = arch.get("riscv64")
    if not shutil.which(rv.qemu):
        pytest.skip(f"{rv.qemu} not installed")
    h.build()
    make(h.PLUGIN_DIR, "-s", "pvperf-rmap.so",
                   check=True)
    res = subprocess.run(
        [rv.qemu, "-M", rv.machine, "-cpu", rv.cpu, "-S", "-nodefaults",
         "-display", "none", "-monitor", "stdio",
         "-plugin", f"{h.PLUGIN_SO},verbose=on",
         "-plugin", f"{h.PLUGIN_DIR / 'pvperf-rmap.so'},"
                    f"out={tmp_path / 'rmap.bin'},verbose=on"],
        input="quit\n", capture_output=True, text=True, timeout=60)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "pvperf: 1 vCPU(s)" in out and " 1 vCPUs, " in out, out
    assert "offers no register" not in out, out
    assert "register list lacks" not in out, out


def test_ram_size_limits():
    """RAM above PVPERF_MAX_RAM_MB is refused unless ramsize= limits the
    mapping; RAM beyond 4 GiB below it is mapped."""
    h.build()
    limit = abi.MAX_RAM_MB << 20
    big = h.GuestRam(size=limit + (1 << 20))    # sparse: costs no memory
    small = h.GuestRam()
    beyond_4g = h.GuestRam(size=6 << 30)
    try:
        res = h.run_guest(h.TESTS_DIR / "pvtest.bin",
                          plugin_opts=[f"ram={big.path}"], timeout=30)
        assert res.returncode == 1 and \
            f"{abi.MAX_RAM_MB} MiB" in res.stderr, res.stderr
        res = h.run_guest(h.TESTS_DIR / "pvtest.bin",
                          plugin_opts=[f"ram={big.path}", f"ramsize={1 << 30}"])
        assert res.exit_code == exit_value(4, 4), res.stderr
        res = h.run_guest(h.TESTS_DIR / "pvtest.bin",
                          plugin_opts=[f"ram={beyond_4g.path}"])
        assert res.exit_code == exit_value(4, 4), res.stderr
        res = h.run_guest(h.TESTS_DIR / "pvtest.bin",
                          plugin_opts=[f"ram={small.path}", f"ramsize={3 << 30}"],
                          timeout=30)
        assert res.returncode == 1 and "exceeds" in res.stderr
    finally:
        big.close()
        small.close()
        beyond_4g.close()


def test_classifier_and_models_unit():
    out = make(h.PLUGIN_DIR, "-s", "check", capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    # classify_test and models_test each print "N passed, 0 failed".
    summaries = re.findall(r"^(\d+) passed, (\d+) failed$", out.stdout, re.M)
    assert len(summaries) == 2 and all(int(p) > 0 and f == "0"
                                       for p, f in summaries), out.stdout
    # pvperf-rmap.so's address-space switch decoders, against objdump
    rmap = re.findall(r"^rmap_arch_test (\w+): (\d+) instructions .* "
                      r"(\d+) failed$", out.stdout, re.M)
    assert {a for a, n, f in rmap if int(n) > 0 and f == "0"} == {
        "x86_64", "aarch64", "riscv64"}, out.stdout
