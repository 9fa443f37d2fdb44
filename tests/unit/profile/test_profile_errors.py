"""`pvperf profile`'s data that cannot be read back (a perf.data perf
script refuses, a reverse-map record file or jitdump of another format,
one that is missing) ends in one `pvperf:` line and exit status 125, like
every other pvperf failure, not in a traceback."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from pyhost import cli as cli_mod
from pyhost.arch import host
from pyhost.errors import ProfileError, SetupError
from pyhost.profile import hostperf, record, resolve


def recording(tmp_path: Path) -> record.Recording:
    workdir = tmp_path / "work"
    workdir.mkdir()
    for name in ("perf.data", "rmap.bin", "jit-1.dump"):
        (tmp_path / name).write_bytes(b"not what it should be")
    return record.Recording(
        workdir=workdir, perf_data=tmp_path / "perf.data",
        rmap_path=tmp_path / "rmap.bin", jitdump_path=tmp_path / "jit-1.dump",
        perfmap_path=None, qemu_pid=1, qemu_maps="", window=(0.0, 1.0),
        status=0, command="true", smp=1, arch=host())


def test_perf_script_failure_is_one_line(tmp_path):
    rec = recording(tmp_path)
    with pytest.raises(ProfileError) as e:
        hostperf.perf_script(rec.perf_data)
    assert e.value.what == f"reading the samples of {rec.perf_data}"
    assert e.value.cause.startswith("perf script exited with")
    assert "\n" not in e.value.one_line()


def test_rmap_of_another_format_is_one_line(tmp_path):
    with pytest.raises(ProfileError) as e:
        resolve.read_reverse_map(recording(tmp_path))
    assert e.value.what == "reading the reverse map"
    assert "jitdump" in e.value.cause and "make -C qemu_plugin" in e.value.hint


def test_missing_rmap_is_one_line(tmp_path):
    rec = recording(tmp_path)
    rec.jitdump_path.unlink()
    with pytest.raises(ProfileError) as e:
        resolve.read_reverse_map(rec)
    assert e.value.cause.startswith(str(rec.jitdump_path))


def test_pvperf_profile_prints_one_line_and_exits_125(tmp_path, monkeypatch,
                                                       capsys):
    rec = recording(tmp_path)

    class Config:
        image = SimpleNamespace(root=tmp_path, system_map=tmp_path / "map")
        share, command = tmp_path, "true"

    async def fake_record(*a, **kw):
        return rec
    monkeypatch.setattr(record, "preflight", lambda: None)
    monkeypatch.setattr(record, "record", fake_record)
    monkeypatch.setattr(cli_mod, "make_config", lambda *a, **kw: Config())
    with pytest.raises(SystemExit) as exit_info:
        cli_mod.main(["profile", "-o", str(tmp_path / "out"), "--", "true"])
    assert exit_info.value.code == cli_mod.EXIT_FAILURE == 125
    err = capsys.readouterr().err
    assert err.startswith("pvperf: reading the reverse map: ")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not rec.workdir.exists()


def test_host_perf_that_cannot_attach_is_one_line_and_leaves_nothing(
        tmp_path):
    """perf record on a pid that does not exist exits before the ack of
    `enable`: a SetupError with perf's own complaint, and its control
    FIFOs are gone once it is stopped."""
    pid = 1 << 22                       # above pid_max's limit
    rec = hostperf.start_record(pid, tmp_path / "perf.data")
    with pytest.raises(SetupError) as e:
        hostperf.enable(rec, timeout=30)
    assert e.value.what == "host perf record failed"
    assert "\n" not in e.value.one_line()
    assert hostperf.stop_record(rec) == hostperf.stop_record(rec)
    assert not rec.control_dir.exists()
