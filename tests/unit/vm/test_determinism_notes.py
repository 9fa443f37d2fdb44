"""What a deterministic run says about its share (vm/determinism.py
start_note and end_note, image/stage.py share_state): the staged
archive's digest names the share's content, and a run that changed the
share says so, because the next run then boots a different share."""
from __future__ import annotations

import os

from pyhost.image import stage
from pyhost.vm import determinism


def test_digest_follows_content_not_mtime(tmp_path):
    (tmp_path / "prog").write_bytes(b"\x7fELF" + bytes(100))
    first = determinism.start_note(tmp_path, stage.stage_share(tmp_path, 1 << 20))
    os.utime(tmp_path / "prog", (1, 1))
    assert determinism.start_note(
        tmp_path, stage.stage_share(tmp_path, 1 << 20)) == first
    (tmp_path / "st").write_text("53072048,,instructions\n")
    other = determinism.start_note(tmp_path, stage.stage_share(tmp_path, 1 << 20))
    assert other != first
    assert str(tmp_path) in other and "sha256" in other


def test_end_note_names_the_copied_back_files(tmp_path):
    (tmp_path / "prog").write_bytes(b"x")
    before = stage.share_state(tmp_path)
    assert determinism.end_note(before, stage.share_state(tmp_path)) is None
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "st").write_text("1,,instructions\n")
    note = determinism.end_note(before, stage.share_state(tmp_path))
    assert note.startswith("pvperf: deterministic run: 1 file(s) copied back")
    assert "sub/st" in note
    os.utime(tmp_path / "prog", (5, 5))
    assert "2 file(s)" in determinism.end_note(before,
                                               stage.share_state(tmp_path))
