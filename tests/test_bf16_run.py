"""bf16 runs on the l2tui side (issue 55): every evaluator is made in the run's element type, the
search draws from that type's catalog, the llm prompt names the type's entry point, a recording
of the other type is refused in one line, reward rows carry the type, and the app's telemetry
bar names a bf16 session. No GPU: the harness evaluator is made but never started."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.families import Config, catalog, render
from harness.shapes import Shape
from l2tui import compose
from l2tui.agent import context
from l2tui.agent.policies.base import Proposal, TrackContext
from l2tui.agent.policies.search import SearchPolicy
from l2tui.agent.recorded import RecordedEvaluator, RecordingEvaluator
from l2tui.agent.step import StepInfo, reward_row
from l2tui.config import Config as L2Config
from l2tui.errors import UserError

from tui_support import GRID, SIZE, live_app, plain

RECORDING = Path(__file__).parent / "fixtures" / "recorded" / "evaluations.json"
SHAPE = Shape(256, 256, 256)


def _cfg(dtype: str) -> L2Config:
    return L2Config().with_overrides({"loop.dtype": dtype})


def test_the_config_gpu_evaluator_evaluates_in_the_runs_dtype():
    for dtype in ("fp16", "bf16"):
        ev = compose.config_gpu_evaluator(_cfg(dtype))
        try:
            assert ev.dtype == dtype
        finally:
            ev.close()
    ev = compose.gpu_evaluator(arch="sm_90a", baselines=("cublas",), dtype="bf16")
    try:
        assert ev.dtype == "bf16"
    finally:
        ev.close()


def test_a_bf16_run_refuses_the_fp16_recording_in_one_line():
    """tests/fixtures/recorded/ is fp16 (its meta has no dtype): a bf16 replay of it could only time
    fp16 kernels against fp16 libraries, so it is refused before anything runs."""
    with pytest.raises(UserError) as e:
        compose.loop_evaluator(_cfg("bf16"), RECORDING)
    line = str(e.value)
    assert "\n" not in line and "holds fp16 evaluations but this run is bf16" in line and "--dtype fp16" in line
    ev = compose.loop_evaluator(_cfg("fp16"), RECORDING)
    assert isinstance(ev, RecordedEvaluator) and ev.dtype == "fp16"


def test_the_cli_refuses_a_bf16_replay_of_an_fp16_recording(tmp_path, capsys):
    from l2tui.cli import main

    rc = main(["run", "--headless", "--recorded", str(RECORDING), "--dtype", "bf16", "--policy", "search",
               "--shapes", "128x128x128", "--session", str(tmp_path / "s"), "--max-steps", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc != 0 and len(err) == 1 and "holds fp16 evaluations but this run is bf16" in err[0]
    assert not (tmp_path / "s" / "events.jsonl").exists()


def test_a_recording_carries_its_dtype_and_a_replay_of_it_keeps_it(tmp_path):
    inner = compose.recorded_evaluator(RECORDING, build=False)
    inner.dtype = "bf16"   # stands for a bf16 evaluator: the recorder takes the wrapped one's type
    rec = RecordingEvaluator(inner)
    out = rec.save(tmp_path / "rec.json")
    assert json.loads(out.read_text())["meta"]["dtype"] == "bf16"
    assert compose.recorded_evaluator(out, build=False, dtype="bf16").dtype == "bf16"
    with pytest.raises(UserError, match="holds bf16 evaluations but this run is fp16"):
        compose.recorded_evaluator(out, build=False, dtype="fp16")
    doc = json.loads(out.read_text())
    doc["meta"]["dtype"] = "int8"
    out.write_text(json.dumps(doc))
    with pytest.raises(UserError, match="cannot read recorded evaluations"):
        compose.recorded_evaluator(out, build=False)


def test_a_recorder_does_not_merge_a_recording_of_the_other_dtype(tmp_path):
    fp16 = tmp_path / "fp16.json"
    shutil.copy(RECORDING, fp16)
    inner = compose.recorded_evaluator(RECORDING, build=False)
    assert RecordingEvaluator(inner, existing=fp16).records        # the same type: kept
    inner.dtype = "bf16"
    assert not RecordingEvaluator(inner, existing=fp16).records    # fp16 results are no bf16 results


def _ctx(dtype: str, source: str | None = None) -> TrackContext:
    return TrackContext(track="t", shape=SHAPE, acc="f32", baseline="cublas", step=1, arch="sm_90a",
                        dtype=dtype, source=source)


def test_the_search_draws_from_the_bf16_catalog_in_a_bf16_run():
    pol = SearchPolicy()
    bf16 = pol.candidates(SHAPE, "f32", "sm_90a", "bf16")
    assert bf16 and all(c.dtype == "bf16" for c in bf16)
    assert {c for c in bf16} <= set(catalog("f32", "sm_90a", dtype="bf16"))
    assert all(c.dtype == "fp16" for c in pol.candidates(SHAPE, "f32", "sm_90a"))
    seed = pol.seed(_ctx("bf16"))
    assert seed.source is not None and "l2_hgemm_bf16" in seed.source
    cfg = Config.from_source(seed.source)
    assert cfg is not None and cfg.dtype == "bf16"
    assert "bf16" in seed.messages[1]["content"].splitlines()[0]


def test_the_search_refines_a_bf16_kernel_in_bf16_only():
    """Knob edits keep the element type, and family switches and jumps come from the bf16 catalog."""
    from harness.build import source_dtype
    from l2tui.agent.patches import apply_patch

    pol = SearchPolicy(width=8, explore=False)
    start = render("tiny_mma", {"DTYPE": "DTYPE_BF16"})
    props = pol.propose(_ctx("bf16", start))
    assert props
    for p in props:
        src = p.source if p.source is not None else apply_patch(start, p.patch, allow_rewrite=False).source
        assert source_dtype(src) == "bf16", p.plan
    cfg = Config.from_source(start)
    assert cfg is not None
    assert all(m.config.dtype == "bf16" for m in pol.neighbours(cfg, SHAPE, "f32", "sm_90a"))


def test_the_llm_prompt_names_the_bf16_entry_point_and_types():
    from l2tui.agent.context import planner_messages, seed_messages

    bf16 = seed_messages(_ctx("bf16"))
    text = "\n".join(m["content"] for m in bf16)
    assert 'extern "C" int l2_hgemm_bf16(' in text and "__nv_bfloat16" in text
    assert "bf16 (bfloat16) inputs and output" in text and "fp16 inputs" not in text
    assert "defining extern \"C\" int l2_hgemm_bf16(...)" in text
    fp16 = "\n".join(m["content"] for m in planner_messages(_ctx("fp16", "// k"), context_tokens=100_000))
    assert 'extern "C" int l2_hgemm(' in fp16 and "l2_hgemm_bf16" not in fp16 and "fp16 inputs" in fp16
    assert context.abi_text("fp16") == context.ABI_TEXT


def test_a_kernel_of_the_other_dtype_is_refused_in_one_line():
    """What the loop's compile stage calls (harness.build with the run's dtype) refuses a human's or
    a model's fp16 kernel in a bf16 run before nvcc runs, in one line naming the fix."""
    from harness.build import build
    from harness.errors import KernelSourceError

    with pytest.raises(KernelSourceError) as e:
        build(render("tiny_mma"), arch="sm_90a", dtype="bf16")
    assert "\n" not in str(e.value) and "takes fp16" in str(e.value) and "l2_hgemm_bf16" in str(e.value)


def test_reward_rows_carry_the_sessions_dtype():
    info = StepInfo(track="t", shape=(1, 2, 3), acc="f32", baseline="cublas", policy="search", dtype="bf16")
    row = reward_row(info, 1, Proposal(source="x", origin="seed", role="seed"), parent=None, child="c",
                     kind="ok", reward=1.0, parts={}, speedup=1.0, seed_lines=1)
    assert row["dtype"] == "bf16"
    plain_info = StepInfo(track="t", shape=(1, 2, 3), acc="f32", baseline="cublas", policy="search")
    assert reward_row(plain_info, 1, Proposal(), parent=None, child=None, kind="ok", reward=0.0, parts={},
                      speedup=None, seed_lines=0)["dtype"] == "fp16"


def test_a_bf16_sweep_builds_and_picks_from_the_bf16_catalog():
    from l2tui.commands.sweep import resolve_also

    bf16 = catalog("f32", "sm_90a", dtype="bf16")
    got = resolve_also([bf16[0].name], ("f32",), "sm_90a", "bf16")
    assert got["f32"] == (bf16[0],)
    with pytest.raises(UserError, match="no such bf16 catalog configuration"):
        resolve_also([catalog("f32", "sm_90a")[0].name], ("f32",), "sm_90a", "bf16")


def _bf16_copy(tmp_path: Path) -> Path:
    """The grid fixture session, recorded as a bf16 run."""
    dst = tmp_path / "bf16"
    shutil.copytree(GRID, dst)
    lines = (dst / "events.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    first["config"]["loop"] = {"dtype": "bf16", "acc": "f32"}
    (dst / "events.jsonl").write_text("\n".join([json.dumps(first)] + lines[1:]) + "\n")
    return dst


async def test_the_telemetry_bar_names_a_bf16_session(tmp_path):
    from l2tui.tui.widgets.bars import TelemetryBar

    app, _ = live_app(tmp_path / "a", src=_bf16_copy(tmp_path))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        scr = app.screen
        assert scr.model.dtype == "bf16"
        assert " · bf16 · offline" in plain(scr.query_one(TelemetryBar))
    app, _ = live_app(tmp_path / "b")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert app.screen.model.dtype == "fp16" and "bf16" not in plain(app.screen.query_one(TelemetryBar))
