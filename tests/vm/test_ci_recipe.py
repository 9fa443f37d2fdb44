"""The CI recipe of docs/ci.md, run here end to end: its "gate: ..."
steps, in order, with its environment, against a base and a change of
a test program built from tests/guest_programs/loop.c.

The change puts a nop in the loop body: a regression the gate must fail
(compare exits 1), by exactly one instruction per iteration and no
branch (loop.c: dec; jnz per iteration); an unchanged program must pass
(exit 0).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
import yaml

from support import PROGRAMS, REPO, pvperf_cmd

pytestmark = pytest.mark.vm

RECIPE = REPO / "docs" / "ci" / "pvperf-gate.yml"
MAKEFILE = """CFLAGS := -O2 -static -nostdlib -fno-pic -no-pie \\
	-fno-stack-protector -fcf-protection=none \\
	-fno-asynchronous-unwind-tables
loop: loop.c freestanding.h freestanding_args.h
\t$(CC) $(CFLAGS) -o $@ $<
"""
LOOP = r'asm volatile("1: dec %0\n\tjnz 1b"'
MORE = r'asm volatile("1: nop\n\tdec %0\n\tjnz 1b"'


def source_tree(path, change: bool):
    path.mkdir()
    for header in ("freestanding.h", "freestanding_args.h"):
        shutil.copy(PROGRAMS / header, path)
    text = (PROGRAMS / "loop.c").read_text()
    if change:
        assert LOOP in text
        text = text.replace(LOOP, MORE)
    (path / "loop.c").write_text(text)
    (path / "Makefile").write_text(MAKEFILE)


def run_gate(tmp_path, change: bool) -> subprocess.CompletedProcess:
    recipe = yaml.safe_load(RECIPE.read_text())
    env = {**os.environ, **{k: str(v) for k, v in recipe["env"].items()}}
    source_tree(tmp_path / "base", change=False)
    source_tree(tmp_path / "new", change=change)
    env.update(PVPERF=" ".join(pvperf_cmd()), BASE_SRC=str(tmp_path / "base"),
               NEW_SRC=str(tmp_path / "new"))
    steps = [s for s in recipe["jobs"]["gate"]["steps"]
             if s.get("name", "").startswith("gate:")]
    assert [s["name"] for s in steps] == [
        "gate: build", "gate: count the base", "gate: count the change",
        "gate: compare"]
    for step in steps:
        r = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=tmp_path,
                           env=env, capture_output=True, text=True,
                           timeout=600)
        if step["name"] != "gate: compare":
            assert r.returncode == 0, step["name"] + "\n" + r.stderr[-2000:]
    return r


def values(path) -> dict[str, int]:
    return {e["name"]: e["value"] for e in json.loads(path.read_text())[
        "events"]}


def test_unchanged_program_passes(tmp_path):
    r = run_gate(tmp_path, change=False)
    print(r.stdout + r.stderr)                 # the table (pytest -s)
    assert r.returncode == 0, r.stdout + r.stderr
    assert values(tmp_path / "base.json") == values(tmp_path / "new.json")


def test_more_work_per_iteration_fails_the_gate(tmp_path):
    r = run_gate(tmp_path, change=True)
    print(r.stdout + r.stderr)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "REGRESSION" in r.stdout
    base, new = values(tmp_path / "base.json"), values(tmp_path / "new.json")
    iterations = 1000000                        # WORKLOAD: ./loop 1000000
    assert new["instructions:u"] - base["instructions:u"] == iterations
    assert new["branches:u"] == base["branches:u"]
