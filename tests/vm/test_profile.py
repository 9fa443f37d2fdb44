"""pvperf profile end to end, on every guest architecture: the host's
code cache resolved to guest functions, kernel and user, per process,
against references independent of pvperf.

* resolution: >= 95% of the samples in QEMU's code cache map to guest code
  through the reverse map (QEMU's jitdump joined with pvperf-rmap.so);
* attribution: hotcold's hot/(hot+cold) of the host profile (guest-code-
  only view) within 3 points of the reference: valgrind callgrind's
  per-function instruction ratio of tests/guest_programs/hotcold.c on
  x86_64 (functions placed by `nm`); on arm64 the analytic split of
  aarch64/hotcold.c, whose hot() and cold() are written in assembly with
  the same loop shape, so their instruction counts are known by
  construction (4802 and 1202 a call, read off `aarch64-linux-gnu-objdump
  -d`: mov, 3 x 1600 or 3 x 400, ret) and the host time QEMU spends in
  them is in that ratio; every arm64 sample named hot or cold lies in
  that function (`aarch64-linux-gnu-nm`), and the guest kernel resolves
  too;
* code-cache flushes (x86_64: codechurn.c rewrites its own x86 code):
  codechurn keeps rewriting 4096 blocks of its own code, so with a 16 MiB
  code buffer QEMU flushes it several times while the profile runs and
  reuses its addresses for other code; the hot/cold ratio must still
  match valgrind's, and QEMU's timeless -perfmap, asked about the same
  samples, must be seen to go wrong (else the test would not exercise
  address reuse);
* processes: on x86_64 two concurrent processes of one static-pie
  hotcold (two symlinks, so two comms, one page cache: their TBs are
  shared, each process at its own ASLR base) get their own samples: each
  process's share of hot+cold matches valgrind's instruction counts of
  the two commands, every sample's address lies in its own process's
  mapping, and some samples ran TBs the other process translated.  On
  arm64 two processes of the dynamically linked aarch64/rand (two
  symlinks, two comms) map the guest's libc.so.6 at two ASLR addresses
  and spend their time in libc's random_r, N calls each on the same
  path: random_r is one row, not one per address; each process's
  samples lie in its own libc mapping; the bigger process's share of
  them is its share of the calls (3:1) within 3 points (or 3 standard
  deviations of a share of that many samples) at smp 1; at most 1 % of
  the code-cache samples are [unknown]: not resolved to a translation, or
  in no known process, or (in the two processes) in no named function;
  the PLT stubs are named NAME@plt as objdump names them.  At smp 2
  (MTTCG: one host thread per vCPU, each with its own timeline) the two
  are pinned to a vCPU each (taskset in the guest), and every sample of
  vCPU n's host thread belongs to the process pinned to n, exactly; the
  shares of host time there follow the other core's load (15 points);
  smp 1 with PVPERF_SLOW=1.
  (pvperf's own wrapper runs busybox, which Debian strips: its samples
  resolve to addresses in busybox, not to names.)

riscv64 runs arm64's checks on its own programs (riscv64/hotcold.c: li,
add/addi/bnez x 1600 or 400, ret; riscv64/rand), its reverse map keyed
by satp's page-table number.

`./hotcold 300000` runs about 4 s under the profile (plugin + jitdump),
so the > 1000 code-cache samples the checks rest on come with a margin
(arm64's hotcold 150000: > 500).
"""
from __future__ import annotations

import functools
import json
import math
import os
import shutil
import subprocess
from collections import Counter

import pytest

from support import REPO, Guest, on, run_pvperf, valgrind_irefs

# host_timing: every check rests on the host's profile of QEMU, whose
# shares another guest on the next core would disturb: run alone
# (scripts/test.sh)
pytestmark = [pytest.mark.vm, pytest.mark.host_timing]

X86, ARM64 = Guest("x86_64", 1), Guest("aarch64", 1)
RV64 = Guest("riscv64", 1)
CFLAGS = ["-O2", "-static", "-nostdlib", "-fno-pic", "-no-pie",
          "-fno-stack-protector", "-fcf-protection=none",
          "-fno-asynchronous-unwind-tables", "-fno-omit-frame-pointer",
          "-Wall", "-Werror"]
PIE_CFLAGS = ["-O2", "-static-pie", "-nostdlib", "-fPIE",
              "-fno-stack-protector", "-fcf-protection=none",
              "-fno-asynchronous-unwind-tables", "-fno-omit-frame-pointer",
              "-Wall", "-Werror"]


# arm64's and riscv64's (their hotcold.c)
HOT_INSNS, COLD_INSNS = 1 + 3 * 1600 + 1, 1 + 3 * 400 + 1
BIG, SMALL = 15_000_000, 5_000_000          # arm64's and riscv64's rand


@pytest.fixture(scope="module")
def share(request, tmp_path_factory):
    """The programs a support.Guest profiles, in a share: on x86_64
    compiled here (a static-pie hotcold too), the big and small aliases
    of the two-process tests."""
    guest = request.param
    d = tmp_path_factory.mktemp(f"share-{guest}")
    if guest.arch != "x86_64":
        programs = guest.a.build()
        for name in ("hotcold", "rand"):
            shutil.copy(programs / name, d / name)
        two = "rand"
    else:
        programs = guest.a.programs
        for name, flags in (("hotcold", CFLAGS), ("codechurn", CFLAGS),
                            ("hotcold_pie", PIE_CFLAGS)):
            src = programs / ("hotcold.c" if name == "hotcold_pie"
                              else f"{name}.c")
            subprocess.run(["gcc", *flags, "-o", str(d / name), str(src)],
                           check=True)
        two = "hotcold_pie"
    for alias in ("big", "small"):
        os.symlink(two, d / alias)
    return guest, d


def callgrind_self_ir(out_text: str) -> Counter:
    """Self Ir per function entry address from a callgrind.out file (the
    program has no debug info, so callgrind names functions by address):
    cost lines under each fn=, except the inclusive line after calls=."""
    names, ir, fn, skip = {}, Counter(), None, False
    for line in out_text.splitlines():
        if line.startswith("fn="):
            key, _, label = line[3:].partition(" ")
            if label:
                names[key] = label
            fn = names.get(key, key)
        elif line.startswith("cfn="):
            key, _, label = line[4:].partition(" ")
            if label:
                names[key] = label
        elif line.startswith("calls="):
            skip = True
        elif fn and line[:1] and (line[0].isdigit() or line[0] in "+-"):
            if skip:
                skip = False
                continue
            ir[fn] += int(line.split()[1])
    return ir


def callgrind_ratio(prog, *args: str) -> float:
    """hot / (hot + cold) of valgrind callgrind's self Ir."""
    if shutil.which("valgrind") is None:
        pytest.skip("valgrind missing (apt-get install valgrind)")
    out = prog.parent / f"cg.{prog.name}.out"
    subprocess.run(["valgrind", "--tool=callgrind",
                    f"--callgrind-out-file={out}", str(prog), *args],
                   check=True, capture_output=True)
    ir = callgrind_self_ir(out.read_text())
    out.unlink()
    if "hot" not in ir:         # named by address: place them with nm
        nm = subprocess.run(["nm", str(prog)], capture_output=True,
                            text=True, check=True).stdout
        addr = {parts[2]: int(parts[0], 16) for parts in
                (line.split() for line in nm.splitlines())
                if len(parts) == 3}
        ir = {name: ir.get(f"{addr[name]:#018x}", 0)
              for name in ("hot", "cold")}
    hot, cold = ir["hot"], ir["cold"]
    assert hot and cold, ir
    return hot / (hot + cold)


def profile(share, out, *args) -> tuple[dict, dict]:
    """`pvperf profile` of the guest of a share fixture: (summary,
    session)."""
    guest, d = share
    arm64 = guest.arch != "x86_64"            # a foreign guest
    smp = ["--smp", str(guest.smp)] if guest.smp != 1 else []
    r = run_pvperf(["profile", *guest.a.run_options, *smp, "--output",
                    str(out), "--share", str(d), *args],
                   timeout=600 if arm64 else 400)
    assert r.returncode == 0, r.stderr[-3000:]
    assert not list(d.glob(".pvperf-profile-*"))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["meta"]["arch"] == guest.arch
    assert f"qemu-system-{guest.arch}" in summary["meta"]["target"]
    assert summary["samples_code_cache"] > (500 if arm64 else 1000), \
        summary["meta"]
    return summary, json.loads((out / "session.json").read_text())


def resolution_rate(summary: dict) -> float:
    return summary["samples_code_cache_resolved"] / \
        summary["samples_code_cache"]


def hot_share(rows) -> float:
    guest = {row["symbol"]: row["samples"] for row in rows}
    return guest["hot"] / (guest["hot"] + guest["cold"])


def nm_ranges(guest: Guest, prog) -> dict[str, tuple[int, int]]:
    """Function name -> [start, end) from the guest's binutils' nm."""
    out = subprocess.run([guest.a.tool("nm"), "-S", str(prog)],
                         capture_output=True, text=True, check=True).stdout
    return {p[3]: (int(p[0], 16), int(p[0], 16) + int(p[1], 16))
            for p in (line.split() for line in out.splitlines())
            if len(p) == 4 and p[2] in "tT"}


def x86_64_hotcold(summary: dict, session: dict, out, d) -> None:
    """The session's files, and the timeline named the command's process:
    it has the most samples, and at least those of hotcold's own
    functions (its kernel time on top).  Not a share of all samples: how
    much the guest's other processes (the run script's sh, grep, mv)
    weigh against 300,000 iterations depends on the guest kernel and its
    perf (6.12: hotcold 88 %)."""
    assert all(row["space"] in ("emulator", "guest-kernel", "guest-user")
               for row in summary["top"])
    meta = summary["meta"]
    pid = meta["qemu_pid"]
    assert meta["rmap_unmatched"] == 0 and not meta["rmap_truncated"]
    assert (out / f"perf-{pid}.map").exists()
    assert (out / f"jit-{pid}.dump").stat().st_size > 0
    assert not (REPO / f"/tmp/perf-{pid}.map").exists()
    for name in ("stacks.folded", "flamegraph.svg", "session.json",
                 "report.txt", "annotate.txt"):
        assert (out / name).stat().st_size > 0
    procs = {row["comm"]: row["samples"] for row in summary["processes"]}
    own = sum(row["samples"] for row in summary["guest_only"]
              if row["symbol"] in ("hot", "cold", "tick", "main_sp"))
    assert max(procs, key=procs.get) == "hotcold", procs
    assert procs["hotcold"] >= own > 0.5 * summary["samples_code_cache"], (
        procs, own)


def foreign_hotcold(guest: Guest, loop_insn: str, summary: dict,
                    session: dict, out, d) -> None:
    """Every sample named hot or cold ran code inside that function; the
    timeline named the program's process; the guest kernel resolves too
    (System.map of the nokaslr boot); the guest listing is the
    architecture's code (its loop's count-down, ``loop_insn``)."""
    ranges = nm_ranges(guest, d / "hotcold")
    for s in session["samples"]:
        if s.get("resolved") and s["symbol"] in ("hot", "cold"):
            lo, hi = ranges[s["symbol"]]
            assert lo <= s["guestpc"] < hi, (s["symbol"], hex(s["guestpc"]))
    rows = {row["symbol"]: row["samples"] for row in summary["guest_only"]}
    procs = {row["comm"]: row["samples"] for row in summary["processes"]}
    assert procs.get("hotcold", 0) > 0.9 * (rows["hot"] + rows["cold"])
    kernel = [s for s in session["samples"] if s.get("resolved")
              and s["space"] == "guest-kernel"]
    assert kernel and all(not s["symbol"].startswith("[guest kernel")
                          for s in kernel)
    print(f"{len(kernel)} guest-kernel samples")
    assert loop_insn in (out / "annotate.txt").read_text()


def hotcold_reference(guest: Guest, d) -> float:
    """hot/(hot+cold): callgrind's on the host (x86_64), the analytic
    split (arm64, riscv64)."""
    if guest.arch != "x86_64":
        return HOT_INSNS / (HOT_INSNS + COLD_INSNS)
    reference = callgrind_ratio(d / "hotcold", "200")
    assert abs(reference - 0.8) < 0.01
    return reference


# Each architecture's hotcold argument, its own checks of the session,
# and the files `pvperf report` renders again the same.
HOTCOLD = {
    "x86_64": ("300000", x86_64_hotcold, ("report.txt", "summary.json",
                                          "stacks.folded",
                                          "perf-report.txt")),
    "aarch64": ("150000", functools.partial(foreign_hotcold, ARM64, "subs"),
                ("report.txt", "annotate.txt")),
    "riscv64": ("150000", functools.partial(foreign_hotcold, RV64, "bnez"),
                ("report.txt", "annotate.txt")),
}


@on(X86, ARM64, RV64, fixture="share")
def test_hotcold_profile_matches_the_reference(share, tmp_path):
    guest, d = share
    n, checks, rendered = HOTCOLD[guest.arch]
    reference = hotcold_reference(guest, d)
    out = tmp_path / "prof"
    summary, session = profile(share, out, "--", "./hotcold", n)
    rate = resolution_rate(summary)
    assert rate >= 0.95, rate
    share_hot = hot_share(summary["guest_only"])
    assert abs(share_hot - reference) <= 0.03, (share_hot, reference)
    print(f"{guest.arch} hotcold: {100 * rate:.1f}% of code-cache samples "
          f"resolved, hot/(hot+cold) {100 * share_hot:.1f}% (reference "
          f"{100 * reference:.2f}%)")
    checks(summary, session, out, d)
    # Record once, render many: `pvperf report` re-renders the session
    # the same (the host's perf report of perf.data included; it reads
    # the guest's architecture from the session).
    recorded = {f: (out / f).read_text() for f in rendered}
    for f in recorded:
        (out / f).unlink()
    r = run_pvperf(["report", str(out)])
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout == recorded["report.txt"]
    def untipped(text: str) -> list[str]:     # perf report ends in a tip
        return [line for line in text.splitlines()           # of the day
                if not line.startswith("# (Tip:")]
    for f, text in recorded.items():
        assert untipped((out / f).read_text()) == untipped(text), f


@on(X86, fixture="share")
def test_flushes_mid_profile_do_not_misattribute(share, tmp_path):
    reference = callgrind_ratio(share[1] / "codechurn", "2000", "100")
    out = tmp_path / "prof"
    summary, _ = profile(share, out, "--tb-size", "8", "--compare-perfmap",
                         "--", "./codechurn", "200000", "10000")
    meta = summary["meta"]
    assert meta["rmap_flushes_in_window"] >= 3, meta
    rate = resolution_rate(summary)
    assert rate >= 0.95, rate
    share_hot = hot_share(summary["guest_only"])
    assert abs(share_hot - reference) <= 0.03, (share_hot, reference)
    cmp = meta["perfmap_comparison"]
    print(f"codechurn, {meta['rmap_flushes_in_window']} flushes: reverse "
          f"map {100 * rate:.1f}% resolved, hot/(hot+cold) "
          f"{100 * share_hot:.1f}% (valgrind {100 * reference:.1f}%); "
          f"perfmap {cmp}")
    # QEMU's perfmap has no time: where flushes reused an address, it
    # names whatever was written there last
    assert cmp["perfmap_agrees_with_rmap"] < 0.9, cmp
    assert not (REPO / f"/tmp/perf-{meta['qemu_pid']}.map").exists()
    assert (out / "qemu-perf.map").stat().st_size > 0
    # QEMU's perfmap names its prologue (tcg_prologue_init's
    # perf_report_prologue): pvperf's "[tcg prologue]" starts there and
    # covers it (up to the first TB: the prologue and its alignment)
    (start, size), = [(int(a, 16), int(b, 16)) for a, b, name in
                      (ln.split(maxsplit=2) for ln in
                       (out / "qemu-perf.map").read_text().splitlines())
                      if name == "tcg-prologue-buffer"]
    lo, hi = meta["tcg_prologue"]
    assert lo == start and start + size <= hi <= start + 4096, \
        (hex(start), size, hex(lo), hex(hi))


def own_mapping(session: dict, pid: int) -> tuple[int, int]:
    """The hotcold_pie mapping of process ``pid``."""
    maps = session["processes"][str(pid)]["maps"]
    spans = [(lo, hi) for lo, hi, _, path in maps
             if path.endswith("/hotcold_pie")]
    assert len(spans) == 1, maps
    return spans[0]


@on(X86, fixture="share")
def test_two_processes_of_one_program_keep_their_samples(share, tmp_path):
    big, small = "300000", "100000"
    d = share[1]
    reference_hot = callgrind_ratio(d / "hotcold_pie", "200")
    ir_big = valgrind_irefs([str(d / "hotcold_pie"), big])
    ir_small = valgrind_irefs([str(d / "hotcold_pie"), small])
    reference_big = ir_big / (ir_big + ir_small)
    out = tmp_path / "prof"
    summary, session = profile(share, out, "--", "sh", "-c",
                               f"./big {big} & ./small {small} & wait")
    assert resolution_rate(summary) >= 0.95
    user = [s for s in session["samples"] if s.get("resolved")
            and s["symbol"] in ("hot", "cold")]
    per = Counter(s["comm"] for s in user)
    assert set(per) == {"big", "small"}, per
    both = per["big"] + per["small"]
    share_big = per["big"] / both
    # 3 standard deviations of a share of that many samples (a quiet
    # host: ~4,900 samples, sd 0.6 points), plus what samples the host's
    # perf lost could shift: small ends first and big runs on alone, so
    # losses bunched in time are not spread evenly over the two (at most
    # lost/(both + lost), were they all one process's); at least 3
    # points.  A clean-clone CI failed a fixed 3 points.  Samples given
    # to the wrong process, or split evenly, are 25 points or more off.
    lost = summary["meta"]["lost_samples"]
    tol = max(0.03, 3 * math.sqrt(reference_big * (1 - reference_big)
                                  / both) + lost / (both + lost))
    assert abs(share_big - reference_big) <= tol, (share_big, reference_big,
                                                   both, lost)
    pids = {s["comm"]: s["pid"] for s in user}
    spans = {comm: own_mapping(session, pid) for comm, pid in pids.items()}
    assert spans["big"] != spans["small"]
    for s in user:
        lo, hi = spans[s["comm"]]
        assert lo <= s["guestpc"] < hi, (s["comm"], hex(s["guestpc"]))
    for comm in ("big", "small"):
        rows = Counter(s["symbol"] for s in user if s["comm"] == comm)
        n = rows["hot"] + rows["cold"]
        share_hot = rows["hot"] / n
        # +-3 points, or 3 standard deviations of a share of n samples if
        # wider: "small" gets ~120 host samples (sd 3.6 points; a CI run
        # failed at 3.06 points off with 121)
        tol = max(0.03, 3 * math.sqrt(reference_hot * (1 - reference_hot) / n))
        assert abs(share_hot - reference_hot) <= tol, (comm, share_hot, n)
    # the two shared TBs: one process ran the other's translations
    placements = Counter(s["placement"] for s in user)
    assert placements["relocated"] > 0.1 * len(user), placements
    print(f"two processes: big {100 * share_big:.1f}% of {both} samples "
          f"({lost} lost; valgrind {100 * reference_big:.1f}%), placements "
          f"{dict(placements)}")


def libc_mapping(session: dict, pid: int) -> tuple[int, int]:
    """Process ``pid``'s executable libc.so.6 mapping."""
    spans = [(lo, hi) for lo, hi, _, path in
             session["processes"][str(pid)]["maps"]
             if path.endswith("/libc.so.6")]
    assert len(spans) == 1, session["processes"][str(pid)]
    return spans[0]


def two_processes(smp: int) -> str:
    """The shell command of big and small at once: at smp 2 each pinned
    to a vCPU of its own (vCPU n is QEMU's host thread "CPU n/TCG")."""
    if smp == 1:
        return f"./big {BIG} & ./small {SMALL} & wait"
    return f"taskset -c 0 ./big {BIG} & taskset -c 1 ./small {SMALL} & wait"


# arm64 at smp 1 with PVPERF_SLOW=1 only: its smp 2 run makes the same
# checks across two vCPU threads (and hotcold's profile is at smp 1)
@on(Guest("aarch64", 1, slow=True), Guest("aarch64", 2), Guest("riscv64", 2),
    fixture="share")
def test_two_processes_sharing_libc(share, tmp_path):
    reference_big = BIG / (BIG + SMALL)
    out = tmp_path / "prof"
    summary, session = profile(share, out, "--", "sh", "-c",
                               two_processes(share[0].smp))
    cc = summary["samples_code_cache"]
    unresolved = cc - summary["samples_code_cache_resolved"]
    unnamed = sum(1 for s in session["samples"] if s.get("resolved")
                  and s["space"] == "guest-user" and (
                      s["pid"] is None or s["comm"] in ("big", "small")
                      and s["symbol"].startswith("[guest")))
    assert unresolved + unnamed <= 0.01 * cc, (unresolved, unnamed, cc)
    rows = [row for row in summary["guest_only"]
            if row["symbol"] == "random_r"]
    assert len(rows) == 1, summary["guest_only"]
    user = [s for s in session["samples"] if s.get("resolved")
            and s["symbol"] == "random_r"]
    assert rows[0]["samples"] == len(user)
    per = Counter(s["comm"] for s in user)
    assert set(per) == {"big", "small"}, per
    pids = {s["comm"]: s["pid"] for s in user}
    spans = {comm: libc_mapping(session, pid) for comm, pid in pids.items()}
    assert spans["big"] != spans["small"]          # ASLR: two addresses
    for s in user:
        lo, hi = spans[s["comm"]]
        assert lo <= s["guestpc"] < hi, (s["comm"], hex(s["guestpc"]))
    n = len(user)
    share_big = per["big"] / n
    lost = summary["meta"]["lost_samples"]
    if share[0].smp == 1:
        # one vCPU thread, the two taking turns on it: a call costs the
        # same host time in either, so the shares of samples are the
        # shares of calls
        tol = max(0.03, 3 * math.sqrt(reference_big * (1 - reference_big)
                                      / n))
    else:
        # Each process on its own vCPU, so its own host thread: every
        # sample of a thread belongs to the process pinned to its vCPU,
        # exactly (the guest kernel's affinity is the reference).
        own = {"CPU 0/TCG": "big", "CPU 1/TCG": "small"}
        wrong = Counter((s["thread"], s["comm"]) for s in user
                        if own.get(s["thread"]) != s["comm"])
        assert not wrong, wrong
        # The shares of samples are shares of host time, and a call's
        # host time on one thread depends on what the other host core
        # runs meanwhile (caches, the memory bus, a second hardware
        # thread), which changes when small ends and big goes on alone:
        # big's share moved from 69.8 % to 79.5 % against 75 % over 24
        # profiles (2026-11-29), under load and not.  15 points still
        # tell 3:1 from an even split or swapped processes.
        tol = 0.15
    assert abs(share_big - reference_big) <= tol, (share_big, n, lost)
    # the PLT stubs the calls go through are named as objdump names them
    stubs = Counter(s["symbol"] for s in session["samples"]
                    if s.get("resolved") and s["comm"] in ("big", "small")
                    and s["dso"].endswith("/rand"))
    assert "random_r@plt" in stubs and "_init" not in stubs, stubs
    placements = Counter(s["placement"] for s in user)
    print(f"{share[0].arch} rand x2, smp {share[0].smp}: random_r {n} samples, big "
          f"{100 * share_big:.1f}% (calls {100 * reference_big:.0f}%), "
          f"{unresolved + unnamed} of {cc} code-cache samples unnamed, "
          f"{lost} lost, placements {dict(placements)}")
