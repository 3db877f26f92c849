"""The main screen steering the real AgentLoop (LLM policy on the scripted local OpenAI server,
real nvcc builds, GPU results replayed by the RecordedEvaluator)."""

from __future__ import annotations

import stat
import sys

import pytest

from harness.shapes import parse_shape
from l2tui.agent.loop import make_loop
from l2tui.agent.policies import make_policy
from l2tui.agent.recorded import RecordedEvaluator
from l2tui.config import parse_config
from l2tui.session import Session
from l2tui.tui.app import L2App, UIContext
from l2tui.tui.screens.main import MainScreen
from l2tui.tui.loophandle import LoopHandle
from tests.openai_server import Reply

from tui_support import SIZE

pytestmark = pytest.mark.compile   # runs nvcc (tools/test.sh --fast leaves it out)

ENV = "L2TUI_TUI_TEST_KEY"


async def wait_until(pilot, cond, what: str, timeout_s: float = 240.0) -> None:
    """Poll the app until ``cond()`` holds (the loop compiles with nvcc meanwhile)."""
    for _ in range(int(timeout_s / 0.1)):
        if cond():
            return
        await pilot.pause(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def names(session: Session) -> list[str]:
    return [e["name"] for e in Session.open(session.path).events if e["type"] == "command"]


async def test_steering_the_real_loop(tmp_path, scripted_server, scenarios, agent_cache, monkeypatch):
    monkeypatch.setenv(ENV, "sk-tui-test")
    script = tmp_path / "editor.py"
    script.write_text("import sys, pathlib\np = pathlib.Path(sys.argv[1])\np.write_text(p.read_text() + '// by hand\\n')\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("EDITOR", f"{sys.executable} {script}")
    monkeypatch.delenv("VISUAL", raising=False)

    cfg = parse_config(scenarios.scenario_config(scripted_server.base_url, api_key_env=ENV, max_steps=4), "test")
    # a slow planner leaves time to steer between stages, whatever the machine's speed
    scripted_server.defaults["planner"] = Reply(content=scenarios.PLAN, delay_s=1.0)
    scripted_server.defaults["coder"] = scenarios.GOOD_BK
    session = Session.create(tmp_path / "s", config=cfg.snapshot(), gpu={}, versions={"test": "tui"})
    shape = parse_shape(scenarios.SHAPE_A)

    def factory():
        loop = make_loop(session, cfg, policy=make_policy("llm", cfg), evaluator=RecordedEvaluator(scenarios.RECORDINGS),
                         policy_factory=lambda name: make_policy(name, cfg))
        loop.add_track(shape, "f32")
        return loop

    tid = f"{scenarios.SHAPE_A}-f32"
    ctx = UIContext(session=session, events=list(session.events), handle=LoopHandle(), loop_factory=factory)
    app = L2App(ctx)
    async with app.run_test(size=SIZE) as pilot:
        scr = app.screen
        assert isinstance(scr, MainScreen)
        await wait_until(pilot, lambda: tid in scr.model.tracks and scr.track_id == tid, "the track to appear")
        await wait_until(pilot, lambda: scr.shown_candidate() is not None
                         and scr._source(scr.shown_candidate().sha) is not None, "the seed candidate")
        await pilot.press("p")                                        # pause
        await wait_until(pilot, lambda: scr.model.tracks[tid].state == "paused", "the loop to pause the track")
        await pilot.press("h", *"try BK 32", "enter")                  # hint
        await wait_until(pilot, lambda: scr.model.tracks[tid].hint == "try BK 32", "the hint event")
        await pilot.press("e")                                        # edit in $EDITOR -> human step
        await wait_until(pilot, lambda: any(c.origin == "human" for c in scr.model.tracks[tid].candidates.values()),
                         "the human candidate")
        human = next(c for c in scr.model.tracks[tid].candidates.values() if c.origin == "human")
        assert session.get_kernel(human.sha).endswith("// by hand\n")
        await pilot.press("x")                                        # stop the track
        await wait_until(pilot, lambda: scr.model.tracks[tid].state == "stopped", "the stop")
        await wait_until(pilot, lambda: scr.model.ended is not None, "the loop to end")
    got = names(session)
    assert got[:2] == ["pause", "hint"] and "edit" in got and got[-1] == "stop"
    assert [c.name for c in scr.sent] == ["pause", "hint", "edit", "stop"]
