"""The event table is defined once (pyhost/pmu/events.py): the guest
driver advertises exactly its events (it asks the host, PVPERF_OP_EVENTS),
docs/events.md documents exactly them, and in a booted guest every event the sysfs ``cpu`` PMU and
``perf list`` show is one the host counts."""
from __future__ import annotations

import re

import pytest

from pyhost.pmu.events import PERF_TYPE_RAW, default_events, sysfs_listing
from pyhost.pmu.model import Pmu, PmuError
from pyhost.pmu import abi
from pyhost import results
from pyhost.image.userkernel import DRIVER_DIR, driver_sources

from support import REPO, driver_counters_per_cpu, run_pvperf, sections

DOC = REPO / "docs" / "events.md"


def host_table() -> dict[str, int]:
    """name -> the x86 raw encoding (event | umask << 8) the host counts."""
    return {ev.name: ev.raw_configs[0] for ev in default_events()}


def sysfs_encoding(text: str) -> int:
    """A sysfs events/ string like "event=0x3c,umask=0x01" -> 0x013c."""
    fields = dict(kv.split("=") for kv in text.strip().split(","))
    assert set(fields) <= {"event", "umask"}, text
    return int(fields.get("event", "0"), 16) | \
        int(fields.get("umask", "0"), 16) << 8


def host_counts(name: str, encoding: int) -> bool:
    """Whether the host's PMU model accepts the raw encoding, as the
    guest's perf sends it for cpu/NAME/."""
    attr = abi.GuestPerfAttr(PERF_TYPE_RAW, encoding, 0, 0, 0, 0, 0, 0, 0)
    try:
        return Pmu().lookup(attr).name == name
    except PmuError:
        return False


def test_driver_has_no_event_table_of_its_own():
    """The driver's events/ come from the host (PVPERF_OP_EVENTS): no
    event name or encoding is written into its source."""
    src = "".join((DRIVER_DIR / name).read_text()
                  for name in driver_sources())
    assert "PMU_EVENT_ATTR_STRING" not in src
    assert not re.search(r'"[^"\n]*event=0x', src)
    for name in host_table():
        assert f'"{name}"' not in src, name


def test_sysfs_listing_is_the_host_table():
    """What PVPERF_OP_EVENTS answers, parsed as sysfs strings are."""
    text = sysfs_listing(default_events())
    assert text.endswith("\n")
    pairs = [line.split("=", 1) for line in text.splitlines()]
    assert {n: sysfs_encoding(t) for n, t in pairs} == host_table()


def test_every_host_event_is_reachable_by_its_encoding():
    for name, encoding in host_table().items():
        assert host_counts(name, encoding), name


def test_docs_list_exactly_the_host_table():
    rows = re.findall(r"^\| ([\w-]+) \| `[\w-]+` \| `r([0-9a-f]{4})` \|",
                      DOC.read_text(), re.M)
    assert {name: int(raw, 16) for name, raw in rows} == host_table()


def test_pvperf_events_prints_the_table():
    r = run_pvperf(["events"])
    assert r.returncode == 0, r.stderr
    for ev in default_events():
        kind = "Hardware cache event" if ev.cache_config is not None \
            else "Hardware event"
        assert re.search(rf"^\s+{re.escape(ev.name)}\s+\[{kind}, "
                         rf"r{ev.raw_configs[0]:04x}\]", r.stdout, re.M), \
            ev.name


# perf's generic hardware event names (tools/perf/util/parse-events.c
# event_symbols_hw) -> PERF_TYPE_HARDWARE config.
PERF_HW_NAMES = {"cpu-cycles": 0, "cycles": 0, "instructions": 1,
                 "cache-references": 2, "cache-misses": 3,
                 "branch-instructions": 4, "branches": 4,
                 "branch-misses": 5, "bus-cycles": 6,
                 "stalled-cycles-frontend": 7, "idle-cycles-frontend": 7,
                 "stalled-cycles-backend": 8, "idle-cycles-backend": 8,
                 "ref-cycles": 9}

GUEST_SCRIPT = r"""
echo '=== sysfs'
for f in /sys/bus/event_source/devices/cpu/events/*; do
  echo "${f##*/} $(cat $f)"
done
echo '=== perf-list'
perf list hw 2>&1
echo '=== end'
"""


@pytest.mark.vm
def test_guest_advertises_only_events_the_host_counts():
    """Boot a guest with the driver: every event its sysfs cpu PMU lists
    and every hardware event `perf list` shows is in the host's table."""
    r = run_pvperf(["run", "--", "sh", "-c", GUEST_SCRIPT], timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr
    s = sections(r.stdout)
    assert "end" in s, r.stdout[-2000:] + r.stderr
    sysfs = dict(line.split(None, 1) for line in s["sysfs"] if line.strip())
    assert sysfs, "the guest has no cpu PMU events (driver not loaded?)"
    for name, text in sysfs.items():
        assert host_counts(name, sysfs_encoding(text)), \
            f"the guest advertises {name} ({text.strip()}), which the " \
            "host does not count"
    assert {n: sysfs_encoding(t) for n, t in sysfs.items()} == host_table()
    hw_configs = {ev.hw_config for ev in default_events()}
    listed = [m for line in s["perf-list"]
              for m in re.findall(r"^\s+(.+?)\s+\[Hardware event\]", line)]
    assert listed, "\n".join(s["perf-list"])
    for entry in listed:
        for name in (n.strip() for n in entry.split(" OR ")):
            assert PERF_HW_NAMES.get(name) in hw_configs, \
                f"perf list shows {name}, which the host does not count"


# -- event names in perf stat's output ------------------------------------------

# Every event of the table as a user writes it: plain, :u and :k.
ASKED = [ev.name + mod for ev in default_events() for mod in ("", ":u", ":k")]
# The driver's counters per CPU: a perf stat of at most this many events
# counts every one of them all the time (no multiplexing, none <not
# counted>).
COUNTERS = driver_counters_per_cpu()


def name_batches() -> list[list[str]]:
    """ASKED in -e lists of at most COUNTERS events, each list of one
    modifier (no name twice in a list) and either all events stock perf
    knows by name or all events only pvperf's PMU has (perf without the
    driver refuses a whole list for one unknown name; the reference run
    must parse the others)."""
    events = default_events()
    generic = [e.name for e in events
               if e.hw_config is not None or e.cache_config is not None]
    own = [e.name for e in events if e.name not in generic]
    batches = []
    for mod in ("", ":u", ":k"):
        for names in (generic, own):
            n = -(-len(names) // COUNTERS)          # lists, evenly filled
            batches += [[name + mod for name in names[i::n]]
                        for i in range(n)]
    return batches


BATCHES = name_batches()
# Each list in both of perf's formats (one perf stat per list and format:
# perf 6.12 starts with 1.7x perf 6.1's instructions, and one run per
# event did not fit in a boot), then all in one -e list (what `pvperf
# stat --json` parses).
NAMES_SCRIPT = "".join(
    f'echo "=== csv {i}"; perf stat -x, -e {",".join(b)} -- true 2>&1\n'
    f'echo "=== table {i}"; perf stat -e {",".join(b)} -- true 2>&1\n'
    for i, b in enumerate(BATCHES)) + f"""
echo '=== all'; perf stat -x, -e {','.join(ASKED)} -- true 2>&1
echo '=== end'
"""


def printed_names(no_pmu: bool) -> dict[str, list[str]]:
    """Section -> the lines perf stat printed, from one boot."""
    r = run_pvperf(["run", *(["--no-pmu"] if no_pmu else []), "--",
                    "sh", "-c", NAMES_SCRIPT], timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr
    s = sections(r.stdout)
    assert "end" in s, r.stdout[-2000:] + r.stderr
    return s


@pytest.fixture(scope="module")
def guest_names():
    """perf stat's output for every request, with pvperf."""
    return printed_names(no_pmu=False)


@pytest.fixture(scope="module")
def bare_names():
    """The same without pvperf, the reference for what this perf prints
    on hardware (no PMU: every count <not supported>, every name still
    printed)."""
    return printed_names(no_pmu=True)


def batch_counts(lines: list[str], fmt: str, batch: list[str]
                 ) -> list[results.Event]:
    """The events of one perf stat of ``batch``, in the order asked."""
    text = "\n".join(lines)
    if fmt == "table":      # the table's rows are read inside its block
        text = text[text.find(" Performance counter stats"):]
    evs = results.parse_perf_stat(text)
    assert len(evs) == len(batch), f"{fmt} -e {','.join(batch)}: {lines}"
    return evs


def test_name_batches_ask_every_event_once_within_the_counters():
    asked = [name for batch in BATCHES for name in batch]
    assert sorted(asked) == sorted(ASKED)
    assert all(0 < len(b) <= COUNTERS for b in BATCHES)
    assert all(len({n.partition(":")[2] for n in b}) == 1 for b in BATCHES)


@pytest.mark.vm
def test_perf_stat_names_every_event_as_perf_does_on_hardware(guest_names,
                                                              bare_names):
    """Each event of the table, plain, :u and :k, in -x, and the table:
    counted, and named as the same perf names it without pvperf's driver
    (its events/ aliases change no name).  An event only pvperf's PMU
    has (perf cannot parse it without the driver) is named as asked.
    perf 6.1 itself prints a hardware-cache event without its modifier
    (parse_events_add_cache() names it type-op-result), so there the
    reference differs from what was asked.  Events are asked a list at a
    time, at most as many as the driver has counters: each is counted."""
    for i, batch in enumerate(BATCHES):
        for fmt in ("csv", "table"):
            evs = batch_counts(guest_names[f"{fmt} {i}"], fmt, batch)
            ref = results.parse_perf_stat(
                "\n".join(bare_names[f"{fmt} {i}"]))
            want = [r.name for r in ref] if ref else batch
            assert [ev.name for ev in evs] == want, (fmt, batch)
            for asked, ev in zip(batch, evs):
                assert isinstance(ev.value, int), \
                    f"{fmt}: {asked} not counted: {ev}"


@pytest.mark.vm
def test_perf_stat_json_names_every_event_as_asked(guest_names):
    """All the requests in one perf stat, read as `pvperf stat --json`
    reads it: each named exactly as asked.  (Counts are checked one event
    at a time above: 81 events multiplexed over `true` leave some
    <not counted>, as on hardware.)"""
    evs = results.parse_perf_stat("\n".join(guest_names["all"]),
                                  [",".join(ASKED)])
    assert [e.name for e in evs] == ASKED, "\n".join(guest_names["all"])
