"""Checkpoints of an arm64 guest: `pvperf run --arch aarch64 --checkpoint
DIR --checkpoint-on-output TEXT` saves the guest while `perf stat`
counts the cross-compiled loop, and `pvperf restore DIR` resumes it as
an arm64 guest (the architecture is part of the checkpoint: its RAM
starts at 0x40000000, its QEMU is qemu-system-aarch64).  The count that
comes out spans both runs and equals the analytic one (2N + 8d + 23,
tests/vm/test_aarch64_counting.py), so nothing was lost or counted twice
across the checkpoint.  The trigger is the guest saying the loop runs
(its task has the loop's name), never a number of seconds.
"""
import shutil
import subprocess

import pytest

from support import PROGRAMS, leftovers, perf_count, run_pvperf
from test_aarch64_counting import loop_counts

pytestmark = pytest.mark.vm

N = 1_000_000_000           # 2 G instructions: seconds under TCG
MARK = "pvperf-test: the loop counts"
SCRIPT = f"""
perf stat -x, -e instructions:u -o /tmp/stat.txt ./loop {N} &
until grep -qsx loop /proc/[0-9]*/comm; do sleep 0.1; done
echo "{MARK}"
wait
echo "=== stat"; cat /tmp/stat.txt
"""


@pytest.fixture(scope="module")
def share(tmp_path_factory):
    subprocess.run(["make", "-s", "-C", str(PROGRAMS), "aarch64"],
                   check=True)
    d = tmp_path_factory.mktemp("a64-ck-share")
    shutil.copy(PROGRAMS / "aarch64" / "loop", d / "loop")
    return d


def test_a_count_across_an_arm64_checkpoint_is_exact(share, tmp_path):
    ck = tmp_path / "ck"
    taken = run_pvperf(["run", "--arch", "aarch64", "--share", str(share),
                        "--checkpoint", str(ck), "--checkpoint-on-output",
                        MARK, "--", "sh", "-c", SCRIPT], timeout=600)
    assert taken.returncode == 0, taken.stdout[-2000:] + taken.stderr
    assert "=== stat" not in taken.stdout      # stopped mid-loop
    restored = run_pvperf(["restore", str(ck)], timeout=900)
    assert restored.returncode == 0, \
        restored.stdout[-2000:] + restored.stderr
    stat = restored.stdout.split("=== stat", 1)[1].splitlines()
    # One perf stat ran, across both QEMUs: one line for the event.
    assert sum(ln.count(",instructions:u,") for ln in stat) == 1, stat
    assert perf_count(stat, "instructions:u") == str(loop_counts(N)[0])
    assert leftovers() == []
