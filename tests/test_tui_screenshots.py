"""The docs' screenshots: every one is drawn from the bundled demo by one command
(``python -m l2tui.tui.screenshots``), names the session it shows, and docs/tui.md says what
each shows and how it is made."""

from __future__ import annotations

import html
import io
import re
from contextlib import redirect_stderr
from pathlib import Path

import pytest

from l2tui import paths
from l2tui.tui import screenshots
from l2tui.tui.screenshots import SHOTS, session_caption

DOCS = paths.REPO_ROOT / "docs"
SHOT_DIR = DOCS / "screenshots"
DEMO = paths.DEMO_SESSION

needs_demo = pytest.mark.skipif(not (DEMO / "events.jsonl").is_file(), reason="no bundled demo session")


def svg_text(path: Path) -> str:
    """The text an SVG screenshot shows, spaces as spaces (Rich writes them as &#160;)."""
    raw = path.read_text(encoding="utf-8")
    return html.unescape(" ".join(re.findall(r">([^<>]*)</text>", raw))).replace("\xa0", " ")


def test_the_script_makes_exactly_the_screenshots_the_docs_hold():
    assert sorted(p.stem for p in SHOT_DIR.glob("*")) == sorted(s.name for s in SHOTS)


@needs_demo
@pytest.mark.parametrize("shot", [s.name for s in SHOTS])
def test_each_screenshot_names_the_bundled_demo_it_shows(shot):
    caption = session_caption(DEMO)
    assert caption.startswith("sessions/demo-h200 (")
    assert caption in svg_text(SHOT_DIR / f"{shot}.svg"), (
        f"docs/screenshots/{shot}.svg does not show {caption}: run `python -m l2tui.tui.screenshots`")


def test_the_docs_say_what_each_screenshot_shows_and_how_it_is_made():
    text = (DOCS / "tui.md").read_text(encoding="utf-8")
    assert "`python -m l2tui.tui.screenshots`" in text or "python -m l2tui.tui.screenshots\n" in text
    for s in SHOTS:
        assert f"| `docs/screenshots/{s.name}.svg` | {s.shows} |" in text
    assert "scripted" not in text.split("## The bundled demo")[0]   # the page opens with the real demo
    assert text.count("--budget-s 540") == 0                        # one budget for the demo: its own


@needs_demo
def test_the_docs_numbers_of_the_demo_are_the_sessions():
    """docs/tui.md's paragraph on the demo quotes its budget and counts; a re-recorded demo that
    changes them makes this fail until the paragraph is updated."""
    from harness.stats import geomean

    from l2tui.tui.sessionio import open_session

    events = open_session(DEMO).events
    cfg = events[0]["config"]
    budget = cfg["loop"]["global_wall_time_s"]
    timed = sum(1 for e in events if e["type"] == "timed")
    profiled = sum(1 for e in events if e["type"] == "profiled")
    tracks = sum(1 for e in events if e["type"] == "track_added")
    best: dict[str, float] = {}
    for e in events:
        if e["type"] == "best":
            best[e["track"]] = e["speedup"]
    text = " ".join((DOCS / "tui.md").read_text(encoding="utf-8").split())
    assert f"time budget was {budget:.0f} s" in text
    assert f"{timed} timed candidates, {profiled} Nsight Compute profiles, every one of the {tracks} tracks" in text
    assert f"cuBLAS {geomean(best.values()):.2f}x" in text


@needs_demo
def test_the_script_draws_every_shot_from_the_demo(tmp_path):
    assert screenshots.main(["--out", str(tmp_path)]) == 0
    caption = session_caption(DEMO)
    for s in SHOTS:
        assert caption in svg_text(tmp_path / f"{s.name}.svg")
    assert "w: next panel" not in svg_text(tmp_path / "main.svg")    # all panels at 160x48
    assert "w: next panel" in svg_text(tmp_path / "small.svg")


def test_a_folder_that_is_no_session_is_one_line(tmp_path):
    err = io.StringIO()
    with redirect_stderr(err):
        assert screenshots.main(["--session", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    lines = err.getvalue().splitlines()
    assert len(lines) == 1 and "is not a session (no events.jsonl)" in lines[0]
    assert not (tmp_path / "out").exists()


def test_a_damaged_session_is_one_line(tmp_path):
    """The session is read as data: a damaged field stops the script with one line, no traceback."""
    s = tmp_path / "odd"
    s.mkdir()
    (s / "events.jsonl").write_text('{"seq": 0, "time": 1e300, "type": "session_started", "gpu": "H200\\n"}\n')
    err = io.StringIO()
    with redirect_stderr(err):
        assert screenshots.main(["--session", str(s), "--out", str(tmp_path / "out")]) == 2
    lines = err.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("screenshots: error:") and "malformed gpu" in lines[0]


def test_a_start_time_that_is_no_time_has_words():
    assert screenshots._utc(1e300) == "no start time" and screenshots._utc("x") == "no start time"
    assert screenshots._utc(0) == "1970-01-01 00:00 UTC"
