"""Session files are never opened through a symbolic link, and their lines have a size cap.

A session folder may come from someone else; a link planted in it must not make a writer
truncate, append to or write through its target (issue 51)."""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from l2tui.errors import SessionError
from l2tui.export.sessionio import open_session
from l2tui.session import MAX_LINE_BYTES, Session


def _make(root: Path) -> Session:
    s = Session.create(root / "s", config={"llm": {"model": "m"}}, gpu={"name": "GPU"}, versions={"l2tui": "0"})
    s.append("hint", track=None, text="a")
    s.close()
    return s


def _target(tmp_path: Path) -> Path:
    t = tmp_path / "victim.txt"
    t.write_text("precious\n")
    return t


def test_a_lock_file_link_is_refused_on_resume_and_its_target_kept(tmp_path):
    s = _make(tmp_path)
    victim = _target(tmp_path)
    (s.path / "session.lock").unlink(missing_ok=True)
    (s.path / "session.lock").symlink_to(victim)
    with pytest.raises(SessionError, match=r"session\.lock is a symbolic link"):
        Session.open(s.path, writer="run --resume")
    assert victim.read_text() == "precious\n"


def test_a_rewards_link_is_refused_and_its_target_kept(tmp_path):
    s = _make(tmp_path)
    victim = _target(tmp_path)
    (s.path / "rewards.jsonl").unlink()
    (s.path / "rewards.jsonl").symlink_to(victim)
    with pytest.raises(SessionError, match=r"rewards\.jsonl is a symbolic link"):
        Session.open(s.path, writer="run --resume")
    assert victim.read_text() == "precious\n"


def test_an_append_through_a_link_planted_while_open_is_refused(tmp_path):
    s = _make(tmp_path)
    w = Session.open(s.path, writer="run --resume")
    victim = _target(tmp_path)
    (s.path / "rewards.jsonl").unlink()
    (s.path / "rewards.jsonl").symlink_to(victim)
    try:
        with pytest.raises(SessionError, match=r"rewards\.jsonl is a symbolic link"):
            w.append_reward({"track": "t", "reward": 1.0})
    finally:
        w.close()
    assert victim.read_text() == "precious\n"


def test_a_kernels_folder_link_is_refused_and_nothing_written_through_it(tmp_path):
    s = _make(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (s.path / "kernels").rmdir()
    (s.path / "kernels").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(SessionError, match=r"kernels is a symbolic link"):
        Session.open(s.path, writer="run --resume")
    with pytest.raises(SessionError, match=r"kernels is a symbolic link"):
        s.put_kernel("int x;\n")
    assert list(elsewhere.iterdir()) == []


def test_a_kernel_file_link_is_not_read(tmp_path):
    s = _make(tmp_path)
    w = Session.open(s.path)
    sha = "a" * 64
    (s.path / "kernels" / f"{sha}.cu").symlink_to(_target(tmp_path))
    assert not w.has_kernel(sha)
    with pytest.raises(SessionError, match="symbolic link"):
        w.get_kernel(sha)


def test_a_session_folder_that_is_a_link_is_refused(tmp_path):
    s = _make(tmp_path)
    (tmp_path / "alias").symlink_to(s.path, target_is_directory=True)
    with pytest.raises(SessionError, match=r"alias is a symbolic link"):
        Session.open(tmp_path / "alias")
    with pytest.raises(SessionError, match=r"alias is a symbolic link"):
        open_session(tmp_path / "alias")


def test_rl_data_on_a_linked_rewards_file_gives_one_line(tmp_path):
    s = _make(tmp_path)
    (s.path / "rewards.jsonl").unlink()
    (s.path / "rewards.jsonl").symlink_to(_target(tmp_path))
    r = subprocess.run([sys.executable, "-m", "l2tui", "rl-data", str(s.path), "--format", "trl",
                        "--out", str(tmp_path / "rows.jsonl")], capture_output=True, text=True)
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "rewards.jsonl is a symbolic link" in lines[0]


def _huge_line_session(tmp_path: Path, size: int) -> Session:
    s = _make(tmp_path)
    with open(s.path / "events.jsonl", "ab") as f:
        f.write(b'{"seq": 2, "time": 1.0, "type": "hint", "text": "' + b"x" * size + b'"}\n')
        f.write(b'{"seq": 3, "time": 2.0, "type": "hint", "text": "after"}\n')
    return s


def test_an_over_long_event_line_is_skipped_in_bounded_memory_and_the_rest_kept(tmp_path):
    s = _huge_line_session(tmp_path, 4 * MAX_LINE_BYTES)
    tracemalloc.start()
    try:
        opened = Session.open(s.path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * MAX_LINE_BYTES + (4 << 20)     # one capped read at a time, never the line
    assert [e.get("text") for e in opened.events if e["type"] == "hint"] == ["a", "after"]
    assert [p for p in opened.problems if "line 3 is longer than" in p and p.startswith("events.jsonl")]


def test_a_writer_keeps_the_lines_after_an_over_long_one(tmp_path):
    s = _huge_line_session(tmp_path, MAX_LINE_BYTES + 10)
    w = Session.open(s.path, writer="run --resume")
    w.append("hint", track=None, text="new")
    w.close()
    texts = [json.loads(ln).get("text") for ln in (s.path / "events.jsonl").read_bytes().splitlines()
             if len(ln) < MAX_LINE_BYTES]
    assert texts[-2:] == ["after", "new"]


def test_the_ui_reader_reads_neither_an_events_link_nor_a_kernel_link(tmp_path):
    """The app's read-only reader (replay) goes through the same link-refusing readers."""
    from l2tui.tui.sessionio import EventLogReader

    s = _make(tmp_path)
    sha = "b" * 64
    (s.path / "kernels" / f"{sha}.cu").symlink_to(_target(tmp_path))
    reader = EventLogReader(s.path)
    with pytest.raises(SessionError, match="symbolic link"):
        reader.get_kernel(sha)
    events = s.path / "events.jsonl"
    moved = tmp_path / "elsewhere.jsonl"
    events.rename(moved)
    events.symlink_to(moved)
    with pytest.raises(SessionError, match="symbolic link"):
        EventLogReader(s.path)
