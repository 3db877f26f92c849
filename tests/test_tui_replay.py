"""Pilot tests of the replay screen: transport keys, seeking, K switching, views, help, read-only."""

from __future__ import annotations

from l2tui.tui.screens.modals import HelpScreen, PromptScreen
from l2tui.tui.screens.replay import ReplayScreen
from l2tui.tui.widgets.feeds import ReplayFeed
from l2tui.tui.widgets.shape_grid import ShapeGrid
from l2tui.tui.widgets.track_list import TrackList

from tui_support import LIST, SIZE, plain, replay_app


async def settle(pilot, n: int = 3) -> None:
    for _ in range(n):
        await pilot.pause(0.05)


def screen(app) -> ReplayScreen:
    assert isinstance(app.screen, ReplayScreen)
    return app.screen


async def test_step_back_and_forth_by_event():
    app = replay_app(start=0)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        scr = screen(app)
        clock = scr.query_one(ReplayFeed).clock
        assert clock.pos == 0 and not scr.model.tracks
        await pilot.press("greater_than_sign", "greater_than_sign", "greater_than_sign")
        await settle(pilot)
        assert clock.pos == 3
        assert scr.model.n_events == 3
        first_track = clock.events[1]["track"]
        assert first_track in scr.model.tracks
        await pilot.press("less_than_sign")
        await settle(pilot)
        assert clock.pos == 2
        assert scr.model.n_events == 2     # rebuilt from the start: seeking back is exact
        assert "event 2/" in plain(scr.query_one("#replaybar"))


async def test_play_pause_and_speed():
    app = replay_app(start=0, speed=10)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        clock = screen(app).query_one(ReplayFeed).clock
        assert not clock.playing
        await pilot.press("space")
        assert clock.playing
        await pilot.press("plus", "plus")
        assert clock.speed == 50
        await pilot.press("minus")
        assert clock.speed == 20
        await pilot.press("space")
        assert not clock.playing
        pos = clock.pos
        await settle(pilot)
        assert clock.pos == pos           # paused: the head does not move
        assert "PAUSED" in plain(screen(app).query_one("#replaybar"))


async def test_playing_delivers_events_until_paused():
    app = replay_app(start=0, speed=100, autoplay=True)
    async with app.run_test(size=SIZE) as pilot:
        clock = screen(app).query_one(ReplayFeed).clock
        for _ in range(100):
            await pilot.pause(0.05)
            if clock.pos > 0:
                break
        assert clock.pos > 0
        await pilot.press("space")
        await settle(pilot)
        assert not clock.playing
        assert screen(app).model.n_events == clock.pos   # every released event reached the model


async def test_seek_to_step_time_event_and_ends():
    app = replay_app(start=0)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        scr = screen(app)
        clock = scr.query_one(ReplayFeed).clock
        await pilot.press("end")
        await settle(pilot)
        assert clock.pos == clock.total
        assert len(scr.model.tracks) == 30
        await pilot.press("home")
        await settle(pilot)
        assert clock.pos == 0 and not scr.model.tracks
        await pilot.press("colon")
        await settle(pilot)
        assert isinstance(app.screen, PromptScreen)
        await pilot.press(*"#100", "enter")
        await settle(pilot)
        assert clock.pos == 101 and scr.model.n_events == 101
        await pilot.press("colon", *"2:00", "enter")
        await settle(pilot)
        assert clock.pos == clock.index_for_time(120)
        assert clock.elapsed <= 120 < clock.times[clock.pos] - clock.t0
        await pilot.press("colon", *"step 3", "enter")
        await settle(pilot)
        ev = clock.events[clock.pos - 1]
        assert ev.get("step") == 3
        await pilot.press("colon", *"nonsense", "enter")
        await settle(pilot)
        assert ev is clock.events[clock.pos - 1]   # a bad target leaves the head alone


async def test_next_and_previous_agent_step():
    app = replay_app(start=0)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        clock = screen(app).query_one(ReplayFeed).clock
        await pilot.press("right_curly_bracket")
        await settle(pilot)
        first = clock.pos
        ev = clock.events[first - 1]
        assert ev["type"] == "stage" and ev["status"] == "start" and ev["stage"] in ("seed", "plan")
        await pilot.press("right_curly_bracket")
        await settle(pilot)
        assert clock.pos > first
        await pilot.press("left_curly_bracket")
        await settle(pilot)
        assert clock.pos == first


async def test_k_switching_and_views():
    app = replay_app(start=10**6)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        scr = screen(app)
        grid = scr.query_one(ShapeGrid)
        k0 = grid.k
        await pilot.press("right_square_bracket")
        await settle(pilot)
        assert grid.k == grid.ks[(grid.ks.index(k0) + 1) % len(grid.ks)]
        await pilot.press("left_square_bracket")
        assert grid.k == k0
        await pilot.press("v")
        await settle(pilot)
        assert scr.view == "all" and grid.compact
        assert "K=16k" in plain_render(grid)
        await pilot.press("v")
        await settle(pilot)
        assert scr.view == "list"
        tl = scr.query_one(TrackList)
        assert tl.display and not grid.display and tl.row_count == 30
        await pilot.press("v")
        assert scr.view == "grid" and grid.display


def plain_render(widget) -> str:
    return widget.render().plain


async def test_custom_shapes_open_as_a_list():
    app = replay_app(LIST, start=10**6)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        scr = screen(app)
        assert scr.view == "list"
        tl = scr.query_one(TrackList)
        assert tl.row_count == 4
        await pilot.press("down")
        await settle(pilot)
        assert scr.track_id == tl.coordinate_to_cell_key((1, 0)).row_key.value


async def test_steering_in_replay_is_read_only():
    app = replay_app(start=10**6)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        scr = screen(app)
        await pilot.press("p", "a", "x")
        await settle(pilot)
        assert scr.sent == []
        assert any("read-only" in str(n.message) for n in app._notifications)


async def test_help_lists_live_keys_with_remaps():
    app = replay_app(start=10**6, keys={"replay.play": "ctrl+t", "accept": "ctrl+y"})
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        clock = screen(app).query_one(ReplayFeed).clock
        await pilot.press("ctrl+t")
        assert clock.playing  # at the end, the remapped key plays again from the start
        await pilot.press("ctrl+t")
        assert not clock.playing
        await pilot.press("question_mark")
        await settle(pilot)
        assert isinstance(app.screen, HelpScreen)
        text = plain(app.screen.query_one("#help-table"))
        assert "^t" in text and "Play/pause" in text
        assert "^y" in text and "Accept" in text
        for needle in ("Hint", "Edit in $EDITOR", "Next K", "Seek to step/time", "Reorder queue"):
            assert needle in text
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, ReplayScreen)


async def test_export_from_replay(tmp_path):
    from textual.widgets import Input

    app = replay_app(start=10**6)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("X")
        await settle(pilot)
        assert isinstance(app.screen, PromptScreen)
        app.screen.query_one(Input).value = str(tmp_path / "lib")
        await pilot.press("enter")
        for _ in range(200):
            await pilot.pause(0.05)
            if (tmp_path / "lib" / "manifest.json").exists() and any(
                    "exported" in str(n.message) for n in app._notifications):
                break
        assert (tmp_path / "lib" / "manifest.json").exists()
        assert any("exported" in str(n.message) and "run an exported kernel" in str(n.message)
                   for n in app._notifications)
