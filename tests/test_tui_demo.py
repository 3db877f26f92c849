"""The app on the bundled demo session (``sessions/demo-h200``), as a newcomer first sees it:
which candidate the panels show and how it is numbered, the export toast, the replay's default
speed, restarting at the end, and the geomean plot's time axis (issue 53, items 5, 6 and 7)."""

from __future__ import annotations

import json
import re

import pytest

from l2tui import paths
from l2tui.tui.replay import ReplayClock
from l2tui.tui.screens.main import MainScreen
from l2tui.tui.sessionio import open_session
from l2tui.tui.widgets.feeds import ReplayFeed
from l2tui.tui.widgets.history import HistoryPanel

from tui_support import SIZE, plain, replay_app

DEMO = paths.DEMO_SESSION
TRACK = "128x128x128-f32"

pytestmark = pytest.mark.skipif(not (DEMO / "events.jsonl").is_file(), reason="no bundled demo session")


async def settle(pilot, n: int = 4) -> None:
    for _ in range(n):
        await pilot.pause(0.05)


def notes(app) -> list[str]:  # noqa: ANN001
    return [str(n.message) for n in app._notifications]


def demo_events() -> list[dict]:
    return list(open_session(DEMO).events)


def focus(scr: MainScreen, track: str) -> None:
    """Put the focus on ``track`` as a move of the grid cursor does (the UI stops following)."""
    scr.follow = False
    scr._focus(track, move_cursor=True)


def log_lines(scr: MainScreen, track: str) -> list[str]:
    return [e.text for e in scr.model.log if e.track == track]


async def test_the_panels_show_the_best_candidate_under_one_numbering():
    """On 128x128x128 the last candidate of step 1 (1.03x) is not the best (its sibling, 1.12x):
    kernel and metrics panels show the best, with the number the log gives it, and its profile."""
    app = replay_app(DEMO, start=10**6)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        scr = app.screen
        focus(scr, TRACK)
        await settle(pilot, 2)
        tr = scr.model.tracks[TRACK]
        assert tr.current_sha != tr.best_sha       # the case of the issue: the newest is not the best
        shown = scr.shown_candidate()
        assert shown is not None and shown.sha == tr.best_sha
        nums = [c.num for c in tr.candidates.values()]
        assert len(nums) == len(set(nums))          # no two candidates share a number
        title = plain(scr.query_one("#kp-title"))
        assert f"#{shown.num} {shown.sha[:12]}" in title and "BEST" in title
        metrics = plain(scr.query_one("#mp-body"))
        assert f"{tr.best_speedup:.2f}×" in metrics
        assert shown.profiled is not None
        assert f"bottleneck: {shown.profiled['verdict']}" in metrics and "not profiled" not in metrics
        lines = log_lines(scr, TRACK)
        assert f"#{shown.num} profiled: {shown.profiled['verdict']}" in " | ".join(lines)
        # every "#n" the log uses for a candidate's sha is the number the panels use
        for c in tr.candidates.values():
            assert any(ln.startswith(f"#{c.num} candidate {c.sha[:10]}") for ln in lines)


async def test_j_and_k_pick_another_candidate_and_f_follows_the_best_again():
    app = replay_app(DEMO, start=10**6)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        scr = app.screen
        focus(scr, TRACK)
        await settle(pilot, 2)
        tr = scr.model.tracks[TRACK]
        best = scr.shown_candidate()
        by_num = sorted(tr.candidates.values(), key=lambda c: c.num)
        await pilot.press("k")
        await settle(pilot, 2)
        after = by_num[best.num + 1]
        assert scr.shown_candidate().sha == after.sha
        assert f"#{after.num} {after.sha[:12]}" in plain(scr.query_one("#kp-title"))
        assert "BEST" not in plain(scr.query_one("#kp-title"))
        await pilot.press("j", "j")
        await settle(pilot, 2)
        assert scr.shown_candidate().sha == by_num[best.num - 1].sha
        await pilot.press("F")
        await settle(pilot, 2)
        focus(scr, TRACK)
        await settle(pilot, 2)
        assert scr.shown_candidate().sha == tr.best_sha


async def test_the_export_toast_says_how_many_shapes_run_a_kernel_and_how_many_the_fallback(tmp_path):
    from textual.widgets import Input

    app = replay_app(DEMO, start=10**6)
    out = tmp_path / "lib"
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("X")
        await settle(pilot)
        app.screen.query_one(Input).value = str(out)
        await pilot.press("enter")
        for _ in range(600):
            await pilot.pause(0.05)
            if any(n.startswith("exported") for n in notes(app)):
                break
        manifest = json.loads((out / "manifest.json").read_text())
        entries = manifest["kernels"]
        fallback = sum(1 for e in entries if e.get("fallback"))
        assert 0 < fallback < len(entries)          # the demo has both kinds of route
        toast = next(n for n in notes(app) if n.startswith("exported"))
        assert (f"exported to {out}: {len(entries)} shapes: {len(entries) - fallback} run an exported kernel, "
                f"{fallback} the cuBLAS fallback") in toast
        assert "kernel(s)" not in toast


def test_a_plain_l2tui_plays_the_demo_slowly_enough_to_watch():
    """The demo a plain ``l2tui`` opens lasts between half a minute and three minutes of watching."""
    from l2tui.tui.launch import DEMO_SPEED

    clock = ReplayClock(demo_events(), speed=DEMO_SPEED)
    assert clock.speed == DEMO_SPEED
    watch_s = clock.vtimes[-1] / clock.speed
    assert 30 <= watch_s <= 180, watch_s


async def test_space_at_the_end_plays_again_from_the_start():
    app = replay_app(DEMO, start=10**6, speed=1)   # at x1 the demo's replay lasts minutes
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        scr = app.screen
        clock = scr.query_one(ReplayFeed).clock
        assert clock.at_end and not clock.playing
        assert "space plays again" in plain(scr.query_one("#replaybar"))
        await pilot.press("space")
        assert clock.playing and not clock.at_end
        await pilot.press("space")
        assert not clock.playing
        await settle(pilot)
        assert scr.model.n_events == clock.pos < clock.total   # the model was rebuilt from the first event


async def test_the_geomean_plot_covers_the_whole_session():
    """The last new best of the demo comes at 44 s of a 134 s session; the plot runs to the end."""
    events = demo_events()
    duration = events[-1]["time"] - events[0]["time"]
    last_best = max(e["time"] for e in events if e["type"] == "best") - events[0]["time"]
    assert last_best < duration - 30
    app = replay_app(DEMO, start=10**6)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        series = app.screen.query_one(HistoryPanel).all_series
        assert series[-1][0] == pytest.approx(duration)
        assert series[-1][1] == pytest.approx(app.screen.model.best_over_time[-1][1])


async def test_the_geomean_plot_follows_the_clock_while_playing():
    """Stepping forward past the last new best (no reset, no new best) still moves the plot's end."""
    events = demo_events()
    t0 = events[0]["time"]
    last_best = max(i for i, e in enumerate(events) if e["type"] == "best")
    app = replay_app(DEMO, start=last_best + 1)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        panel = app.screen.query_one(HistoryPanel)
        await pilot.press("end")
        for _ in range(40):                          # the plot is redrawn on a 1 s timer
            await pilot.pause(0.1)
            if panel.all_series and panel.all_series[-1][0] == pytest.approx(events[-1]["time"] - t0):
                break
        assert panel.all_series[-1][0] == pytest.approx(events[-1]["time"] - t0)


def test_log_lines_name_steps_and_candidates_apart():
    """Stage lines say "step n"; lines about one candidate start with its "#n"."""
    from l2tui.tui.state import SessionModel

    model = SessionModel()
    model.apply_many(demo_events())
    stage = [e.text for e in model.log if e.kind == "stage"]
    assert stage and all(re.match(r"step \d+ ", t) for t in stage)
    tr = model.tracks[TRACK]
    nums = {f"#{c.num}" for c in tr.candidates.values()}
    for e in model.log:
        if e.track == TRACK and e.kind in ("compiled", "checked", "timed", "profiled", "reward"):
            assert e.text.split()[0] in nums, e.text

