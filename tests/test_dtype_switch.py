"""Switching a session's element type (the ``dtype`` steering command, the app's ``D`` key):
made before the session's first kernel, refused in one line after it or in a replay.

The loop is the real AgentLoop over a real session folder; its evaluator is the GPU evaluator of
``harness.evaluate`` (whose worker starts only at the first evaluation, so these tests, which
evaluate nothing, need no GPU) or the replay of the recorded fixture evaluations.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from harness.evaluate import Evaluator
from harness.shapes import parse_shape
from l2tui import events as ev_schema
from l2tui.agent.loop import AgentLoop, make_loop
from l2tui.agent.policies import make_policy
from l2tui.agent.recorded import RecordedEvaluator
from l2tui.config import parse_config, session_dtype
from l2tui.errors import SessionError
from l2tui.session import Session
from l2tui.tui.app import L2App, UIContext
from l2tui.tui.loophandle import LoopHandle
from l2tui.tui.screens.main import MainScreen
from l2tui.tui.screens.modals import ChoiceScreen
from l2tui.tui.widgets.bars import TelemetryBar

from tui_support import GRID, SIZE, plain

RECORDING = Path(__file__).parent / "fixtures" / "recorded" / "evaluations.json"
SHAPE = "256x256x256"


def _toml_dtype(folder: Path) -> str:
    return session_dtype(Session.open(folder).config)


def _new_session(tmp_path: Path) -> Session:
    cfg = parse_config({})
    return Session.create(tmp_path / "s", config=cfg.snapshot(), gpu={}, versions={"test": "dtype"})


def _loop(session: Session, evaluator: object | None = None, acc: str = "f32") -> AgentLoop:
    cfg = parse_config({})
    loop = make_loop(session, cfg, policy=make_policy("search", cfg),
                     evaluator=evaluator if evaluator is not None else Evaluator(dtype="fp16"))  # type: ignore[arg-type]
    loop.add_track(parse_shape(SHAPE), acc)
    return loop


def _switch(loop: AgentLoop, value: str) -> dict:
    """Run the loop over: pause every track (nothing is evaluated), the switch, stop; the
    ``dtype_switch`` event that answered."""
    for cmd in ({"name": "pause"}, {"name": "dtype", "value": value}, {"name": "stop"}):
        loop.send(cmd)
    loop.run()
    answers = [e for e in loop.session.events if e["type"] == ev_schema.DTYPE_SWITCH]
    assert len(answers) == 1
    return answers[0]


def _add_candidate(session: Session, track: str) -> None:
    """A kernel the session made (as the loop records one before evaluating it)."""
    sha = session.put_kernel("// a kernel\n")
    session.record(ev_schema.Candidate(track=track, step=0, sha=sha, origin="seed", policy="search"))


# ------------------------------------------------------------------ the steering command
def test_a_switch_before_the_first_kernel_retypes_the_loop_the_evaluator_and_session_toml(tmp_path):
    session = _new_session(tmp_path)
    loop = _loop(session)
    answer = _switch(loop, "bf16")
    assert answer["dtype"] == "bf16" and answer["requested"] == "bf16" and "refused" not in answer
    assert loop.config.dtype == "bf16"
    assert loop.evaluator.dtype == "bf16"                       # type: ignore[attr-defined]
    t = next(iter(loop.tracks.values()))
    assert loop._ctx(t, 0).dtype == "bf16"                       # what the policy sees next step
    assert _toml_dtype(session.path) == "bf16"
    # a resume runs in the switched type
    resumed = parse_config({}).with_session_budgets(Session.open(session.path).config)
    assert resumed.loop["dtype"] == "bf16"


def test_a_switch_after_a_kernel_is_refused_in_one_line_and_changes_nothing(tmp_path):
    session = _new_session(tmp_path)
    loop = _loop(session)
    _add_candidate(session, next(iter(loop.tracks)))
    before = (session.path / "session.toml").read_bytes()
    answer = _switch(loop, "bf16")
    assert answer["dtype"] == "fp16"
    assert answer["refused"].startswith("this session already holds 1 fp16 kernel(s)")
    assert "\n" not in answer["refused"] and "--dtype bf16" in answer["refused"]
    assert loop.config.dtype == "fp16" and loop.evaluator.dtype == "fp16"   # type: ignore[attr-defined]
    assert (session.path / "session.toml").read_bytes() == before


def test_a_replay_of_recorded_evaluations_refuses_the_switch(tmp_path):
    session = _new_session(tmp_path)
    loop = _loop(session, RecordedEvaluator(RECORDING, build=False))
    answer = _switch(loop, "bf16")
    assert answer["dtype"] == "fp16"
    assert answer["refused"].startswith("a replay of recorded evaluations stays in the recording's type (fp16)")
    assert loop.config.dtype == "fp16" and _toml_dtype(session.path) == "fp16"


@pytest.mark.parametrize("value,acc,refusal", [
    ("int8", "f32", "'int8' is not an element type: use one of fp16, bf16"),
    ("bf16", "f16", "bf16 accumulates in f32 only and 256x256x256-f16 accumulates in f16"),
])
def test_a_switch_the_session_cannot_take_is_refused(tmp_path, value, acc, refusal):
    session = _new_session(tmp_path)
    loop = _loop(session, acc=acc)
    answer = _switch(loop, value)
    assert answer["refused"].startswith(refusal) and answer["dtype"] == "fp16"
    assert loop.config.dtype == "fp16" and _toml_dtype(session.path) == "fp16"


def test_a_symlinked_session_toml_refuses_the_switch_and_its_target_is_untouched(tmp_path):
    session = _new_session(tmp_path)
    loop = _loop(session)
    target = tmp_path / "elsewhere.toml"
    shutil.move(session.path / "session.toml", target)
    before = target.read_bytes()
    os.symlink(target, session.path / "session.toml")
    answer = _switch(loop, "bf16")
    assert "is a symbolic link" in answer["refused"] and answer["refused"].endswith("the session stays fp16")
    assert loop.config.dtype == "fp16" and loop.evaluator.dtype == "fp16"   # type: ignore[attr-defined]
    assert target.read_bytes() == before


# ------------------------------------------------------------------ Session.set_loop_dtype
def test_set_loop_dtype_rewrites_only_the_dtype(tmp_path):
    session = _new_session(tmp_path)
    old = Session.open(session.path).config
    session.set_loop_dtype("bf16")
    new = Session.open(session.path).config
    assert new["loop"]["dtype"] == "bf16" and session.config["loop"]["dtype"] == "bf16"
    new["loop"]["dtype"] = old["loop"]["dtype"]
    assert new == old
    assert not (session.path / "session.toml.tmp").exists()


def test_set_loop_dtype_refuses_a_symlinked_session_toml(tmp_path):
    session = _new_session(tmp_path)
    target = tmp_path / "bashrc"
    target.write_text("# not a session file\n")
    (session.path / "session.toml").unlink()
    os.symlink(target, session.path / "session.toml")
    with pytest.raises(SessionError, match=r"session\.toml is a symbolic link; l2tui never follows links"):
        session.set_loop_dtype("bf16")
    assert target.read_text() == "# not a session file\n"
    assert session.config["loop"]["dtype"] == "fp16"


def test_set_loop_dtype_refuses_a_symlinked_temporary_file(tmp_path):
    session = _new_session(tmp_path)
    target = tmp_path / "victim"
    target.write_text("keep\n")
    os.symlink(target, session.path / "session.toml.tmp")
    with pytest.raises(SessionError, match="is a symbolic link"):
        session.set_loop_dtype("bf16")
    assert target.read_text() == "keep\n" and _toml_dtype(session.path) == "fp16"


def test_set_loop_dtype_refuses_a_damaged_session_toml_in_one_line(tmp_path):
    session = _new_session(tmp_path)
    (session.path / "session.toml").write_bytes(b"[config\n\xff")
    with pytest.raises(SessionError, match=r"session\.toml is not valid TOML; the session file is damaged"):
        session.set_loop_dtype("bf16")


# ------------------------------------------------------------------ the app's key
async def _wait(pilot, cond, what: str) -> None:  # noqa: ANN001
    for _ in range(300):
        if cond():
            return
        await pilot.pause(0.05)
    raise AssertionError(f"the app never showed {what}")


def _live_app(session: Session, evaluator: object | None = None) -> L2App:
    """The live app steering a real AgentLoop whose tracks are paused before anything runs."""
    def factory() -> AgentLoop:
        cfg = parse_config({})
        loop = make_loop(session, cfg, policy=make_policy("search", cfg),
                         evaluator=evaluator if evaluator is not None else Evaluator(dtype="fp16"))  # type: ignore[arg-type]
        if not loop.tracks:
            loop.add_track(parse_shape(SHAPE), "f32")
        loop.send({"name": "pause"})
        return loop

    ctx = UIContext(session=session, events=list(session.events), replay=False, handle=LoopHandle(),
                    loop_factory=factory, title="l2tui dtype test")
    return L2App(ctx)


async def _press_dtype(pilot, app, value: str) -> None:  # noqa: ANN001
    await pilot.press("D")
    await _wait(pilot, lambda: isinstance(app.screen, ChoiceScreen), "the element type dialog")
    app.screen.query_one("#choice-list").highlighted = app.screen.options.index(value)
    await pilot.press("enter")


def _toasts(app) -> list[str]:  # noqa: ANN001
    return [str(n.message) for n in app._notifications]


async def test_the_d_key_switches_a_session_without_kernels_to_bf16(tmp_path):
    session = _new_session(tmp_path)
    app = _live_app(session)
    async with app.run_test(size=SIZE) as pilot:
        scr = app.screen
        assert isinstance(scr, MainScreen)
        await _wait(pilot, lambda: scr.model.tracks and all(t.state == "paused" for t in scr.model.tracks.values()),
                    "the paused track")
        assert "bf16" not in plain(scr.query_one(TelemetryBar))
        await _press_dtype(pilot, app, "bf16")
        await _wait(pilot, lambda: scr.model.dtype == "bf16", "the switch")
        assert " · bf16 · offline" in plain(scr.query_one(TelemetryBar))
        assert "element type now bf16: new kernels are built, checked and timed in bf16" in _toasts(app)
        assert _toml_dtype(session.path) == "bf16"
        await _press_dtype(pilot, app, "fp16")                     # and back, named once switched
        await _wait(pilot, lambda: scr.model.dtype == "fp16", "the switch back")
        assert " · fp16 · offline" in plain(scr.query_one(TelemetryBar))
        assert _toml_dtype(session.path) == "fp16"


async def test_the_d_key_after_an_evaluation_says_why_not_in_one_line(tmp_path):
    path = shutil.copytree(GRID, tmp_path / "grid")                 # recorded evaluations of 30 tracks
    session = Session.open(path, writer="test")
    app = _live_app(session)
    async with app.run_test(size=SIZE) as pilot:
        scr = app.screen
        assert isinstance(scr, MainScreen)
        await _wait(pilot, lambda: all(t.state != "running" for t in scr.model.tracks.values()), "the paused tracks")
        await _press_dtype(pilot, app, "bf16")
        refusals = lambda: [m for m in _toasts(app) if m.startswith("dtype switch refused: ")]  # noqa: E731
        await _wait(pilot, refusals, "the refusal")
        (line,) = refusals()
        assert "this session already holds" in line and "fp16 kernel(s)" in line and "\n" not in line
        assert scr.model.dtype == "fp16" and "bf16" not in plain(scr.query_one(TelemetryBar))
        assert _toml_dtype(path) == "fp16"
        log = [e.text for e in scr.model.log]
        assert line in log
    session.close()

