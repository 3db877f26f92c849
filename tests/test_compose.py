"""The typed seams: the Evaluator protocol, loop commands and the shared composition root."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.evaluator_protocol import BatchEvaluator, Evaluator, ReplayEvaluator
from l2tui import compose
from l2tui.steering import COMMAND_NAMES, LoopCommand
from l2tui.agent.loop import AgentLoop
from l2tui.agent.recorded import RecordedEvaluator, RecordingEvaluator
from l2tui.errors import UserError

RECORDINGS = Path(__file__).parent / "fixtures" / "recorded" / "evaluations.json"


def test_the_gpu_evaluator_declares_the_protocol_without_a_gpu():
    from harness.evaluate import Evaluator as GpuEvaluator

    # instance attributes (arch, mode, timing) are set in __init__, which starts a worker: the
    # class declares the capabilities and has every method the protocols name
    assert (GpuEvaluator.can_batch, GpuEvaluator.replays_recording, GpuEvaluator.own_profiles) == (True, False, False)
    for name in ("evaluate", "close", "run_shape", "gpu_info"):
        assert callable(getattr(GpuEvaluator, name))


def test_recorded_evaluations_are_a_replay_evaluator():
    ev = compose.loop_evaluator(_Cfg(), RECORDINGS)
    assert isinstance(ev, RecordedEvaluator) and ev.do_build == "unrecorded"
    assert isinstance(ev, Evaluator) and isinstance(ev, ReplayEvaluator)
    assert not isinstance(ev, BatchEvaluator)
    assert (ev.can_batch, ev.replays_recording, ev.own_profiles, ev.mode) == (False, True, True, None)


def test_a_recorder_keeps_its_inner_evaluators_identity():
    inner = compose.recorded_evaluator(RECORDINGS, arch="sm_90a", build=False)
    rec = RecordingEvaluator(inner)
    assert isinstance(rec, Evaluator)
    assert (rec.arch, rec.replays_recording, rec.can_batch, rec.own_profiles) == ("sm_90a", True, False, True)
    assert rec.recorded_build("x", None) is None


def test_recorded_gpu_names_the_recording():
    meta = {"gpu": {"name": "NVIDIA H200", "uuid": "GPU-1"}}
    assert compose.recorded_gpu(meta, "rec.json") == {"name": "NVIDIA H200", "uuid": "GPU-1", "replayed_from": "rec.json"}
    assert compose.recorded_gpu({}, Path("r.json"), provisional=True) == {"replayed_from": "r.json", "provisional": True}
    assert "replayed_from" not in meta["gpu"]   # the recording's meta is not changed


@pytest.mark.parametrize("gpu", ["NVIDIA H200", 7, ["name", "x"]])
def test_a_recordings_gpu_that_is_not_a_table_is_left_out(gpu):
    # a recording is data from elsewhere: meta.gpu may be anything (harness.channel's Data)
    assert compose.recorded_gpu({"gpu": gpu}, "rec.json") == {"replayed_from": "rec.json"}


def test_an_unreadable_recording_is_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(UserError, match="cannot read recorded evaluations"):
        compose.recorded_evaluator(bad)


def test_loop_commands_round_trip_and_every_name_has_a_handler():
    cmd = LoopCommand("hint", None, {"text": "try BK 32"})
    assert cmd.to_dict() == {"name": "hint", "track": None, "text": "try BK 32"}
    assert LoopCommand.of(cmd.to_dict()) == cmd
    assert LoopCommand.of(cmd) is cmd
    assert sorted(AgentLoop.COMMANDS) == sorted(COMMAND_NAMES)


class _Cfg:
    harness = {"arch": "", "baselines": ["cublas"], "mode": "offline", "timeout_s": 60}
    loop = {"dtype": "fp16"}
