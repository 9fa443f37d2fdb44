"""Helpers shared by the benchmarks, and where they find the checkout
(REPO, PROGRAMS): importing this module puts REPO on sys.path, so that a
benchmark imports pyhost after it."""
from __future__ import annotations

import subprocess
import sys
import tarfile
import tempfile
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


def qemu_pid(parent: int) -> int | None:
    """The QEMU process that `parent` started (directly or not), if any."""
    children: dict[int, list[int]] = {}
    comm: dict[int, str] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except (OSError, ValueError):
            continue
        pid, rest = int(d.name), stat.rsplit(")", 1)[1].split()
        comm[pid] = stat[stat.find("(") + 1:stat.rfind(")")]
        children.setdefault(int(rest[1]), []).append(pid)
    todo = list(children.get(parent, []))
    while todo:
        pid = todo.pop()
        if comm.get(pid, "").startswith("qemu-system"):
            return pid
        todo += children.get(pid, [])
    return None


def cpu_ms(pid: int | None) -> float:
    """Host CPU time (ms) the vCPU threads of QEMU process pid ("CPU
    0/TCG"...: guest code, its translation, the plugin's callbacks) have
    run so far.  Unlike wall or guest time it does not grow while the
    host's other load keeps QEMU waiting for a CPU.  (Other threads come
    and go, taking their time with them.)"""
    total = 0
    for t in Path(f"/proc/{pid}/task").glob("*") if pid else ():
        try:
            if (t / "comm").read_text().startswith("CPU "):
                total += int((t / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total / 1e6


def marked_runs(argv: list[str], cmd: str, events: str, reps: int,
                env: dict[str, str] | None = None) -> list[dict[str, float]]:
    """The counts of ``reps`` runs of `perf stat -x, -e EVENTS CMD` in one
    guest, booted by argv + [script]: per run {event: value} (task-clock
    in ms, EVENTS' first) and "wall", the host's ms between its reading
    of two markers the guest prints around the run: what a run costs in
    host time even when the guest's clock is virtual (icount: task-clock
    then counts instructions); "cpu", QEMU's host CPU ms between them
    (cpu_ms: the figure least moved by the host's other load)."""
    script = (f"i=0; while [ $i -lt {reps} ]; do i=$((i + 1)); "
              f"echo @start; perf stat -x, -e {events} {cmd} >/dev/null; "
              f"echo @end; done; sleep 1")  # QEMU alive while @end is read
    proc = subprocess.Popen([*argv, script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    walls, cpus, t0, c0, qemu = [], [], 0.0, 0.0, None
    for line in proc.stdout:
        if line.startswith("@start"):
            qemu = qemu or qemu_pid(proc.pid)
            t0, c0 = time.monotonic(), cpu_ms(qemu)
        elif line.startswith("@end"):
            walls.append((time.monotonic() - t0) * 1000)
            cpus.append(cpu_ms(qemu) - c0)
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
    for run, wall, cpu in zip(found, walls, cpus):
        run["wall"], run["cpu"] = wall, cpu
    return found


def build_qemu_plugin(source: str, out: Path, *extra: str) -> Path:
    """Build one of QEMU's own plugins (``source``: a path's tail inside
    QEMU's source, e.g. "contrib/plugins/cache.c") into ``out``, from the
    installed QEMU's orig tarball, which qemu_plugin/fetch-plugin-header.sh
    keeps beside the plugin header it prints the directory of."""
    inc = subprocess.run([str(REPO / "qemu_plugin" /
                              "fetch-plugin-header.sh")],
                         capture_output=True, text=True,
                         check=True).stdout.strip()
    tarball = next(Path(inc).parent.glob("download/*.orig.tar.*"))
    glib = subprocess.run(["pkg-config", "--cflags", "--libs", "glib-2.0"],
                          capture_output=True, text=True,
                          check=True).stdout.split()
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp, \
            tarfile.open(tarball) as tar:
        member = next(m for m in tar.getmembers()
                      if m.name.endswith("/" + source))
        member.name = Path(source).name
        tar.extract(member, tmp, filter="data")
        subprocess.run(["gcc", "-O2", "-shared", "-fPIC", f"-I{inc}",
                        str(Path(tmp) / member.name), "-o", str(out),
                        *extra, *glib], check=True)
    return out
