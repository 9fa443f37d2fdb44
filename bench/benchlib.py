"""Helpers shared by the benchmarks."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from pyhost import arch as arches, image  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
PROGRAMS = REPO / "tests" / "guest_programs"


def default_image(arch: arches.Arch | None = None) -> image.GuestImage:
    """The default image of arch (the host's by default), built (or
    rebuilt when stale) as pvperf would: another checkout sharing the
    cache may have replaced it meanwhile."""
    name = (arch or arches.host()).default_recipe
    return image.image_status(name) or image.build_image(name)


def arch_command(cmd: str, arch: arches.Arch) -> str | None:
    """cmd with each ./PROGRAM of tests/guest_programs as built for arch:
    the host's at the top, another architecture's in its own directory
    (aarch64/loop); None if one is not built for arch."""
    if arch.name == arches.host().name:
        return cmd
    cmd = cmd.replace("./", f"./{arch.name}/")
    paths = [w.strip("'") for w in cmd.split() if w.startswith(("./", "'./"))]
    return cmd if all((PROGRAMS / p).exists() for p in paths) else None


def task_clock_ms(perf_stat_stderr: str) -> float:
    """task-clock (ms) from the guest's `perf stat -x,` output."""
    for line in perf_stat_stderr.splitlines():
        f = line.split(",")
        if len(f) > 2 and f[2] == "task-clock":
            return float(f[0])
    raise SystemExit(f"bench: no task-clock in output:\n{perf_stat_stderr}")


def marked_runs(argv: list[str], cmd: str, events: str, reps: int
                ) -> list[dict[str, float]]:
    """The counts of ``reps`` runs of `perf stat -x, -e EVENTS CMD` in one
    guest, booted by argv + [script]: per run {event: value} (task-clock
    in ms, EVENTS' first) and "wall", the host's ms between its reading
    of two markers the guest prints around the run: what a run costs in
    host time even when the guest's clock is virtual (icount: task-clock
    then counts instructions)."""
    script = (f"i=0; while [ $i -lt {reps} ]; do i=$((i + 1)); "
              f"echo @start; perf stat -x, -e {events} {cmd} >/dev/null; "
              f"echo @end; done")
    proc = subprocess.Popen([*argv, script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    walls, t0 = [], 0.0
    for line in proc.stdout:
        if line.startswith("@start"):
            t0 = time.monotonic()
        elif line.startswith("@end"):
            walls.append((time.monotonic() - t0) * 1000)
    err = proc.stderr.read()
    if proc.wait() or len(walls) != reps:
        raise SystemExit(f"bench: {argv[:4]} exited {proc.returncode}:\n"
                         f"{err[-2000:]}")
    found: list[dict[str, float]] = []
    for line in err.splitlines():
        f = line.split(",")
        if len(f) > 2 and f[0].replace(".", "").isdigit():
            if f[2] == "task-clock":
                found.append({})
            found[-1][f[2]] = float(f[0])
    for run, wall in zip(found, walls):
        run["wall"] = wall
    return found
