"""The app with an LLM endpoint that never answers: one error in the log, the track paused.

The real AgentLoop and LLM policy against a port on 127.0.0.1 that nothing listens on; the
seed is the model's to write, so nothing is built before the first call fails.
"""

from __future__ import annotations

import socket

from harness.shapes import parse_shape
from l2tui.agent.loop import make_loop
from l2tui.agent.policies import make_policy
from l2tui.agent.recorded import RecordedEvaluator
from l2tui.config import parse_config
from l2tui.session import Session
from l2tui.tui.app import L2App, UIContext
from l2tui.tui.screens.main import MainScreen
from l2tui.tui.loophandle import LoopHandle

from tui_support import SIZE

ENV = "L2TUI_TUI_ENDPOINT_KEY"


def _closed_port_url() -> str:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}/v1"


async def test_an_unreachable_endpoint_pauses_the_track_with_one_error(tmp_path, scenarios, monkeypatch):
    monkeypatch.setenv(ENV, "sk-tui-endpoint")
    doc = scenarios.scenario_config(_closed_port_url(), api_key_env=ENV, seed="", max_steps=4)
    doc["llm"].update(max_retries=1, backoff_s=0.01, timeout_s=5.0)
    cfg = parse_config(doc, "test")
    session = Session.create(tmp_path / "s", config=cfg.snapshot(), gpu={}, versions={"test": "tui"})
    shape = parse_shape(scenarios.SHAPE_A)

    def factory():
        loop = make_loop(session, cfg, policy=make_policy("llm", cfg), evaluator=RecordedEvaluator(scenarios.RECORDINGS))
        loop.add_track(shape, "f32")
        return loop

    tid = f"{scenarios.SHAPE_A}-f32"
    app = L2App(UIContext(session=session, events=list(session.events), handle=LoopHandle(), loop_factory=factory))
    async with app.run_test(size=SIZE) as pilot:
        scr = app.screen
        assert isinstance(scr, MainScreen)
        for _ in range(1200):                       # a bound for a loaded machine, not a pace
            track = scr.model.tracks.get(tid)
            if track is not None and track.state == "paused" and any(e.kind == "error" for e in scr.model.log):
                break
            await pilot.pause(0.1)
        errors = [e for e in scr.model.log if e.kind == "error"]
        assert scr.model.tracks[tid].state == "paused"
        assert len(errors) == 1 and "LLM endpoint cannot be used" in errors[0].text and "paused" in errors[0].text
        assert scr.model.ended is None              # the loop waits for the user, it did not end
    events = Session.open(session.path).events
    assert len([e for e in events if e["type"] == "llm_call"]) == 1
    assert not [e for e in events if e["type"] in ("candidate", "reward")]
