"""Bare ``l2tui`` honours its arguments: without a GPU only a plain ``l2tui`` opens the demo.

Every other command line gets the one-line error (exit 2) that ``l2tui run`` gives, before
anything is created.  Run as real processes of the console script (``python -m l2tui.cli``)
with ``L2TUI_FAKE_NO_GPU=1``, so they mean the same on a GPU machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

RECORDING = Path(__file__).parent / "fixtures" / "recorded" / "evaluations.json"


def l2tui(args: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "L2TUI_FAKE_NO_GPU": "1", "L2TUI_SESSIONS_DIR": str(cwd / "sessions")}
    env.pop("L2TUI_CONFIG_DIR", None)
    env["L2TUI_CONFIG_DIR"] = str(cwd / "no-user-config")
    return subprocess.run([sys.executable, "-m", "l2tui.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def one_line(r: subprocess.CompletedProcess) -> str:
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, (r.returncode, r.stderr[-800:])
    assert len(lines) == 1, r.stderr[-800:]
    assert lines[0].startswith("l2tui: error: ")
    assert "Traceback" not in r.stderr
    return lines[0]


@pytest.mark.parametrize("sub", [[], ["run"], ["run", "--headless"]], ids=["bare", "run", "run-headless"])
def test_bad_shapes_is_the_same_line_everywhere(tmp_path, sub):
    line = one_line(l2tui([*sub, "--shapes", "12x", "--session", str(tmp_path / "nonexistent")], tmp_path))
    assert line == ("l2tui: error: unknown shapes '12x': use grid, small, sample100, MxNxK, a shapes file or a model "
                    "(a preset such as llama-3-8b, or a config.json path)")
    assert not (tmp_path / "nonexistent").exists() and not (tmp_path / "sessions").exists()


@pytest.mark.parametrize("sub", [[], ["run"], ["run", "--headless"]], ids=["bare", "run", "run-headless"])
def test_a_run_option_without_a_gpu_says_how_to_go_on(tmp_path, sub):
    """``--session`` (a folder that does not exist yet) asks for a live run: no demo, the no-GPU line."""
    line = one_line(l2tui([*sub, "--session", str(tmp_path / "new"), "--shapes", "64x64x64"], tmp_path))
    assert line.startswith("l2tui: error: no NVIDIA GPU found")
    assert "--recorded FILE" in line and "plain `l2tui` replays the bundled demo" in line
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("args", [["--policy", "search"], ["--shapes", "small"]], ids=["policy", "shapes"])
def test_any_run_option_is_not_the_demo(tmp_path, args):
    line = one_line(l2tui(args, tmp_path))
    assert line.startswith("l2tui: error: no NVIDIA GPU found")


def test_no_sandbox_asks_for_a_run_too(tmp_path):
    r = l2tui(["--no-sandbox"], tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("l2tui: error: no NVIDIA GPU found")


def test_resume_of_a_missing_session(tmp_path):
    line = one_line(l2tui(["--session", str(tmp_path / "gone"), "--resume"], tmp_path))
    assert f"{tmp_path / 'gone'} is not a session to resume" in line
    assert one_line(l2tui(["--resume"], tmp_path)) == \
        "l2tui: error: --resume needs --session DIR (the session to continue)"


def test_bad_policy(tmp_path):
    for sub in ([], ["run"]):
        r = l2tui([*sub, "--policy", "bogus"], tmp_path)
        assert r.returncode == 2 and "Traceback" not in r.stderr
        assert "invalid choice: 'bogus'" in r.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("sub", [[], ["run"]], ids=["bare", "run"])
def test_unreadable_recording_is_one_line(tmp_path, sub):
    line = one_line(l2tui([*sub, "--recorded", str(tmp_path / "none.json"), "--shapes", "64x64x64"], tmp_path))
    assert "cannot read recorded evaluations" in line
    assert not (tmp_path / "sessions").exists()


def test_plain_l2tui_opens_the_demo_and_says_so(tmp_path, monkeypatch):
    """The launch path a plain ``l2tui`` takes, in-process: the demo replay with a notice, from its
    first event, playing.  Where the head starts is read at the clock's first tick (how far it has
    got by some wall-clock moment depends on the machine's load, not on the app)."""
    import argparse
    import asyncio

    from l2tui import paths
    from l2tui.tui.launch import DEMO_SPEED, make_demo_app, wants_live
    from l2tui.tui.replay import ReplayClock
    from l2tui.tui.widgets.feeds import ReplayFeed

    heads: list[int] = []
    tick = ReplayClock.tick

    def recording_tick(clock: ReplayClock, wall_dt: float) -> list[dict]:
        heads.append(clock.pos)
        return tick(clock, wall_dt)

    monkeypatch.setattr(ReplayClock, "tick", recording_tick)

    assert not wants_live(argparse.Namespace(session=None, resume=False, shapes=None, policy=None, app_recorded=None,
                                             config=str(tmp_path / "l2tui.toml")))
    demo = paths.demo_session()
    assert demo is not None
    app = make_demo_app(None)
    assert app.ctx.replay and app.ctx.start is None and app.ctx.autoplay and app.ctx.speed == DEMO_SPEED
    assert app.ctx.notice.startswith("no NVIDIA GPU found")
    if not paths.demo_is_real(demo):
        assert "scripted test session" in app.ctx.notice and "not the product's results" in app.ctx.notice

    async def run() -> None:
        async with app.run_test(size=(160, 48)) as pilot:
            clock = app.screen.query_one(ReplayFeed).clock
            for _ in range(600):                     # until it has delivered events (a bound, not a pace)
                await pilot.pause(0.1)
                if clock.pos > 0:
                    break
            assert heads and heads[0] == 0           # from the beginning, not the end
            assert clock.pos > 0                     # and it plays
            shown = [n.message for n in app._notifications]
            assert app.ctx.notice in shown

    asyncio.run(run())


def test_the_demo_path_is_one_constant():
    from l2tui import paths

    assert paths.DEMO_SESSION == paths.REPO_ROOT / "sessions" / "demo-h200"
    assert paths.FALLBACK_DEMO_SESSION.is_dir()           # the scripted toy session lives with the tests
    assert not (paths.REPO_ROOT / "sessions" / "demo-h200-scripted").exists()
    assert paths.demo_session() == (paths.DEMO_SESSION if (paths.DEMO_SESSION / "events.jsonl").is_file()
                                    else paths.FALLBACK_DEMO_SESSION)


def test_the_no_gpu_line_names_the_bundled_recording_when_there_is_one(tmp_path, monkeypatch):
    from l2tui import demo, paths

    assert "tools/record_demo.py" in demo.no_gpu_message() or demo.recorded_demo_command() is not None
    for name, attr in (("evaluations.json", "DEMO_RECORDING"), ("shapes.txt", "DEMO_SHAPES"),
                       ("l2tui.toml", "DEMO_SETTINGS")):
        (tmp_path / name).write_text("{}" if name.endswith(".json") else "")
        monkeypatch.setattr(paths, attr, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    assert demo.recorded_demo_command() == ("l2tui run --headless --recorded evaluations.json --config l2tui.toml "
                                            "--policy search --shapes shapes.txt")
    assert f"e.g. `{demo.recorded_demo_command()}`" in demo.no_gpu_message()


@pytest.mark.slow
def test_the_bundled_demo_recording_covers_its_run(tmp_path, monkeypatch):
    """Replaying the bundled demo from its recording asks for no kernel the recording lacks."""
    from l2tui import demo, paths

    monkeypatch.chdir(paths.REPO_ROOT)     # the command's paths are relative to the checkout
    cmd = demo.recorded_demo_command()
    if cmd is None:
        pytest.skip(f"no real demo recording bundled ({paths.DEMO_RECORDING}); tools/record_demo.py writes it")
    args = cmd.split()[1:] + ["--quiet", "--session", str(tmp_path / "again")]
    r = l2tui(args, paths.REPO_ROOT, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    import json

    rewards = [json.loads(x) for x in (tmp_path / "again" / "rewards.jsonl").read_text().splitlines()]
    assert rewards and not [x for x in rewards if x.get("kind") == "not_recorded"]
