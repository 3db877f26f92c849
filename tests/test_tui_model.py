"""The UI's event fold, replay clock, keymap validation and policy choice (no terminal)."""

from __future__ import annotations

import pytest

from l2tui.errors import ConfigError
from l2tui.tui.keymap import validate_keymap
from l2tui.tui.launch import default_policy, endpoint_configured
from l2tui.tui.replay import ReplayClock
from l2tui.tui.sessionio import EventLogReader, open_session
from l2tui.tui.state import SessionModel

from tui_support import GRID, LIST


def test_fold_fixture_session():
    s = open_session(GRID)
    m = SessionModel()
    ch = m.apply_many(s.events)
    assert ch.events == len(s.events) and ch.added_tracks
    assert len(m.tracks) == 30
    states = {}
    for t in m.tracks.values():
        states[t.state] = states.get(t.state, 0) + 1
    assert states == {"done": 26, "running": 1, "failed": 1, "queued": 2}
    t = m.tracks["1024x1024x1024-f32"]
    failed = [c for c in t.candidates.values() if c.status == "compile_error"]
    assert len(failed) == 1
    best = t.candidates[t.best_sha]
    assert best.timed and t.best_speedup == pytest.approx(best.timed["speedup"], rel=1e-3)
    assert t.profiling_step == 3
    assert m.tracks["1024x4096x4096-f32"].accepted
    assert m.telemetry["power_limit_w"] == 700.0
    assert m.gpu["name"] == "NVIDIA H200"
    assert any(e.kind == "llm" for e in m.log)      # streamed text became log lines
    assert m.baselines()[0] == "cublaslt_autotune"


def test_speedup_against_another_baseline():
    m = SessionModel()
    m.apply_many(open_session(GRID).events)
    t = m.tracks["256x1024x1024-f32"]
    tm = t.best_times_ms
    assert t.speedup_vs("torch") == pytest.approx(tm["torch"] / tm["candidate"])
    assert t.speedup_vs(None) == t.best_speedup
    assert t.speedup_vs("unknown") is None


def test_unknown_events_and_keys_are_ignored():
    m = SessionModel()
    m.apply_many([{"seq": 0, "time": 1.0, "type": "from_the_future", "x": 1},
                  {"seq": 1, "time": 2.0, "type": "track_added", "track": "64x64x64-f16", "shape": [64, 64, 64],
                   "acc": "f16", "baseline": "cublas", "new_key": [1]},
                  {"seq": 2, "time": 3.0, "type": "stage", "track": "128x64x64-f32", "step": 0, "stage": "seed",
                   "status": "start"}])
    assert set(m.tracks) == {"64x64x64-f16", "128x64x64-f32"}
    assert m.tracks["128x64x64-f32"].shape == (128, 64, 64)


def test_fallback_reader_matches_session(tmp_path):
    import shutil

    shutil.copytree(LIST, tmp_path / "s")
    with open(tmp_path / "s" / "events.jsonl", "a") as f:
        f.write('{"seq": 9999, "type": "te')          # a torn last line
    r = EventLogReader(tmp_path / "s")
    assert len(r.events) == len(open_session(LIST).events)
    assert r.problems == ["torn last line ignored"]
    sha = next(e["sha"] for e in r.events if e["type"] == "candidate")
    assert "l2_hgemm" in r.get_kernel(sha)


def test_replay_clock_ticks_by_speed_and_squeezes_gaps():
    events = [{"seq": i, "time": t, "type": "x"} for i, t in enumerate([0.0, 1.0, 2.0, 100.0, 101.0])]
    c = ReplayClock(events, speed=1, max_gap_s=5)
    assert c.tick(10) == []                 # not playing
    c.toggle()
    assert [e["seq"] for e in c.tick(0.5)] == [0]
    assert [e["seq"] for e in c.tick(1.0)] == [1]
    assert [e["seq"] for e in c.tick(6.0)] == [2, 3]   # a 98 s gap plays as 5 s
    c.faster()
    assert c.speed == 2
    assert [e["seq"] for e in c.tick(1.0)] == [4]
    assert c.at_end and not c.playing
    seek = c.seek_index(2)
    assert seek.reset and [e["seq"] for e in seek.events] == [0, 1]
    seek = c.step(1)
    assert not seek.reset and [e["seq"] for e in seek.events] == [2]


def test_replay_clock_targets():
    c = ReplayClock([{"seq": i, "time": float(i * 10), "type": "stage", "step": i // 2, "track": "t"} for i in range(10)])
    assert c.parse_target("#3") == 4
    assert c.parse_target("35s") == 4 and c.parse_target("0:35") == 4 and c.parse_target("t 35") == 4
    assert c.parse_target("step 2") == 5 and c.parse_target("2") == 5
    with pytest.raises(ValueError, match="cannot seek"):
        c.parse_target("soon")


def test_keymap_validation():
    assert validate_keymap({"accept": "ctrl+y", "hint": ["f5", "H"]}) == {"accept": "ctrl+y", "hint": "f5,H"}
    with pytest.raises(ConfigError, match="unknown binding id 'acept'"):
        validate_keymap({"acept": "a"})
    with pytest.raises(ConfigError, match="must be a key name"):
        validate_keymap({"accept": ""})


def test_policy_from_config(tmp_path, monkeypatch):
    from l2tui.config import load_config

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("L2TUI_CONFIG_DIR", str(tmp_path / "none"))
    cfg = load_config()
    assert not endpoint_configured(cfg) and default_policy(cfg) == "search"
    assert default_policy(cfg, "human") == "human"
    (tmp_path / "l2tui.toml").write_text('[llm]\nbase_url = "http://127.0.0.1:8000/v1"\n[keys]\naccept = "ctrl+y"\n')
    cfg = load_config()
    assert endpoint_configured(cfg) and default_policy(cfg) == "llm"
    (tmp_path / "l2tui.toml").write_text('[llm]\nmodel = "m"\n')
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert default_policy(load_config()) == "llm"


def test_ui_settings_validate_keys(tmp_path, monkeypatch):
    from l2tui.config import load_config
    from l2tui.tui.launch import ui_settings

    p = tmp_path / "c.toml"
    p.write_text('[keys]\naccept = "ctrl+y"\n[ui]\nrefresh_ms = 50\n')
    keys, hz, theme = ui_settings(load_config(p))
    assert keys == {"accept": "ctrl+y"} and hz == 20
    p.write_text('[keys]\nnope = "ctrl+y"\n')
    with pytest.raises(ConfigError, match="unknown binding id"):
        ui_settings(load_config(p))


async def test_keys_from_config_file_reach_the_app(tmp_path):
    from l2tui.config import load_config
    from l2tui.tui.launch import make_replay_app
    from l2tui.tui.widgets.feeds import ReplayFeed

    p = tmp_path / "l2tui.toml"
    p.write_text('[keys]\n"replay.play" = "ctrl+t"\n"replay.forward" = "n"\n')
    app = make_replay_app(GRID, cfg=load_config(p), autoplay=False, start=0)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause(0.2)
        clock = app.screen.query_one(ReplayFeed).clock
        await pilot.press("greater_than_sign")   # the old key is gone
        await pilot.press("n", "n")
        await pilot.pause(0.2)
        assert clock.pos == 2
        await pilot.press("ctrl+t")
        assert clock.playing


def test_live_app_creates_the_session_with_the_config_policy(tmp_path, monkeypatch):
    import argparse

    from l2tui.config import parse_config
    from l2tui.errors import SessionError
    from l2tui.tui.launch import make_live_app

    monkeypatch.setenv("L2TUI_SESSIONS_DIR", str(tmp_path / "sessions"))
    monkeypatch.setattr("l2tui.tui.launch.gpu_present", lambda: True)  # a live app needs a GPU (or --recorded)
    cfg = parse_config({"llm": {"base_url": "http://127.0.0.1:9/v1"}})
    cfg.source = None
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    args = argparse.Namespace(session=str(tmp_path / "s"), resume=False, policy=None, shapes=["64x64x64"], config=None)
    app = make_live_app(args, cfg)       # nothing runs until the app is on screen
    assert app.ctx.session.events[0]["type"] == "session_started"
    assert app.ctx.session.config["policy"] == "llm"
    assert "sk-x" not in (tmp_path / "s" / "session.toml").read_text()
    with pytest.raises(SessionError, match="--resume"):
        make_live_app(args, cfg)
    args.resume = True
    with pytest.raises(SessionError, match=r"being written by pid \d+ \(l2tui app\)"):
        make_live_app(args, cfg)          # one writer per session: the first app still holds it
    app.ctx.session.close()
    assert make_live_app(args, cfg).ctx.session.path == tmp_path / "s"


def test_start_up_imports_nothing_heavy():
    """The app reaches its first frame without cupy, torch, openai or the agent in the process."""
    import subprocess
    import sys

    code = (
        "import asyncio, sys\n"
        "from l2tui.tui.launch import make_replay_app\n"
        f"app = make_replay_app({str(GRID)!r}, autoplay=False, start=10**6)\n"
        "async def main():\n"
        "    async with app.run_test(size=(160, 48)) as pilot:\n"
        "        await pilot.pause(0.2)\n"
        "asyncio.run(main())\n"
        "print(' '.join(m for m in ('cupy', 'torch', 'openai', 'l2tui.agent', 'harness.evaluate', 'harness.worker')"
        " if m in sys.modules) or 'none')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == "none"
