"""Pilot tests of every steering key on the live main screen (commands reach the loop)."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest
from textual.widgets import OptionList, TabbedContent, TextArea

from l2tui.tui.screens.main import MainScreen
from l2tui.tui.screens.modals import ChoiceScreen, EditorScreen, PromptScreen, ReorderScreen
from l2tui.tui.widgets.agent_log import AgentLog
from l2tui.tui.widgets.metrics_panel import MetricsPanel
from l2tui.tui.widgets.shape_grid import ShapeGrid

from tui_support import SIZE, live_app, plain

RUNNING = "4096x4096x4096-f32"


async def settle(pilot, app, n: int = 3) -> None:
    for _ in range(n):
        await pilot.pause(0.1)


def main_screen(app) -> MainScreen:
    scr = app.screen
    assert isinstance(scr, MainScreen)
    return scr


async def test_opens_on_the_running_track(tmp_path):
    app, loop = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        scr = main_screen(app)
        assert scr.track_id == RUNNING          # follows the running track
        assert len(scr.model.tracks) == 30
        grid = scr.query_one(ShapeGrid)
        assert grid.current_shape() == (4096, 4096, 4096)


@pytest.mark.parametrize("key,name", [("full_stop", "step"), ("x", "stop"), ("s", "bench_server"), ("f", "profile")])
async def test_track_commands(tmp_path, key, name):
    app, loop = live_app(tmp_path)
    seen: list[MainScreen.CommandSent] = []

    def hook(message) -> None:  # noqa: ANN001 - every message the app handles
        if isinstance(message, MainScreen.CommandSent) and all(m is not message for m in seen):
            seen.append(message)

    async with app.run_test(size=SIZE, message_hook=hook) as pilot:
        await settle(pilot, app)
        await pilot.press(key)
        await settle(pilot, app)
        assert loop.commands == [{"name": name, "track": RUNNING}]
        assert [c.to_dict() for c in main_screen(app).sent] == loop.commands
        assert [m.command.to_dict() for m in seen] == loop.commands


async def test_pause_then_resume_follows_the_loop_state(tmp_path):
    app, loop = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("p")
        await settle(pilot, app)
        assert loop.commands[-1] == {"name": "pause", "track": RUNNING}
        scr = main_screen(app)
        assert scr.model.tracks[RUNNING].state == "paused"   # the loop's track_state came back through the feed
        await pilot.press("p")
        await settle(pilot, app)
        assert loop.commands[-1] == {"name": "resume", "track": RUNNING}
        await pilot.press("P")
        await settle(pilot, app)
        assert loop.commands[-1] == {"name": "pause", "track": None}


async def test_hint_prompt_sends_text(tmp_path):
    app, loop = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("h")
        await settle(pilot, app)
        assert isinstance(app.screen, PromptScreen)
        await pilot.press(*"use 4 stages")
        await pilot.press("enter")
        await settle(pilot, app)
        assert loop.commands == [{"name": "hint", "track": RUNNING, "text": "use 4 stages"}]
        scr = main_screen(app)
        assert scr.model.tracks[RUNNING].hint == "use 4 stages"
        body = plain(scr.query_one(MetricsPanel).query_one("#mp-body"))
        assert "use 4 stages" in body


async def test_hint_escape_sends_nothing(tmp_path):
    app, loop = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("h", "a", "escape")
        await settle(pilot, app)
        assert loop.commands == []
        assert isinstance(app.screen, MainScreen)


@pytest.mark.parametrize("key,name", [("a", "accept"), ("r", "reject"), ("n", "pin")])
async def test_decisions_carry_the_shown_candidate(tmp_path, key, name):
    app, loop = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        scr = main_screen(app)
        sha = scr.shown_candidate().sha
        await pilot.press(key)
        await settle(pilot, app)
        assert loop.commands == [{"name": name, "track": RUNNING, "sha": sha}]
        tr = scr.model.tracks[RUNNING]
        assert sha in {"accept": tr.accepted, "reject": tr.rejected, "pin": tr.pinned}[name]
        if name == "pin":  # n again unpins
            await pilot.press("n")
            await settle(pilot, app)
            assert loop.commands[-1] == {"name": "unpin", "track": RUNNING, "sha": sha}


def _editor_script(tmp_path: Path) -> Path:
    script = tmp_path / "fake-editor.py"
    script.write_text(
        "import sys, pathlib\n"
        "p = pathlib.Path(sys.argv[1])\n"
        "p.write_text(p.read_text().replace('#define TILE_K 32', '#define TILE_K 64'))\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


async def test_edit_in_external_editor(tmp_path, monkeypatch):
    script = _editor_script(tmp_path)
    monkeypatch.setenv("EDITOR", f"{sys.executable} {script}")
    monkeypatch.delenv("VISUAL", raising=False)
    app, loop = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        scr = main_screen(app)
        old = scr._source(scr.shown_candidate().sha)
        assert "#define TILE_K 32" in old
        await pilot.press("e")
        await settle(pilot, app)
        assert len(loop.commands) == 1
        cmd = loop.commands[0]
        assert cmd["name"] == "edit" and cmd["track"] == RUNNING
        assert cmd["source"] == old.replace("#define TILE_K 32", "#define TILE_K 64")


async def test_edit_unchanged_sends_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("EDITOR", "true")
    monkeypatch.delenv("VISUAL", raising=False)
    app, loop = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("e")
        await settle(pilot, app)
        assert loop.commands == []


async def test_edit_in_app_editor(tmp_path):
    app, loop = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("E")
        await settle(pilot, app)
        assert isinstance(app.screen, EditorScreen)
        area = app.screen.query_one(TextArea)
        area.move_cursor((0, 0))
        await pilot.press(*"// tuned by hand")
        await pilot.press("enter", "ctrl+s")
        await settle(pilot, app)
        assert [c["name"] for c in loop.commands] == ["edit"]
        assert loop.commands[0]["source"].startswith("// tuned by hand\n// HGEMM")


async def test_reorder_queue(tmp_path):
    app, loop = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        queue = [t.id for t in main_screen(app).model.queue()]
        assert len(queue) == 3
        await pilot.press("o")
        await settle(pilot, app)
        assert isinstance(app.screen, ReorderScreen)
        await pilot.press("J", "ctrl+s")   # move the first one down
        await settle(pilot, app)
        assert loop.commands == [{"name": "reorder", "track": None, "order": [queue[1], queue[0], queue[2]]}]


@pytest.mark.parametrize("key,name,pick", [("y", "policy", "human"), ("u", "acc", "f16"), ("t", "mode", "server"),
                                           ("b", "baseline", "cublas")])
async def test_switches(tmp_path, key, name, pick):
    app, loop = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press(key)
        await settle(pilot, app)
        assert isinstance(app.screen, ChoiceScreen)
        ol = app.screen.query_one(OptionList)
        ol.highlighted = app.screen.options.index(pick)
        await pilot.press("enter")
        await settle(pilot, app)
        assert loop.commands == [{"name": name, "track": RUNNING, "value": pick}]
        if name == "baseline":   # the grid recolours for the chosen baseline
            scr = main_screen(app)
            assert scr.query_one(ShapeGrid).baseline == "cublas"
            tr = scr.model.tracks["64x64x1024-f32"]
            assert tr.speedup_vs("cublas") == pytest.approx(tr.best_times_ms["cublas"] / tr.best_times_ms["candidate"])


async def test_view_keys(tmp_path):
    app, loop = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        scr = main_screen(app)
        tabs = scr.query_one("#kp-tabs", TabbedContent)
        assert tabs.active == "tab-source"
        await pilot.press("d")
        await settle(pilot, app)
        assert tabs.active == "tab-diff"
        mp = scr.query_one(MetricsPanel)
        await pilot.press("m")
        assert mp.full
        log = scr.query_one(AgentLog)
        await pilot.press("l")
        await settle(pilot, app)
        assert log.filter_on and log.only_track == RUNNING
        await pilot.press("c")
        await settle(pilot, app)
        assert app.clipboard == scr._source(scr.shown_candidate().sha)
        assert loop.commands == []   # view keys send nothing


async def test_grid_cursor_focuses_tracks(tmp_path):
    app, loop = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        scr = main_screen(app)
        await pilot.press("left", "left", "left")   # 4096 -> 64 along N? (N axis is the grid's columns)
        await settle(pilot, app)
        grid = scr.query_one(ShapeGrid)
        assert grid.current_shape() == (4096, 512, 4096)
        assert scr.track_id is None                   # untried shape: nothing focused
        await pilot.press("left", "left", "left")
        await settle(pilot, app)
        assert grid.current_shape() == (4096, 64, 4096)
        assert scr.track_id == "4096x64x4096-f32"
        assert not scr.follow
        await pilot.press("F")
        await settle(pilot, app)
        assert scr.track_id == RUNNING


async def test_keymap_override_from_config(tmp_path):
    app, loop = live_app(tmp_path, keys={"accept": "ctrl+y", "hint": "f5"})
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("a")
        await settle(pilot, app)
        assert loop.commands == []
        await pilot.press("ctrl+y")
        await settle(pilot, app)
        assert [c["name"] for c in loop.commands] == ["accept"]
        await pilot.press("f5")
        await settle(pilot, app)
        assert isinstance(app.screen, PromptScreen)


async def test_command_palette_runs_actions(tmp_path):
    app, loop = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("ctrl+p")
        await settle(pilot, app)
        await pilot.press(*"Server benchmark")
        await settle(pilot, app, 5)
        await pilot.press("enter")
        await settle(pilot, app, 5)
        assert loop.commands == [{"name": "bench_server", "track": RUNNING}]


async def test_palette_has_every_action(tmp_path):
    from l2tui.tui import keymap
    from l2tui.tui.palette import SteeringCommands

    app, loop = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        provider = SteeringCommands(app.screen)
        actions = {a for _, a, _ in provider._entries()}
        for spec in keymap.MAIN:
            assert spec.action in actions
            assert hasattr(MainScreen, f"action_{spec.action}")


async def test_live_telemetry_worker(tmp_path):
    """The NVML sampler runs in its own worker group; without a GPU it ends at once with the reason."""
    from harness.gpuinfo import gpu_present

    app, loop = live_app(tmp_path, telemetry_hz=5)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, 5)
        from l2tui.tui.widgets.feeds import LiveFeed

        w = app.screen.query_one(LiveFeed).telemetry_worker
        assert w is not None and w.group == "telemetry"
        if gpu_present():
            assert w.is_running
            assert main_screen(app).model.telemetry.get("sm_clock_mhz") is not None
        else:
            assert w.is_finished and isinstance(w.result, str) and ("NVML" in w.result or "pynvml" in w.result)
