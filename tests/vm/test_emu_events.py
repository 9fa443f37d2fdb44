"""The emulator's own events (docs/events.md, qemu_plugin/pvperf/emu.c)
and domain accounting (docs/accounting.md), against references that do
not come from pvperf:

* blocks translated: rewrite N 1 stores into target()'s code and calls
  it N times, checking each call ran the new code, so QEMU translated
  target() at least N times, and the event's samples fall in target();
  rewrite N 0, which never writes its code, translates as many user
  blocks for 100 times the work (flat after warm-up);
* device accesses: devread maps QEMU's edu PCI device's BAR (sysfs
  resource0) and loads its identification register K times: the count
  is K, exactly, for that process (and the register reads as edu's);
* host time: the event's system-wide total over a guest interval is
  within 2% of the vCPU thread's CPU time that the host's
  /proc/PID/task/TID/schedstat shows over the same interval (the guest
  and the host hand over through files in the share, idle while they
  wait);
* domain accounting: cycles are the host time (one group, one counter);
* host-time samples: hotcold's hot/cold split as the host's own profile
  of the same program (pvperf profile) sees it, within 5 points; a
  program a shell forks under perf record gets most of the samples (it
  does nearly all the work), in each of 16 runs;
* domain vs CPU accounting: iomix's two loops retire the same
  instructions (the analytic reference: an even split under CPU
  accounting); under domain accounting the one that loads from the edu
  device takes most of the samples.
"""
from __future__ import annotations

import json
import re
import statistics
import subprocess
from pathlib import Path

import pytest

from parallel import make
from support import (PROGRAMS, perf_count, pvperf_cmd, qemu_vcpu_thread,
                     run_guest_script, run_pvperf, sigint_default,
                     sections, thread_ns, wait_for)
from test_multiprocess import dso_percent
from sampling_refs import report_shares

# host_timing: the tests that compare host time (a vCPU thread's CPU
# time, the host's profile of QEMU) run alone (scripts/test.sh)
pytestmark = pytest.mark.vm

REWRITES = 2000
EDU_READS = 12345

TRANSLATIONS = f"""
echo '=== rewrite'
perf stat -x, -e emu-tb-translated:u ./rewrite {REWRITES} 1 2>&1
echo "status $?"
echo '=== flat-small'
perf stat -x, -e emu-tb-translated:u ./rewrite 1000 0 2>&1
echo '=== flat-big'
perf stat -x, -e emu-tb-translated:u ./rewrite 100000 0 2>&1
echo '=== record'
perf record -q -e emu-tb-translated:u -c 10 -o /tmp/t.data \\
  ./rewrite {REWRITES} 1 >/dev/null 2>&1
perf report -i /tmp/t.data --stdio --sort sym 2>&1
echo '=== end'
"""


def count(lines: list[str], event: str) -> int:
    value = perf_count(lines, event)
    assert value is not None and value.isdigit(), (event, lines)
    return int(value)


@pytest.fixture(scope="module")
def translations():
    return run_guest_script(TRANSLATIONS, 1, timeout=600)


def test_rewritten_code_is_translated_each_time(translations):
    assert "status 0" in translations["rewrite"]     # the new code ran
    got = count(translations["rewrite"], "emu-tb-translated:u")
    assert got >= REWRITES, got


def test_translation_samples_fall_in_the_rewritten_function(translations):
    shares = report_shares(translations["record"])
    assert shares.get("target", 0) >= 90, translations["record"]


def test_code_never_written_is_translated_once(translations):
    small = count(translations["flat-small"], "emu-tb-translated:u")
    big = count(translations["flat-big"], "emu-tb-translated:u")
    # 100 times the calls: the same blocks (an instrumentation switch may
    # retranslate them once).
    assert 0 < big <= 2 * small + 8, (small, big)


DEVICE = f"""
d=$(grep -l 0x11e8 /sys/bus/pci/devices/*/device)
d=${{d%/device}}
echo 1 > $d/enable
echo '=== edu'
perf stat -x, -e emu-device-accesses:u ./devread $d/resource0 {EDU_READS} 2>&1
echo "status $?"
echo '=== end'
"""


def test_device_reads_counted_exactly():
    s = run_guest_script(DEVICE, 1, timeout=300, options=("--device", "edu"))
    assert "status 0" in s["edu"], s["edu"]     # edu's identification read
    assert count(s["edu"], "emu-device-accesses:u") == EDU_READS


# loop's 2 * N instructions: a few seconds of host time under TCG, so that
# what the guest does outside the host's window (below) is well below the
# 2% compared.
HOST_LOOP = 3_000_000_000


def windowed(events: str, command: str) -> str:
    """A guest script that counts events with perf stat -a over command,
    in section 'window', between two handshakes with window_ns() on the
    host.  The counted command signals from a waitfile already running
    (perf stat -a enables its counters before it starts the command), so
    the guest counts outside the host's window only the command's start
    (sh, one exec) and its end.  Those must run warm: the first event
    opened switches the plugin to counting, which retranslates all code,
    and the code then run first (perf, sh, waitfile) cost 170 ms of host
    time outside the window (+3% in three runs, 2026-11-27; the old
    handshake, a fixed 0.3 s wait, gave -0.3% to +4%, by how long perf
    took to start).  So a background event keeps counting on and a first
    run warms the code: the edges then cost 18 ms (with loop 1000: 36.7 ms
    counted, 18.7 ms in the window)."""
    return f"""
touch w
perf stat -a -e instructions -o /tmp/bg -- ./waitfile bgstop bgon &
./waitfile bgon
perf stat -a -x, -e {events} -- sh -c \\
  './waitfile w c0; ./waitfile w d0' >/dev/null 2>&1
echo '=== window'
perf stat -a -x, -e {events} -- sh -c \\
  './waitfile go counting; {command}; ./waitfile stop done' 2>&1
touch bgstop
wait
echo '=== end'
"""


def window_ns(share: Path, script: str, options: tuple[str, ...] = ()
              ) -> tuple[dict[str, list[str]], int]:
    """Run a windowed() script in a guest with share as its directory
    (loop and waitfile copied in): its sections, and the vCPU thread's
    CPU time (/proc/PID/task/TID/schedstat) between "counting" and
    "done" (after "counting" the guest idles until "go"; after "done" it
    only waits)."""
    make(PROGRAMS, "-s", check=True)
    for name in ("loop", "waitfile"):
        (share / name).write_bytes((PROGRAMS / name).read_bytes())
        (share / name).chmod(0o755)
    proc = subprocess.Popen(pvperf_cmd() + [
        "run", "--share", str(share), *options, "--", "sh", "-c",
        "touch started; ./waitfile ready; " + script],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=sigint_default)
    try:
        wait_for(share / "started", proc, "the guest started")
        task = qemu_vcpu_thread(proc.pid)
        (share / "ready").touch()
        wait_for(share / "counting", proc, "perf stat counted")
        before = thread_ns(task)
        (share / "go").touch()
        wait_for(share / "done", proc, "the command ended")
        after = thread_ns(task)
        (share / "stop").touch()
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait()
    assert proc.returncode == 0, out[-2000:] + err
    s = sections(out)
    assert "end" in s, out[-2000:] + err
    return s, after - before


@pytest.mark.host_timing
def test_host_time_matches_the_vcpu_threads_cpu_time(tmp_path):
    """+0.20% to +0.32% in four runs at load 11-13 (2026-11-27)."""
    s, ref = window_ns(tmp_path, windowed("emu-host-ns",
                                          f"./loop {HOST_LOOP}"))
    got = count(s["window"], "emu-host-ns")
    print(f"emu-host-ns {got} ns, /proc schedstat {ref} ns: "
          f"{100 * (got - ref) / ref:+.2f}%")
    assert abs(got - ref) <= 0.02 * ref, (got, ref)


# Reads of 4 KB from a file through the 9p share (cache=none: each one a
# 9p request): the guest kernel's 9p client and virtio, QEMU's virtio
# and 9p server.  2048 of them retire about 30 M instructions and take
# 0.15-0.2 s of the vCPU thread's host time (load 13), so 8 x 4096 of
# them, 2.5-3 s, put the windows' edges (about 20 ms) below 1%.
IO_FILE_KB = 16384
IO_READ = ("i=0; while [ $i -lt 8 ]; do dd if=big of=/dev/null bs=4k "
           "2>/dev/null; i=$((i + 1)); done")


def io_share(tmp_path: Path) -> Path:
    share = tmp_path / "share"
    share.mkdir()
    (share / "big").write_bytes(bytes(range(256)) * (4 * IO_FILE_KB))
    return share


@pytest.mark.host_timing
def test_domain_cycles_of_io_are_the_vcpu_threads_host_time(tmp_path):
    """Domain vs CPU accounting on a workload that does I/O: domain-mode
    cycles exceed CPU-mode cycles (one per instruction) by the host time
    the emulation took.  Reference: the vCPU thread's CPU time from
    /proc over the same window (the two windows, one boot each)."""
    events = "'{cycles,instructions}'"
    share = io_share(tmp_path)
    cpu, cpu_ref = window_ns(share, windowed(events, IO_READ),
                             ("--accounting", "cpu"))
    for f in ("ready", "counting", "go", "done", "stop", "started",
              "bgon", "bgstop", "w"):
        (share / f).unlink(missing_ok=True)
    dom, dom_ref = window_ns(share, windowed(events, IO_READ),
                             ("--accounting", "domain"))
    cpu_cycles = count(cpu["window"], "cycles")
    dom_cycles = count(dom["window"], "cycles")
    insns = count(dom["window"], "instructions")
    print(f"dd 8 x {IO_FILE_KB} KB in 4 KB reads over 9p: cycles cpu "
          f"{cpu_cycles} (instructions {count(cpu['window'], 'instructions')}"
          f", /proc {cpu_ref} ns), domain {dom_cycles} (instructions {insns}"
          f", /proc {dom_ref} ns): domain - cpu {dom_cycles - cpu_cycles}, "
          f"/proc - instructions {dom_ref - insns} "
          f"({100 * (dom_cycles - dom_ref) / dom_ref:+.2f}% of /proc)")
    assert cpu_cycles == count(cpu["window"], "instructions")
    assert abs(dom_cycles - dom_ref) <= 0.02 * dom_ref, (dom_cycles, dom_ref)


def emulation_on_behalf(summary: dict) -> dict[str, float]:
    """pvperf profile's domain-switch view less its CPU-switch view: per
    guest function (of the top 20), the emulator's samples on its behalf
    (their unwound host stack reaches that function's TB), in percent of
    all samples of guest code or on its behalf (QEMU's other threads and
    its work for no TB left out: "[not on behalf of guest code]")."""
    own = {r["symbol"]: r["samples"] for r in summary["guest_only"]}
    rows = summary["guest_plus_emulator"]       # the top 20
    both = {r["symbol"]: r["samples"] for r in rows
            if r["space"] != "emulator"}
    total = summary["samples_total"] - sum(
        r["samples"] for r in rows if r["space"] == "emulator")
    return {sym: 100 * (n - own.get(sym, 0)) / total
            for sym, n in both.items()}


IO_BOOTS = 2


@pytest.mark.host_timing
def test_domain_cycles_of_io_land_where_the_host_profile_puts_them(tmp_path):
    """The same I/O: the guest function on whose behalf the host's own
    profile (pvperf profile: host perf on QEMU, emulator samples charged
    to the TB their host stack reaches) puts the most emulator work (the
    virtio kick, iowrite16) has the same share of the guest's domain-mode
    cycles samples, within 5 points.  Each side is the mean of IO_BOOTS
    boots: one boot's share moved between 11 % and 18 % on either side
    (a clean-clone CI failed at 13.2 % against 18.4 %, single boots)."""
    share = io_share(tmp_path)
    hosts, guests = [], []
    for i in range(IO_BOOTS):
        out = tmp_path / f"prof{i}"
        r = run_pvperf(["profile", "--output", str(out), "--share",
                        str(share), "--", "dd", "if=big", "of=/dev/null",
                        "bs=4k"], timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        hosts.append(emulation_on_behalf(
            json.loads((out / "summary.json").read_text())))
    top = max(hosts[0], key=hosts[0].get)
    for i in range(IO_BOOTS):
        s = run_pvperf(["run", "--share", str(share), "--accounting",
                        "domain", "--", "sh", "-c",
                        "echo '=== record'; perf record -q -e cycles -c "
                        "100000 -o /tmp/c.data dd if=big of=/dev/null bs=4k "
                        "2>/dev/null; perf report -i /tmp/c.data --stdio "
                        "--sort sym 2>&1; echo '=== end'"], timeout=600)
        assert s.returncode == 0, s.stderr[-3000:]
        guests.append(report_shares(sections(s.stdout)["record"], ".k"))
    host = statistics.mean(h.get(top, 0) for h in hosts)
    guest = statistics.mean(g.get(top, 0) for g in guests)
    print(f"emulator work on behalf of {top}: {host:.1f}% in pvperf "
          f"profile ({', '.join(f'{h.get(top, 0):.1f}' for h in hosts)}), "
          f"{guest:.1f}% of the guest's domain cycles samples "
          f"({', '.join(f'{g.get(top, 0):.1f}' for g in guests)}); guest "
          f"top: {sorted(guests[0].items(), key=lambda x: -x[1])[:4]}")
    assert abs(guest - host) <= 5, (top, hosts, guests)


DOMAIN = """
echo '=== domain'
perf stat -x, -e '{cycles,emu-host-ns}' ./loop 3000000 2>&1
echo '=== end'
"""


def test_domain_cycles_are_the_host_time():
    s = run_guest_script(DOMAIN, 1, timeout=300,
                         options=("--accounting", "domain"))
    cycles = count(s["domain"], "cycles")
    assert cycles > 0
    assert cycles == count(s["domain"], "emu-host-ns")


HOTCOLD = 300000


RECORDS, PROFILES = 3, 2


@pytest.mark.host_timing
def test_host_time_samples_agree_with_the_host_profile(tmp_path):
    """Where the guest's host-time samples put hotcold's time, and where
    the host's own profile (pvperf profile: host perf on QEMU, through
    the reverse map) puts it: hot's share of hot + cold within 5 points.
    The sampling is the default form (no :p, 1 kHz: the plugin's ticks,
    samples where the guest's interrupt lands).

    Each side is a mean: the share itself moves from one translation of
    hotcold to the next by a few points (hot's and cold's 3-instruction
    loops run at whatever speed their host code's placement gives them;
    one boot's guest records gave 78.6 %, 81.4 %, 82.4 %, and the exact
    form :up in between 79.0 %, 80.5 %, 82.2 %), and every perf record
    and every boot translates anew."""
    record = (f"perf record -q -e emu-host-ns:u -c 1000000 -o /tmp/h.data "
              f"./hotcold {HOTCOLD} >/dev/null 2>&1\n"
              "perf report -i /tmp/h.data --stdio --sort sym 2>&1\n")
    s = run_guest_script("".join(f"echo '=== record{i}'\n{record}"
                                 for i in range(RECORDS))
                         + "echo '=== end'\n", 1, timeout=900)
    guest = [report_shares(s[f"record{i}"]) for i in range(RECORDS)]
    guest_hot = [g["hot"] / (g["hot"] + g["cold"]) for g in guest]
    host_hot = []
    for i in range(PROFILES):
        out = tmp_path / f"prof{i}"
        r = run_pvperf(["profile", "--output", str(out), "--share",
                        str(PROGRAMS), "--", "./hotcold", str(HOTCOLD)],
                       timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        rows = json.loads((out / "summary.json").read_text())["guest_only"]
        host = {row["symbol"]: row["samples"] for row in rows}
        host_hot.append(host["hot"] / (host["hot"] + host["cold"]))
    g, h = statistics.mean(guest_hot), statistics.mean(host_hot)
    print(f"hot/(hot+cold): guest host-time samples {100 * g:.1f}% "
          f"({', '.join(f'{100 * x:.1f}' for x in guest_hot)}), pvperf "
          f"profile {100 * h:.1f}% "
          f"({', '.join(f'{100 * x:.1f}' for x in host_hot)})")
    assert abs(g - h) <= 0.05, (guest_hot, host_hot)


# A script that forks its program (not exec: the shell waits), as a
# benchmark's timing wrapper does, with command substitutions (more
# forks) around it; hotcold does nearly all its work.
FORKING = "x=$(echo a); ./hotcold 30000 >/dev/null; y=$(echo b)"
FORK_RUNS = 16
FORKS = f"""
echo '{FORKING}' > /tmp/forking
i=0
while [ $i -lt {FORK_RUNS} ]; do
  echo "=== record$i"
  perf record -q -e emu-host-ns:u -c 1000000 -o /tmp/f.data \\
    -- sh /tmp/forking >/dev/null 2>&1
  perf report -i /tmp/f.data --stdio --sort comm 2>&1
  i=$((i + 1))
done
echo '=== end'
"""


@pytest.mark.host_timing
def test_host_time_ticks_on_two_vcpus():
    """Ticks at smp 2 (one vCPU thread each, one target each): two
    hotcolds pinned one per vCPU, N and N/2 calls of the same code (host
    time in proportion to the calls), under one system-wide perf record:
    hotcold's samples on CPU 0 against those on CPU 1, 2/3 within 5
    points (a manual run: 747 and 379, 66.3 %)."""
    s = run_guest_script(
        "perf record -q -a -e emu-host-ns:u -c 1000000 -o /tmp/h.data -- "
        f"sh -c 'taskset 1 ./hotcold {HOTCOLD} & "
        f"taskset 2 ./hotcold {HOTCOLD // 2} & wait' >/dev/null 2>&1\n"
        "echo '=== script'\n"
        "perf script -i /tmp/h.data -F comm,cpu 2>&1\n"
        "echo '=== end'\n", 2, timeout=600)
    cpus = [int(m.group(1)) for m in (re.match(r"\s*hotcold\s+\[(\d+)\]", line)
                                      for line in s["script"]) if m]
    big, small = cpus.count(0), cpus.count(1)
    print(f"smp 2 ticks: hotcold {HOTCOLD} on cpu 0 {big} samples, "
          f"{HOTCOLD // 2} on cpu 1 {small}: {100 * big / (big + small):.1f}%")
    assert small >= 100, (big, small)
    assert abs(big / (big + small) - 2 / 3) <= 0.05, (big, small)


# Not host_timing: hotcold does nearly all the work, and a share of 50 %
# against ~99 % tells the wrap this guards against (no sample at all)
# whatever the other core runs.
def test_host_time_of_a_forked_program_under_perf_record():
    """A program a shell forks under `perf record -e emu-host-ns:u`
    (inherited events) gets the samples of the time it takes: hotcold
    does nearly all the script's work (the analytic reference), so it
    must have most of the samples in every one of FORK_RUNS runs in one
    boot.  Before emu.c's charge() took a count that went back as nothing
    retired (a host-time check in the kernel's page-fault handler read
    the user count before the FAULT hypercall took back the faulting
    chunk's tail; the COW faults of a forked shell make them common),
    9 of 16 runs gave hotcold no sample: the split wrapped, the user
    counter jumped near 2^64 and the service's next threshold lay past
    the u64 (disarmed).  Counting alone cannot show it: without
    host-time checks every point is a hypercall, and FAULT is served
    before any other."""
    s = run_guest_script(FORKS, 1, timeout=900)
    starved = [(i, shares) for i in range(FORK_RUNS)
               if (shares := dso_percent(s[f"record{i}"])).get(
                   "hotcold", 0) < 50]
    print(f"{FORK_RUNS} runs: hotcold starved of samples in {len(starved)}")
    assert not starved, starved


IOMIX_LOADS = 100000
IOMIX = """
d=$(grep -l 0x11e8 /sys/bus/pci/devices/*/device)
d=${d%/device}
echo 1 > $d/enable
echo '=== record'
perf record -q -e cycles:u -c PERIOD -o /tmp/c.data \\
  ./iomix $d/resource0 LOADS >/dev/null 2>&1
perf report -i /tmp/c.data --stdio --sort sym 2>&1
echo '=== end'
"""


def iomix_shares(accounting: str, period: int) -> dict[str, float]:
    script = IOMIX.replace("PERIOD", str(period)).replace(
        "LOADS", str(IOMIX_LOADS))
    s = run_guest_script(script, 1, timeout=600, options=(
        "--device", "edu", "--accounting", accounting))
    return report_shares(s["record"])


@pytest.mark.host_timing
def test_domain_accounting_charges_device_emulation_where_it_happens():
    """iomix: io() and ram() retire the same instructions (one load each
    iteration, from device memory and from RAM).  CPU accounting (cycles
    = instructions) samples them evenly; domain accounting (cycles =
    host time) puts the device model's work in io()."""
    cpu = iomix_shares("cpu", 10007)
    assert abs(cpu["io"] - cpu["ram"]) <= 5, cpu
    domain = iomix_shares("domain", 100000)
    print(f"iomix cycles:u samples: cpu io {cpu['io']}% ram {cpu['ram']}%;"
          f" domain io {domain['io']}% ram {domain.get('ram', 0)}%")
    assert domain["io"] >= 80, domain
