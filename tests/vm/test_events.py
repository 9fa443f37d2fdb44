"""The event table is defined once (pyhost/pmu/events.py): the guest
driver advertises its events (it asks the host, PVPERF_OP_EVENTS) but
those perf names as legacy hardware-cache events, which perf reaches
through PERF_TYPE_HW_CACHE instead, docs/events.md documents exactly
them, and in a booted guest every event the sysfs ``cpu`` PMU and ``perf
list`` show is one the host counts."""
from __future__ import annotations

import re

import pytest

from pyhost.pmu.events import (PERF_TYPE_HW_CACHE, PERF_TYPE_RAW,
                               default_events, sysfs_listing)
from pyhost.pmu.model import Pmu, PmuError
from pyhost import abi
from pyhost import results
from pyhost.image.userkernel import DRIVER_DIR, driver_sources

from support import (CACHEGRIND, GEOMETRIES, PROGRAMS, REPO,
                     assert_like_cachegrind, cachegrind,
                     driver_counters_per_cpu, parse_stat, run_guest_script,
                     run_pvperf, sections)

DOC = REPO / "docs" / "events.md"


def host_table() -> dict[str, int]:
    """name -> the x86 raw encoding (event | umask << 8) the host counts."""
    return {ev.name: ev.raw_configs[0] for ev in default_events()}


# perf's legacy hardware-cache event names (tools/perf/util/evsel.c:
# evsel__hw_cache, evsel__hw_cache_op, evsel__hw_cache_result; the same
# in perf 6.1 and 6.12), index = PERF_COUNT_HW_CACHE_* value, and the ops
# each cache takes (evsel__is_cache_op_valid).  perf's lexer
# (parse-events.l) reads TYPE, TYPE-X and TYPE-X-Y, each X and Y an op or
# a result name, as a legacy cache event, unless an earlier rule takes
# the whole word: the hardware names branch-misses and branches.
PERF_CACHE_TYPES = (("L1-dcache", "l1-d", "l1d", "L1-data"),
                    ("L1-icache", "l1-i", "l1i", "L1-instruction"),
                    ("LLC", "L2"), ("dTLB", "d-tlb", "Data-TLB"),
                    ("iTLB", "i-tlb", "Instruction-TLB"),
                    ("branch", "branches", "bpu", "btb", "bpc"), ("node",))
PERF_CACHE_OPS = (("load", "loads", "read"), ("store", "stores", "write"),
                  ("prefetch", "prefetches", "speculative-read",
                   "speculative-load"))
PERF_CACHE_RESULTS = (("refs", "Reference", "ops", "access"),
                      ("misses", "miss"))
PERF_CACHE_OPS_OK = (0b111, 0b101, 0b111, 0b111, 0b001, 0b001, 0b111)


def _alt(table) -> str:
    return "|".join(re.escape(n) for names in table for n in names)


PERF_LEGACY_CACHE = re.compile(
    rf"(?:{_alt(PERF_CACHE_TYPES)})"
    rf"(?:-(?:{_alt(PERF_CACHE_OPS + PERF_CACHE_RESULTS)})){{0,2}}")


def _alias(text: str, table) -> tuple[int, int]:
    """perf's parse_aliases(): the first index of table with a name text
    starts with (case-insensitively), and the longest such name's length;
    (-1, 0) if none."""
    for i, names in enumerate(table):
        n = max((len(a) for a in names if text[:len(a)].lower() == a.lower()),
                default=0)
        if n:
            return i, n
    return -1, 0


def perf_cache_config(name: str) -> int | None:
    """The PERF_TYPE_HW_CACHE config perf gives -e name, or None if perf
    does not read name as a legacy cache event: its lexer, then
    parse_events__decode_legacy_cache() (type, then an op or a result,
    then the other; read and access by default)."""
    if name in PERF_HW_NAMES or not PERF_LEGACY_CACHE.fullmatch(name):
        return None
    cache, n = _alias(name, PERF_CACHE_TYPES)
    rest, op, result = name[n + 1:], -1, -1
    if rest:
        op, n = _alias(rest, PERF_CACHE_OPS)
        if op < 0:
            result, n = _alias(rest, PERF_CACHE_RESULTS)
        rest = rest[n + 1:] if n else rest
    if rest:
        if op < 0:
            op, n = _alias(rest, PERF_CACHE_OPS)
        elif result < 0:
            result, n = _alias(rest, PERF_CACHE_RESULTS)
    op, result = max(op, 0), max(result, 0)
    assert PERF_CACHE_OPS_OK[cache] >> op & 1, name   # else perf refuses
    return cache | op << 8 | result << 16


def legacy_cache_names() -> dict[str, int]:
    """The table's events perf reads as legacy cache events -> config."""
    return {ev.name: perf_cache_config(ev.name) for ev in default_events()
            if perf_cache_config(ev.name) is not None}


def sysfs_table() -> dict[str, int]:
    """What the driver's events/ must list: the table less those."""
    return {n: raw for n, raw in host_table().items()
            if n not in legacy_cache_names()}


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


def test_perf_cache_config_reads_names_as_perf_does():
    """The reference itself, on names whose configs perf's own tests
    (tools/perf/tests/parse-events.c) and the uapi give."""
    assert perf_cache_config("L1-dcache-load-misses") == 0x10000
    assert perf_cache_config("L1-dcache-stores") == 0x100
    assert perf_cache_config("LLC-store-misses") == 0x10102
    assert perf_cache_config("l1d-prefetch-misses") == 0x10200
    assert perf_cache_config("branch-loads") == 5
    assert perf_cache_config("iTLB-load-misses") == 0x10004
    assert perf_cache_config("L1-icache") == 1
    for name in ("branch-misses", "branches", "branch-instructions",
                 "cache-misses", "instructions", "emu-host-ns",
                 "model-stalls", "mem-loads"):
        assert perf_cache_config(name) is None, name


def test_sysfs_listing_is_the_host_table_less_perfs_cache_names():
    """What PVPERF_OP_EVENTS answers, parsed as sysfs strings are: every
    event of the table but those perf reads as legacy cache events (with
    such a name also a PMU alias, perf 6.12's parse_events_add_cache()
    adds the alias with no event term and then refuses the event)."""
    text = sysfs_listing(default_events())
    assert text.endswith("\n")
    pairs = [line.split("=", 1) for line in text.splitlines()]
    assert {n: sysfs_encoding(t) for n, t in pairs} == sysfs_table()
    assert "branch-loads" in legacy_cache_names()   # the rule is not empty


def test_every_left_out_name_reaches_its_event_as_a_cache_event():
    """Each name events/ leaves out is the event the host counts for the
    PERF_TYPE_HW_CACHE config perf makes of that name."""
    for name, config in legacy_cache_names().items():
        attr = abi.GuestPerfAttr(PERF_TYPE_HW_CACHE, config, 0, 0, 0, 0, 0,
                                 0, 0)
        assert Pmu().lookup(attr).name == name, (name, hex(config))


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
    """Boot a guest with the driver: its sysfs cpu PMU lists the host's
    table less perf's legacy cache names, and every hardware event `perf
    list` shows is in the host's table."""
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
    assert {n: sysfs_encoding(t) for n, t in sysfs.items()} == sysfs_table()
    hw_configs = {ev.hw_config for ev in default_events()}
    listed = [m for line in s["perf-list"]
              for m in re.findall(r"^\s+(.+?)\s+\[Hardware event\]", line)]
    assert listed, "\n".join(s["perf-list"])
    for entry in listed:
        for name in (n.strip() for n in entry.split(" OR ")):
            assert PERF_HW_NAMES.get(name) in hw_configs, \
                f"perf list shows {name}, which the host does not count"


# The left-out names count through PERF_TYPE_HW_CACHE: each against
# cachegrind (docs/events.md's mapping) on memwalk's stream, at most
# COUNTERS a perf stat.  The TLB misses have no cachegrind counter:
# tests/vm/test_tlb_timing.py checks them against analytic counts, by
# these names too.
MEMWALK = ("0", "1")


@pytest.mark.vm
def test_left_out_names_count_as_cachegrind(tmp_path):
    names = sorted(legacy_cache_names())
    batches = [names[i::3] for i in range(3)]
    assert all(len(b) <= driver_counters_per_cpu() for b in batches)
    script = "".join(
        f"echo '=== cache {i}'; perf stat -x, -e "
        f"{','.join(n + ':u' for n in b)} ./memwalk {' '.join(MEMWALK)} "
        "2>&1 >/dev/null\n" for i, b in enumerate(batches))
    s = run_guest_script(script + "echo '=== end'\n", 1, 600,
                         ("--cachegrind-compat",))
    ref = cachegrind(GEOMETRIES["default"],
                     [str(PROGRAMS / "memwalk"), *MEMWALK],
                     tmp_path / "cachegrind.out")
    rows = []
    for i, batch in enumerate(batches):
        got = parse_stat(s[f"cache {i}"], tuple(batch))
        rows += [("default", "stream", n, got[n],
                  sum(ref[c] for c in CACHEGRIND[n]))
                 for n in batch if n in CACHEGRIND]
    assert {r[2] for r in rows} == set(CACHEGRIND) & set(names)
    assert len(rows) == len(names) - 3          # all but the TLB misses
    assert_like_cachegrind(rows, exact=True)
    assert_like_cachegrind(rows, exact=False)


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
