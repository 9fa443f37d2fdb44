"""pvperf's channels are private to the user who runs it: another user on
the same host must not read a guest's output or drive its PMU.

QMP, the virtio-serial ports (control, stdout, stderr), the
plugin<->service socket and the overflow interrupt's doorbell (its
ivshmem socketpair, eventfds and shared memory, a channel too since the
interrupt moved off the service's socket): another local user (here `nobody`, via
tests/foreign_client.py) is refused on every one while a command runs,
and a foreign client racing start-up neither gets in nor disturbs the run,
whose count is still exact (valgrind's Ir is the reference).  The run
directory that holds the service's socket during start-up is removed by
a SIGTERM there, and one a SIGKILL leaves is swept by the next run.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from pyhost.vm import channels

from parallel import make
from support import PROGRAMS, leftovers, pvperf_cmd, run_pvperf, \
    sigint_default, valgrind_irefs
from foreign_client import as_nobody

pytestmark = pytest.mark.vm

FOREIGN = Path(__file__).resolve().parents[1] / "foreign_client.py"
# /root (pyenv's python) is closed to other users: the system python.
PYTHON = "/usr/bin/python3"
CHANNELS = ("qmp", "control", "stdout", "stderr", "service", "doorbell")
N_LOOP = 100000


def foreign(*args: str, **kw) -> subprocess.Popen:
    if not Path(PYTHON).exists():
        pytest.skip(f"{PYTHON} missing (the foreign user's interpreter)")
    return subprocess.Popen([PYTHON, "-I", str(FOREIGN), *args], cwd="/",
                            preexec_fn=as_nobody, stdout=subprocess.PIPE,
                            stdin=subprocess.PIPE, text=True, **kw)


def qemu_child(pid: int) -> int:
    """The QEMU process pvperf ``pid`` started."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            comm = stat.with_name("comm").read_text()
        except OSError:
            continue
        if int(fields[1]) == pid and comm.startswith("qemu-system"):
            return int(stat.parent.name)
    raise AssertionError(f"pvperf {pid} has no QEMU child")


def qemu_options(value: str) -> dict[str, str]:
    """QEMU's key=value,... (',,' is an escaped comma)."""
    parts = re.split(r"(?<!,),(?!,)", value)
    return dict(p.partition("=")[::2] for p in parts)


def address_target(channel: str, value: str, kind_type: str) -> dict:
    if value.startswith("@"):
        return {"channel": channel, "kind": "abstract", "addr": value[1:],
                "type": kind_type}
    return {"channel": channel, "kind": "path", "addr": value,
            "type": kind_type}


def channel_targets(qemu: int) -> list[dict]:
    """How each channel can be reached, read from QEMU's command line."""
    argv = Path(f"/proc/{qemu}/cmdline").read_bytes().decode().split("\0")
    targets = []
    for opt, value in zip(argv, argv[1:]):
        o = qemu_options(value)
        if opt == "-chardev" and o.get("id") in CHANNELS:
            if "fd" in o:
                targets.append({"channel": o["id"], "kind": "procfd",
                                "addr": f"/proc/{qemu}/fd/{o['fd']}"})
            else:
                path = o["path"]
                if o.get("abstract") == "on":
                    path = "@" + path
                targets.append(address_target(o["id"], path, "stream"))
        elif opt == "-plugin" and "sock" in o:
            targets.append(address_target("service", o["sock"], "seqpacket"))
    return targets


def named_sockets(pids: dict[str, int]) -> list[dict]:
    """Every unix socket with a name (path or abstract) that pvperf or
    QEMU holds: whatever else the run might expose."""
    names = {}
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        f = line.split()
        if len(f) >= 8:
            names[f[6]] = (f[7], "seqpacket" if f[4] == "0005" else "stream")
    out = []
    for who, pid in pids.items():
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                m = re.fullmatch(r"socket:\[(\d+)\]", fd.readlink().name)
            except OSError:
                continue
            if m and m.group(1) in names:
                name, kind_type = names[m.group(1)]
                out.append(address_target(f"{who} fd {fd.name}", name,
                                          kind_type))
    return out


def doorbell_fds(pids: dict[str, int]) -> list[dict]:
    """The doorbell's eventfds and shared memory (a memfd) in pvperf and
    QEMU: descriptors without a name, which another user could only try
    to open through /proc."""
    out = []
    for who, pid in pids.items():
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                link = str(fd.readlink())
            except OSError:
                continue
            kind = "eventfd" if link == "anon_inode:[eventfd]" else \
                "memfd" if link.startswith("/memfd:pvperf-doorbell") else None
            if kind:
                out.append({"channel": f"{who} {kind}", "kind": "procfd",
                            "addr": str(fd)})
    return out


def wait_for(path: Path, proc: subprocess.Popen, timeout=90) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


def finish(proc: subprocess.Popen, timeout=120) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        raise AssertionError(f"pvperf hung; stderr:\n{err[-3000:]}")


def test_foreign_user_is_refused_on_every_channel(tmp_path):
    proc = subprocess.Popen(
        pvperf_cmd() + ["run", "--share", str(tmp_path), "--", "sh", "-c",
                        "touch started; while [ ! -e stop ]; do sleep 0.1;"
                        " done; echo done"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(tmp_path / "started", proc)
        qemu = qemu_child(proc.pid)
        targets = channel_targets(qemu)
        targets += named_sockets({"pvperf": proc.pid, "qemu": qemu})
        fds = doorbell_fds({"pvperf": proc.pid, "qemu": qemu})
        targets += fds
        prober = foreign("probe", json.dumps(targets))
        results = json.loads(prober.communicate(timeout=30)[0])
    finally:
        (tmp_path / "stop").touch()
        out, err = finish(proc)
    print(f"{'channel':<16} {'how a foreign user reaches it':<48} result")
    for r in results:
        print(f"{r['channel']:<16} {r['kind'] + ' ' + r['addr']:<48} "
              f"{r['result']}")
    assert (proc.returncode, out) == (0, "done\n"), err
    assert {r["channel"] for r in results} >= set(CHANNELS) | {
        "pvperf eventfd", "qemu eventfd", "qemu memfd"}, results
    assert [r for r in results if r["result"] == "connected"] == [], results
    assert leftovers() == []


def test_foreign_client_racing_startup_gets_nothing(tmp_path):
    racer = foreign("race")
    run = None
    try:
        assert racer.stdout.readline() == "racing\n"
        make(PROGRAMS, "-s", check=True)
        run = subprocess.Popen(
            pvperf_cmd() + ["run", "--share", str(PROGRAMS), "--", "perf",
                            "stat", "-x,", "-e", "instructions:u", "./loop",
                            str(N_LOOP)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # Only this run's sockets: other runs on the machine are not ours.
        racer.stdin.write(f"{run.pid}\n")
        racer.stdin.flush()
        out, err = finish(run)
    finally:
        racer.send_signal(signal.SIGTERM)
        summary = json.loads(racer.communicate(timeout=30)[0])
        if run is not None and run.poll() is None:
            run.kill()
    print(json.dumps(summary, indent=1))
    print(f"pvperf exited {run.returncode}; its stderr:\n{err[-2000:]}")
    assert summary["connected"] == [], summary
    assert summary["attempts"] > 0, "the racer never saw the run's socket"
    assert run.returncode == 0, err
    counted = [int(line.split(",")[0]) for line in err.splitlines()
               if ",instructions:u," in line]
    assert counted == [valgrind_irefs([str(PROGRAMS / "loop"), str(N_LOOP)])]
    assert leftovers() == []


def run_dirs(pid: int) -> list[Path]:
    return [p for parent in channels.run_dir_parents()
            for p in parent.glob(f"pvperf-{pid}-*")]


def sigint_ignored() -> None:
    """A Popen preexec_fn: start pvperf as a shell script starts `cmd &`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def kill_during_startup(tmp_path, sig, preexec=sigint_default, wait=True
                        ) -> tuple[subprocess.Popen, Path]:
    """Start `pvperf run`, send ``sig`` as soon as its run directory
    exists (QEMU is starting), and wait for it to end unless ``wait`` is
    false; return the process and the directory."""
    proc = subprocess.Popen(pvperf_cmd() + ["run", "--share", str(tmp_path),
                                            "--", "sleep", "30"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=preexec)
    deadline = time.monotonic() + 60
    while not (found := run_dirs(proc.pid)):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no run directory appeared"
        time.sleep(0.005)
    proc.send_signal(sig)
    if wait:
        proc.communicate(timeout=60)
    return proc, found[0]


def test_sigterm_during_startup_removes_the_run_dir(tmp_path):
    proc, run_dir = kill_during_startup(tmp_path, signal.SIGTERM)
    assert proc.returncode == 130
    assert not run_dir.exists()
    assert leftovers() == []


def test_sigterm_cleans_up_when_sigint_is_ignored(tmp_path):
    """A background job of a script (or a CI runner's) inherits SIGINT
    ignored, so asyncio installs no Ctrl-C handler; the runner's SIGTERM
    must still stop the VM cleanly (it used to kill pvperf outright:
    exit 143, no clean-up of its own)."""
    proc, run_dir = kill_during_startup(tmp_path, signal.SIGTERM,
                                        preexec=sigint_ignored)
    assert proc.returncode == 130
    assert not run_dir.exists()
    assert leftovers() == []


def sigkill_leaving_a_run_dir(tmp_path, attempts=5
                              ) -> tuple[subprocess.Popen, Path]:
    """SIGKILL a starting `pvperf run` while its run directory exists.

    pvperf removes the directory itself once the plugin has connected, so
    a kill sent as soon as the directory appears may land after that (CI
    saw it gone once, on a loaded host).  The run is stopped first
    (SIGSTOP: it can remove nothing then) and killed only if its directory
    is still there; otherwise it is killed and started again."""
    for _ in range(attempts):
        proc, run_dir = kill_during_startup(tmp_path, signal.SIGSTOP,
                                            wait=False)
        left = run_dir.exists()
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
        if left:
            return proc, run_dir
        assert not run_dirs(proc.pid)
    raise AssertionError(f"no run directory left in {attempts} kills")


def test_sigkill_during_startup_leaves_a_run_dir_the_next_run_sweeps(
        tmp_path):
    proc, run_dir = sigkill_leaving_a_run_dir(tmp_path)
    assert proc.returncode == -signal.SIGKILL
    assert run_dir.exists()             # nobody could remove it
    r = run_pvperf(["run", "--", "true"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert not run_dir.exists()
    assert leftovers() == []


def test_file_tail_reads_until_the_writer_is_gone():
    """The deterministic runs' output files: a tail reads what was
    written, waits while the writer lives, and ends at its exit."""
    import asyncio
    files = channels.OutputFiles(["stdout"])
    try:
        fd = os.open(files.chardev("stdout")[1].split("path=")[1], os.O_WRONLY)
        alive = [True]
        tail = files.tail("stdout", lambda: alive[0])

        async def scenario():
            os.write(fd, b"abc")
            assert await tail.read(2) == b"ab"
            assert await tail.read(10) == b"c"
            waiting = asyncio.ensure_future(tail.read(10))
            await asyncio.sleep(0.1)
            assert not waiting.done()          # nothing new, writer alive
            os.write(fd, b"de")
            assert await waiting == b"de"
            os.write(fd, b"f")
            alive[0] = False
            assert await tail.read(10) == b"f"     # written before the exit
            assert await tail.read(10) == b""
        asyncio.run(scenario())
        os.close(fd)
    finally:
        files.close()


def shm_and_tmp() -> set[str]:
    return {str(p) for d in (Path("/dev/shm"), Path("/tmp")) for p in d.iterdir()}


def sampling_run(tmp_path) -> subprocess.Popen:
    """`pvperf run` recording samples (doorbell interrupts) until killed;
    returns once the guest has started recording."""
    make(PROGRAMS, "-s", check=True)
    (tmp_path / "loop").write_bytes((PROGRAMS / "loop").read_bytes())
    (tmp_path / "loop").chmod(0o755)
    proc = subprocess.Popen(
        pvperf_cmd() + ["run", "--share", str(tmp_path), "--", "sh", "-c",
                        "echo 0 > /sys/module/pvperf/parameters/buffered; "
                        "touch started; perf record -q -e instructions:u "
                        "-c 100003 -o /tmp/x.data ./loop 1000000000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(tmp_path / "started", proc)
    return proc


def gone(pid: int, timeout=60) -> bool:
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return not Path(f"/proc/{pid}").exists()


@pytest.mark.parametrize("victim", ["pvperf", "qemu"])
def test_a_kill_while_sampling_leaves_nothing(tmp_path, victim):
    """SIGKILL of pvperf (QEMU follows it: PR_SET_PDEATHSIG) or of QEMU
    (a crash: pvperf reports it and exits) while doorbell interrupts
    flow: nothing new in /dev/shm or /tmp, no run directory, no QEMU.
    The doorbell's socketpair, eventfds and memfd have no name: they go
    with the processes."""
    before = shm_and_tmp()
    proc = sampling_run(tmp_path)
    qemu = qemu_child(proc.pid)
    os.kill(proc.pid if victim == "pvperf" else qemu, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert gone(qemu), "QEMU outlived the kill"
    assert proc.returncode != 0
    assert not run_dirs(proc.pid)
    assert {p for p in shm_and_tmp() - before
            if f"pvperf-{proc.pid}-" in p} == set()
    assert leftovers() == []
