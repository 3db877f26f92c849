"""Papercuts a newcomer hit in the app, each pinned by a pilot test (Textual ``run_test``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from l2tui.errors import ConfigError
from l2tui.session import Session
from l2tui.tui.app import L2App, UIContext
from l2tui.tui.keymap import validate_keymap
from l2tui.tui.screens.replay import ReplayScreen
from l2tui.tui.sessionio import open_session
from l2tui.tui.widgets.agent_log import AgentLog
from l2tui.tui.widgets.metrics_panel import MetricsPanel
from l2tui.tui.widgets.track_list import TrackList

from tui_support import GRID, LIST, SIZE, live_app, plain, replay_app


async def settle(pilot, n: int = 4) -> None:
    for _ in range(n):
        await pilot.pause(0.1)


def notes(app) -> list[str]:  # noqa: ANN001
    return [str(n.message) for n in app._notifications]


def footer_actions(app) -> set[str]:  # noqa: ANN001
    """Actions the footer shows for the active screen (what ``Footer`` reads)."""
    return {b.action for (_, b, enabled, _) in app.active_bindings.values() if b.show}


async def test_replay_footer_shows_replay_keys_only():
    app = replay_app(GRID, start=10**6)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, ReplayScreen)
        shown = footer_actions(app)
        assert {"replay_play", "replay_faster", "replay_seek", "cycle_view", "quit"} <= shown
        assert not shown & {"pause", "hint", "edit", "accept", "reject"}, shown


async def test_live_footer_keeps_the_steering_keys(tmp_path):
    app, _ = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        shown = footer_actions(app)
        assert {"pause", "hint", "edit", "accept", "reject"} <= shown
        assert not shown & {"replay_play", "replay_seek"}


async def test_steering_in_a_replay_says_what_to_run_instead():
    app = replay_app(GRID, start=10**6)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("a")
        await settle(pilot, 2)
        msg = [n for n in notes(app) if "read-only" in n]
        assert msg == [f"replay is read-only: to steer this session, continue it live with "
                       f"`l2tui --session {GRID} --resume` on a GPU machine"]


async def test_home_and_end_in_the_list_view():
    app = replay_app(LIST, start=10**6)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        scr = app.screen
        assert scr.view == "list"
        tl = scr.query_one(TrackList)
        assert tl.row_count >= 3 and tl.has_focus
        await pilot.press("end")
        await settle(pilot, 2)
        assert tl.cursor_row == tl.row_count - 1
        last = scr.track_id
        await pilot.press("home")
        await settle(pilot, 2)
        assert tl.cursor_row == 0
        assert scr.track_id != last and scr.track_id == str(tl.coordinate_to_cell_key((0, 0)).row_key.value)


def _session_with_profiled_seed(path: Path) -> Path:
    """One track: a profiled seed, then two children; the newest derives from the first child."""
    s = Session.create(path, config={"policy": "search"}, gpu={}, versions={})
    tid = "1024x1024x1024-f32"
    s.append("track_added", track=tid, shape=[1024, 1024, 1024], acc="f32", baseline="cublas")
    seed, child, newest = s.put_kernel("// seed\n"), s.put_kernel("// child\n"), s.put_kernel("// newest\n")
    s.append("candidate", track=tid, step=0, sha=seed, parent=None, origin="seed", policy="search")
    s.append("timed", track=tid, step=0, sha=seed, times_ms={"candidate": 0.1, "cublas": 0.09},
             speedup=0.9, baseline="cublas", mode="offline")
    s.append("profiled", track=tid, step=0, sha=seed, verdict="memory-bandwidth",
             metrics={"dram__throughput.avg.pct_of_peak_sustained_elapsed": {"value": 91.5, "unit": "%"}})
    s.append("candidate", track=tid, step=1, sha=child, parent=seed, origin="patch", policy="search")
    s.append("candidate", track=tid, step=2, sha=newest, parent=child, origin="patch", policy="search")
    close = getattr(s, "close", None)
    if close is not None:
        close()
    return path


async def test_metrics_of_an_unprofiled_candidate_come_from_its_profiled_ancestor(tmp_path):
    path = _session_with_profiled_seed(tmp_path / "s")
    sess = open_session(path)
    app = L2App(UIContext(session=sess, events=list(sess.events), replay=True, autoplay=False, start=10**6))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        mp = app.screen.query_one(MetricsPanel)
        await pilot.press("m")
        await settle(pilot, 2)
        text = plain(mp.query_one("#mp-body"))
        assert "this candidate is not profiled; its ancestor #0" in text
        assert "memory-bandwidth" in text and "dram__throughput" in text
        assert any("#2 is not profiled: the full table is its ancestor #0's" in n for n in notes(app))


async def test_m_without_any_profile_says_so(tmp_path):
    s = Session.create(tmp_path / "s", config={}, gpu={}, versions={})
    tid = "512x512x512-f32"
    s.append("track_added", track=tid, shape=[512, 512, 512], acc="f32", baseline="cublas")
    s.append("candidate", track=tid, step=0, sha=s.put_kernel("// k\n"), parent=None, origin="seed")
    sess = open_session(tmp_path / "s")
    app = L2App(UIContext(session=sess, events=list(sess.events), replay=True, autoplay=False, start=10**6))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("m")
        await settle(pilot, 2)
        assert "no NCU profile of #0 or of any kernel it was derived from" in " ".join(notes(app))
        assert "not profiled, nor any kernel it was derived from" in plain(app.screen.query_one("#mp-body"))


async def test_empty_events_file_says_so(tmp_path):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "events.jsonl").write_text("")
    sess = open_session(tmp_path / "s")
    app = L2App(UIContext(session=sess, events=list(sess.events), replay=True))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        want = "holds no events yet (its events.jsonl is empty): nothing to replay"
        assert any(want in n for n in notes(app))
        log = app.screen.query_one(AgentLog)
        assert any(want in "".join(seg.text for seg in line) for line in log.lines)


def test_a_remap_that_shadows_another_key_is_refused():
    with pytest.raises(ConfigError) as e:
        validate_keymap({"accept": "q"}, "l2tui.toml")
    assert str(e.value) == ('l2tui.toml: [keys] accept = "q" shadows quit (Quit, also on "q"): '
                            "give one of them another key")
    with pytest.raises(ConfigError, match=r'pause = "\." shadows step'):
        validate_keymap({"pause": "."})           # "." is the step key's full_stop
    with pytest.raises(ConfigError, match="shadows grid.up"):
        validate_keymap({"hint": "f5,up"})
    # swapping two keys, or a transport key on a (read-only in replay) steering key, is fine
    assert validate_keymap({"pause": "a", "accept": "p"}) == {"pause": "a", "accept": "p"}
    assert validate_keymap({"replay.forward": "n"}) == {"replay.forward": "n"}


def test_a_shadowing_remap_stops_the_app_with_one_line(tmp_path):
    import subprocess
    import sys

    (tmp_path / "l2tui.toml").write_text('[keys]\naccept = "q"\n')
    r = subprocess.run([sys.executable, "-m", "l2tui.cli", "replay", str(GRID)], cwd=tmp_path, capture_output=True,
                       text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "l2tui: using ./l2tui.toml from the working directory",
        f'l2tui: error: {tmp_path / "l2tui.toml"}: [keys] accept = "q" shadows quit (Quit, also on "q"): '
        "give one of them another key"]


def _session_of_a_models_shapes(path: Path) -> Path:
    """Three decode GEMMs of a model, their roles kept in the session's config as `l2tui run` keeps
    them; a fourth shape without a role, and a malformed roles entry that must be ignored."""
    roles = {"16x6144x4096": "llama-3-8b qkv t16", "16x4096x4096": "llama-3-8b o t16",
             "16x28672x4096": "llama-3-8b gate_up t16", "../x": "bad", "16x4096x14336": 7}
    s = Session.create(path, config={"policy": "search", "run": {"policy": "search", "roles": roles}},
                       gpu={}, versions={})
    for m, n, k in ((16, 6144, 4096), (16, 4096, 4096), (16, 28672, 4096), (16, 4096, 14336)):
        s.append("track_added", track=f"{m}x{n}x{k}-f32", shape=[m, n, k], acc="f32", baseline="cublas")
    s.close()
    return path


async def test_the_list_view_names_a_models_shapes_by_their_role(tmp_path):
    src = _session_of_a_models_shapes(tmp_path / "model")
    app = replay_app(src, start=10**6)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        scr = app.screen
        for _ in range(3):
            if scr.view == "list":
                break
            await pilot.press("v")
            await settle(pilot, 2)
        assert scr.view == "list"
        tl = scr.query_one(TrackList)
        role = {str(tl.get_cell(row, "shape")): str(tl.get_cell(row, "role")) for row in tl.rows}
        assert role == {"16x6144x4096": "llama-3-8b qkv t16", "16x4096x4096": "llama-3-8b o t16",
                        "16x28672x4096": "llama-3-8b gate_up t16", "16x4096x14336": ""}
