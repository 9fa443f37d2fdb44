"""pyhost/profile/bt_table.py: the translation table built from counted
translations and resolved samples, with a resolver whose functions are
address ranges written here (the VM test, tests/vm/test_bt_table.py,
checks real counts against callgrind)."""
from dataclasses import dataclass, field

import pytest

from pyhost.cli import TABLE_SORT
from pyhost.profile import bt_table
from pyhost.profile.hostperf import SAMPLE_FREQ
from pyhost.profile.resolve import Placement
from pyhost.profile.rmap import Translation

# guest-user functions of process 7: [start, end)
FUNCS = {"f": (0x1000, 0x1010), "g": (0x1010, 0x1040)}


def tb(guestpc, sizes, executions, kernel=False) -> Translation:
    return Translation(host_start=guestpc << 8, host_size=16, time_ns=1,
                       tid=1, generation=0, guestpc=guestpc, kernel=kernel,
                       insn_sizes=sizes, code=bytes(sum(sizes)),
                       page_table_base=0x5000, executions=executions)


@dataclass
class FakeSpaces:
    def sample_space(self, tid, time_ns):
        return None


@dataclass
class FakeMap:
    trs: list
    counts: bool = True
    unmatched_insns: int = 0
    spaces: FakeSpaces = field(default_factory=FakeSpaces)

    def translations(self):
        return self.trs


class FakeResolver:
    def __init__(self, trs):
        self.rmap = FakeMap(trs)

    def place(self, tr, space):
        return Placement(tr.guestpc, None if tr.kernel else 7,
                         "" if tr.kernel else "prog", "translated")

    def guest_symbol(self, tr, guestpc, pid):
        if tr.kernel:
            return {"space": "guest-kernel", "symbol": "k", "dso": "[kernel]",
                    "sym_start": 0, "named": True}
        name = next((n for n, (lo, hi) in FUNCS.items() if lo <= guestpc < hi),
                    None)
        if name is None:        # no symbol: named by its address
            return {"space": "guest-user", "symbol": f"prog+{guestpc:#x}",
                    "dso": "/prog", "sym_start": guestpc, "named": False}
        return {"space": "guest-user", "symbol": name, "dso": "/prog",
                "sym_start": FUNCS[name][0], "named": True}


def sample(space, symbol, pid, **kw) -> dict:
    return {"space": space, "symbol": symbol, "pid": pid, "dso": "/prog",
            "comm": "prog", "resolved": True, **kw}


def test_counts_split_at_function_boundaries_and_samples_add_up():
    # f's last 8 bytes run into g: a TB of 4 x 4 bytes from 0x1008, run 10x
    trs = [tb(0x1000, [4, 4], 5), tb(0x1008, [4, 4, 4, 4], 10),
           tb(0x1010, [8], 0), tb(0xFFFF0000, [2, 2], 3, kernel=True),
           # unnamed code: one row for the TB, not one per instruction;
           # g's tail running into unnamed code stays g's
           tb(0x2000, [1, 1, 1], 2), tb(0x103C, [4, 4], 1)]
    samples = [sample("guest-user", "g", 7)] * 3 + \
        [{"space": "emulator", "symbol": "helper", "resolved": False,
          "behalf": {"space": "guest-user", "symbol": "g", "pid": 7}}] * 5 + \
        [{"space": "emulator", "symbol": "main_loop", "resolved": False,
          "behalf": None}] + \
        [sample("guest-kernel", "k", 99)]      # kernel: one row, no pid
    table = bt_table.build(FakeResolver(trs), samples)
    rows = {r["symbol"]: r for r in table["rows"]}
    assert rows["f"]["insns"] == 5 * 2 + 10 * 2
    assert rows["g"]["insns"] == 10 * 2 + 2
    assert rows["prog+0x2000"]["insns"] == 6
    assert not [r for r in rows if r.startswith("prog+0x200")
                and r != "prog+0x2000"]
    assert rows["k"]["insns"] == 6 and rows["k"]["pid"] is None
    assert rows["k"]["translated"] == 1
    assert (rows["g"]["translated"], rows["g"]["behalf"]) == (3, 5)
    assert rows["f"]["translations"] == 2 and rows["g"]["translations"] == 2
    assert rows["g"]["ns_per_insn"] == pytest.approx(8 / SAMPLE_FREQ * 1e9
                                                      / 22)
    assert rows["f"]["ns_per_insn"] == 0.0
    assert table["insns"] == 64 and table["emulator_unattributed"] == 1
    assert table["rows"][0]["symbol"] == "g"         # most host samples


def test_sort_keys_and_render():
    assert bt_table.SORT_KEYS == TABLE_SORT          # the CLI's choices
    rows = [{"symbol": "a", "insns": 10, "host": 50, "ns_per_insn": 2.0,
             "translated": 50, "behalf": 0, "translations": 1},
            {"symbol": "noisy", "insns": 1, "host": 1, "ns_per_insn": 900.0,
             "translated": 1, "behalf": 0, "translations": 1},
            {"symbol": "b", "insns": 10, "host": 90, "ns_per_insn": 9.0,
             "translated": 40, "behalf": 50, "translations": 3},
            {"symbol": "none", "insns": 0, "host": 5, "ns_per_insn": None,
             "translated": 5, "behalf": 0, "translations": 1}]
    by = {k: [r["symbol"] for r in bt_table.sort_rows(rows, k)]
          for k in bt_table.SORT_KEYS}
    # a ratio of fewer than MIN_RATIO_SAMPLES samples sorts after the rest
    assert by["ns_per_insn"] == ["b", "a", "noisy", "none"]
    assert by["host"] == ["b", "a", "none", "noisy"]
    assert by["behalf"][0] == "b" and by["translated"][0] == "a"
    with pytest.raises(ValueError, match="bogus"):
        bt_table.sort_rows(rows, "bogus")
    table = {"counted": True, "insns": 21, "unmatched_insns": 0,
             "emulator_unattributed": 2,
             "rows": [r | {"space": "guest-user", "pid": 7, "comm": "p"}
                      for r in rows]}
    lines = bt_table.render(table, "insns")
    assert "sorted by insns" in lines[0]
    assert "21 guest instructions" in lines[0]
    # ties (insns 10) go by host samples
    assert lines[2].split()[-3] == "b" and lines[-2].split()[4] == "-"
    assert bt_table.render(None) == []
