"""pvperf run --deterministic for a randomized mix of commands: the same
counts, kernel included, and the same samples every run, on x86_64 and
arm64.

The mix is drawn from a PRNG seeded with PVPERF_DET_SEED (a fresh seed
when unset; the seed and the mix are printed, and every assertion names
the seed): perf stat of a static program (hotcold) or a dynamically
linked one (qs) run from the share (relative or absolute path), from
/tmp or from the image (busybox); its counts on stdout or written to the
share; perf record sessions whose every sample goes to stdout; large
outputs.  It always ends with the case that once differed: a
kernel-inclusive perf stat -o /mnt/host/... of qs by its absolute path.
Each run gets a fresh copy of the same share (the share is an input:
docs/determinism.md).  The reference is the other runs: their stdout,
the files they wrote to the share and the digest of what they staged
must be identical (2 runs; 5 with PVPERF_SLOW=1).  Independent checks:
every stat counts a kernel part, and on x86_64 hotcold's instructions:u
equals valgrind's Ir.
"""
from __future__ import annotations

import os
import random
import re
import shutil

import pytest

from support import GUEST_ARCHES, Guest, leftovers, run_pvperf, sections, \
    valgrind_irefs

pytestmark = pytest.mark.vm

RUNS = 5 if os.environ.get("PVPERF_SLOW") == "1" else 2
SEED = int(os.environ.get("PVPERF_DET_SEED") or random.randrange(1 << 32))
EVENTS = "instructions,instructions:u,instructions:k,branches"
ARGV = {"hotcold": "5000", "qs": "30000"}
WHERE = ("rel", "abs", "tmp", "image")


def program(name: str, where: str) -> str:
    if where == "image":
        return "/bin/busybox seq 1 20000"
    path = {"rel": f"./{name}", "abs": f"/mnt/host/{name}",
            "tmp": f"/tmp/{name}"}[where]
    return f"{path} {ARGV[name]}"


def draw_mix(rng: random.Random) -> list[tuple[str, ...]]:
    """Steps (kind, ...): a stat of hotcold first (the valgrind check),
    two to four drawn steps, the issue's case last."""
    steps = [("stat", "hotcold", rng.choice(WHERE[:3]), "stdout")]
    for _ in range(rng.randint(2, 4)):
        kind = rng.choice(("stat", "stat", "record", "big"))
        name = rng.choice(("hotcold", "qs"))
        if kind == "stat":
            steps.append((kind, name, rng.choice(WHERE),
                          rng.choice(("stdout", "share"))))
        elif kind == "record":
            steps.append((kind, name, rng.choice(WHERE[:3]),
                          rng.choice(("instructions:u", "instructions"))))
        else:
            steps.append((kind, str(rng.randint(50000, 150000))))
    return steps + [("stat", "qs", "abs", "share")]


def script(steps) -> str:
    lines = ['sec() { echo "=== $1"; }', "cp hotcold qs /tmp/"]
    for i, step in enumerate(steps):
        lines.append(f"sec {i}-{step[0]}")
        if step[0] == "stat":
            _, name, where, to = step
            prog = program(name, where)
            if to == "share":
                lines += [f"perf stat -x, -e {EVENTS} -o /mnt/host/st{i} "
                          f"{prog} >/dev/null", f"grep -v '^#' /mnt/host/st{i}"
                          " | grep ."]
            else:
                lines.append(f"perf stat -x, -e {EVENTS} {prog} "
                             "2>&1 >/dev/null | grep .")
        elif step[0] == "record":
            _, name, where, event = step
            period = 50021 if event.endswith(":u") else 200003
            lines += [f"perf record -q -o /mnt/host/r{i}.data -e {event} "
                      f"-c {period} {program(name, where)} >/dev/null 2>&1",
                      f"perf script -i /mnt/host/r{i}.data -F ip,sym,period "
                      "2>/dev/null"]
        else:
            lines.append(f"seq 1 {step[1]}")
    return "\n".join(lines + ["sec end"])


def counts(lines: list[str]) -> dict[str, int]:
    return {f[2]: int(f[0]) for f in (ln.split(",") for ln in lines)
            if len(f) > 2 and f[0].isdigit()}


@pytest.fixture(scope="module", ids=str,
                params=[Guest(a) for a in sorted(GUEST_ARCHES)])
def mix_runs(request, tmp_path_factory):
    """A support.Guest's runs (PVPERF_GUEST_ARCHES selects them)."""
    arch = request.param.arch
    progs = GUEST_ARCHES[arch].build()
    opts = GUEST_ARCHES[arch].image()
    steps = draw_mix(random.Random(SEED))
    print(f"\nseed {SEED} ({arch}); steps: {steps}")
    runs = []
    for i in range(RUNS):
        share = tmp_path_factory.mktemp(f"mix-{arch}-{i}")
        for name in ARGV:
            shutil.copy2(progs / name, share / name)
        r = run_pvperf(["run", *opts, "--deterministic", "--share",
                        str(share), "--", "sh", "-c", script(steps)],
                       timeout=600)
        assert r.returncode == 0, f"seed {SEED}: " + r.stderr[-2000:]
        assert "end" in sections(r.stdout), f"seed {SEED}: {r.stdout[-2000:]}"
        runs.append((r.stdout, r.stderr, share))
    assert leftovers() == []
    return arch, progs, steps, runs


def test_every_count_and_sample_repeats(mix_runs):
    arch, _, steps, runs = mix_runs
    first_out, first_err, first_share = runs[0]
    digest = re.search(r"sha256 (\w+)", first_err)
    assert digest, first_err[-1000:]
    first = sections(first_out)
    for i, (out, err, share) in enumerate(runs[1:], 2):
        assert f"sha256 {digest.group(1)}" in err, f"seed {SEED}: run {i}"
        s = sections(out)
        for name in first:
            assert s.get(name) == first[name], \
                f"seed {SEED} {arch}: run {i}: section {name} differs"
        for f in sorted(first_share.iterdir()):
            assert (share / f.name).read_bytes() == f.read_bytes(), \
                f"seed {SEED} {arch}: run {i}: {f.name} differs"


def test_counts_have_a_kernel_part_and_match_valgrind(mix_runs):
    arch, progs, steps, runs = mix_runs
    s = sections(runs[0][0])
    for i, step in enumerate(steps):
        if step[0] == "stat":
            c = counts(s[f"{i}-stat"])
            assert c["instructions:k"] > 0 and c["instructions:u"] > 0, \
                f"seed {SEED} {arch}: step {i}: {s[f'{i}-stat']}"
            assert c["instructions"] >= c["instructions:u"]
        elif step[0] == "record":
            assert s[f"{i}-record"], f"seed {SEED} {arch}: step {i}: no sample"
    if arch == "x86_64":
        irefs = valgrind_irefs([str(progs / "hotcold"), ARGV["hotcold"]])
        assert counts(s["0-stat"])["instructions:u"] == irefs
