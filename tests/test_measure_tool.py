"""tools/measure.py: plans of resumable steps under one budget, and the commands they run.

The runner is driven with steps whose commands are small Python programs (what they write is what
the real steps' outputs look like), with a clock the test moves; the plans' real command lines are
parsed by the CLIs they call, so a renamed flag fails here rather than on a GPU box.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load():
    spec = importlib.util.spec_from_file_location("measure_tool", ROOT / "tools" / "measure.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["measure_tool"] = mod
    spec.loader.exec_module(mod)
    return mod


M = _load()


def _writer(path: Path, text: str) -> list[str]:
    """A command that writes ``text`` to ``path``."""
    return [sys.executable, "-c", f"import pathlib; pathlib.Path({str(path)!r}).write_text({text!r})"]


class Clock:
    """time.monotonic for the runner: each reading moves it by ``tick`` seconds."""

    def __init__(self, tick: float) -> None:
        self.now, self.tick = 0.0, tick

    def __call__(self) -> float:
        self.now += self.tick
        return self.now


def _ctx(tmp_path: Path):
    return M.Ctx(work=tmp_path / "work", results=tmp_path / "results")


def _file_step(name: str, out: str, *, min_s: int = 1) -> object:
    return M.Step(name, lambda ctx, box: _writer(ctx.results / out, "x"), lambda ctx: M.exists(ctx.results / out), min_s)


def test_a_plan_runs_its_steps_in_order_and_skips_them_once_done(tmp_path):
    plan = M.Plan("p", "h100", "two files", (_file_step("a", "a.txt"), _file_step("b", "b.txt")))
    lines: list[str] = []
    assert M.run_plan(plan, _ctx(tmp_path), 600, say=lines.append) == 0
    assert (tmp_path / "results" / "a.txt").read_text() == "x" and (tmp_path / "results" / "b.txt").is_file()
    lines.clear()
    assert M.run_plan(plan, _ctx(tmp_path), 600, say=lines.append) == 0
    assert lines[:2] == ["measure: p: a: done", "measure: p: b: done"]


def test_a_step_the_budget_left_cannot_cover_is_not_started(tmp_path):
    plan = M.Plan("p", "h100", "", (_file_step("a", "a.txt"), _file_step("b", "b.txt", min_s=300)))
    lines: list[str] = []
    assert M.run_plan(plan, _ctx(tmp_path), 200, say=lines.append, clock=Clock(10)) == 3
    assert (tmp_path / "results" / "a.txt").is_file() and not (tmp_path / "results" / "b.txt").exists()
    assert "needs 300: run the same command again" in lines[-1]


def test_a_time_boxed_step_gets_the_budget_left_less_its_tail(tmp_path):
    seen: list[int] = []

    def argv(ctx, box: int) -> list[str]:
        seen.append(box)
        return _writer(ctx.results / "t.txt", str(box))

    step = M.Step("boxed", argv, lambda ctx: M.exists(ctx.results / "t.txt"), 10, tail_s=90)
    assert M.run_plan(M.Plan("p", "h100", "", (step,)), _ctx(tmp_path), 500, say=lambda s: None,
                      clock=Clock(5)) == 0
    assert seen == [500 - 5 - 90]


def test_a_step_that_ends_short_of_its_output_stops_the_plan(tmp_path):
    """A sweep stopped at --max-seconds exits 0 without finishing: the plan stops, to be run again."""
    stopped = M.Step("sweep", lambda ctx, box: [sys.executable, "-c", "pass"], lambda ctx: False, 1)
    later = _file_step("after", "after.txt")
    lines: list[str] = []
    assert M.run_plan(M.Plan("p", "h100", "", (stopped, later)), _ctx(tmp_path), 600, say=lines.append) == 3
    assert "stopped at its time box" in lines[-1] and not (tmp_path / "results" / "after.txt").exists()


def test_a_failing_command_stops_the_plan_with_its_exit_status(tmp_path):
    bad = M.Step("bad", lambda ctx, box: [sys.executable, "-c", "raise SystemExit(7)"], lambda ctx: False, 1)
    lines: list[str] = []
    assert M.run_plan(M.Plan("p", "h100", "", (bad, _file_step("b", "b.txt"))), _ctx(tmp_path), 600,
                      say=lines.append) == 7
    assert lines[-1] == "measure: p: bad: exit status 7"


def test_steps_run_from_the_checkout_with_the_plans_own_build_cache(tmp_path):
    probe = [sys.executable, "-c", "import os, pathlib; pathlib.Path(os.environ['OUT_FILE']).write_text("
             "os.getcwd() + '\\n' + os.environ['L2TUI_CACHE_DIR'])"]
    step = M.Step("env", lambda ctx, box: probe, lambda ctx: M.exists(tmp_path / "env.txt"), 1)
    os.environ["OUT_FILE"] = str(tmp_path / "env.txt")
    try:
        M.run_plan(M.Plan("p", "h100", "", (step,)), _ctx(tmp_path), 60, say=lambda s: None)
    finally:
        del os.environ["OUT_FILE"]
    cwd, cache = (tmp_path / "env.txt").read_text().splitlines()
    assert Path(cwd) == ROOT and Path(cache) == tmp_path / "work" / "cache"


def test_the_cuda_l2_plan_asks_for_the_checkout(tmp_path):
    lines: list[str] = []
    assert M.run_plan(M.PLANS["h100-cuda-l2"], _ctx(tmp_path), 600, say=lines.append) == 2
    assert "needs --cuda-l2" in lines[-1]


_RUNS = [("{not json", False),
         (json.dumps({"runs": [{"ended": "sweep done"}, {"ended": "time limit"}]}), False),
         (json.dumps({"runs": [{"ended": "time limit"}, {"ended": "sweep done"}]}), True),
         (json.dumps(["sweep done"]), False)]
_EVENTS = [('{"type":"track_added"}\n', False),
           ('{"type":"track_added"}\n{"type": "session_ended", "reason": "done"}\n', True)]


@pytest.mark.parametrize("over,name,texts", [(M.sweep_finished, "sweep.json", _RUNS),
                                             (M.session_ended, "events.jsonl", _EVENTS)],
                         ids=["a sweep: its last run ended so", "a run: its log holds its end"])
def test_a_session_is_over_only_when_its_own_file_says_so(tmp_path, over, name, texts):
    s = tmp_path / "s"
    s.mkdir()
    assert not over(s)
    for text, expected in texts:
        (s / name).write_text(text)
        assert over(s) is expected, text


def test_a_bench_is_complete_only_when_its_file_says_so(tmp_path):
    f = tmp_path / "k.json"
    assert not M.bench_complete(f)
    f.write_text(json.dumps({"meta": {"complete": False}, "rows": []}))
    assert not M.bench_complete(f)
    f.write_text(json.dumps({"meta": {"complete": "yes"}, "rows": []}))
    assert not M.bench_complete(f)
    f.write_text(json.dumps({"meta": {"complete": True}, "rows": []}))
    assert M.bench_complete(f)


def test_a_result_older_than_what_it_was_made_from_is_made_again(tmp_path):
    src, out = tmp_path / "sweep.json", tmp_path / "winners.json"
    out.write_text("old")
    src.write_text("{}")
    past = time.time() - 100
    os.utime(out, (past, past))
    assert not M.newer(out, src)
    os.utime(src, (past - 100, past - 100))
    assert M.newer(out, src)
    assert M.newer(out, tmp_path / "missing") and not M.newer(tmp_path / "missing", src)


def test_a_sweep_step_starts_fresh_then_resumes_its_session(tmp_path):
    ctx = _ctx(tmp_path)
    step = M.PLANS["h100-grid"].steps[0]
    fresh = step.argv(ctx, 400)
    assert fresh[3:] == ["sweep", "--shapes", "grid", "--steps", "0", "--seeds", "3",
                         "--session", str(ctx.work / "grid"), "--max-seconds", "400"]
    (ctx.work / "grid").mkdir(parents=True)
    assert step.argv(ctx, 300)[3:] == ["sweep", "--session", str(ctx.work / "grid"), "--resume", "--max-seconds", "300"]


def test_the_sweep_record_is_copied_beside_the_results(tmp_path):
    ctx = _ctx(tmp_path)
    session = ctx.work / "models"
    session.mkdir(parents=True)
    (session / "sweep.json").write_text(json.dumps({"runs": [{"ended": "sweep done", "wall_s": 381.0}]}))
    (session / "session.toml").write_text("[config]\n")
    ctx.results.mkdir()
    step = M.record_step("models", "models")
    assert not step.done(ctx)
    step.action(ctx)
    assert step.done(ctx)
    assert json.loads((ctx.results / "sweep-models.json").read_text())["runs"][0]["wall_s"] == 381.0
    assert (ctx.results / "sweep-models.toml").read_text() == "[config]\n"


def _bench_meta(gpu: str) -> dict:
    return {"meta": {"gpu": gpu, "driver": "580.159.04", "cuda_driver": "13.0", "date": "2026-12-08T10:00:00+00:00",
                     "git_rev": "abc1234", "complete": True}, "rows": []}


def test_the_layer_is_keyed_by_the_benched_gpu_and_keeps_the_other_winners(tmp_path):
    (tmp_path / "kernels-offline.json").write_text(json.dumps(_bench_meta("NVIDIA H100 80GB HBM3")))
    (tmp_path / "gpu.json").write_text(json.dumps({"winners": ["winners-models-f32.json"],
                                                   "bench": {"models": "kernels-models.json"}}))
    assert not M.layer_current(tmp_path)
    M.write_layer(tmp_path)
    doc = json.loads((tmp_path / "gpu.json").read_text())
    assert doc["gpu"] == "NVIDIA H100 80GB HBM3" and doc["sms"] == 132 and doc["cuda_major"] == 13
    assert doc["winners"] == ["winners-f32.json", "winners-models-f32.json"]
    assert doc["bench"] == {"models": "kernels-models.json", "f32": "kernels-offline.json"}
    assert (doc["git"], doc["date"]) == ("abc1234", "2026-12-08") and M.layer_current(tmp_path)


def test_a_bench_on_a_gpu_the_store_does_not_know_makes_no_layer(tmp_path):
    (tmp_path / "kernels-offline.json").write_text(json.dumps(_bench_meta("NVIDIA GeForce RTX 4090")))
    with pytest.raises(SystemExit, match="does not name"):
        M.write_layer(tmp_path)
    assert not (tmp_path / "gpu.json").exists()


def _commands(plan, tmp_path: Path) -> list[list[str]]:
    """Every command line of ``plan`` against a work folder where no session exists (so sweeps start
    fresh) and one where every session does (so they resume)."""
    resumed = tmp_path / "resumed"
    for session in ("grid", "sample100-f16", "models", "models-bf16", "grid-bf16", "known-first"):
        (resumed / session).mkdir(parents=True)
    out = []
    for work in (tmp_path / "fresh", resumed):
        ctx = M.Ctx(work=work, results=tmp_path / "r", cuda_l2=Path("/c"))
        out += [s.argv(ctx, 100) for s in plan.steps if s.argv is not None]
    return out


@pytest.mark.parametrize("name", sorted(M.PLANS))
def test_every_command_a_plan_runs_parses(name, tmp_path, monkeypatch):
    """Each l2tui, harness and export-bench command line of every plan is accepted by its parser."""
    from l2tui.cli import build_parser
    from l2tui.export.bench import _parser as export_bench_parser

    monkeypatch.setattr(M, "_first_config", lambda ctx: tmp_path / "known-60s.toml")
    parser, _ = build_parser()
    for argv in _commands(M.PLANS[name], tmp_path):
        assert argv[0] == sys.executable
        if argv[1:3] == ["-m", "l2tui"]:
            parser.parse_args(argv[3:])
        elif argv[1:3] == ["-m", "l2tui.export.bench"]:
            export_bench_parser().parse_args(argv[3:])
        elif argv[1:3] == ["-m", "harness"]:
            _parse_harness(argv[3:])
        else:
            assert Path(argv[1]).is_file() and Path(argv[1]).parent == ROOT / "tools"


def _parse_harness(args: list[str]) -> None:
    """``python -m harness winners ...`` through the harness's own parser (``--help`` of a bad line
    exits non-zero)."""
    import subprocess

    r = subprocess.run([sys.executable, "-m", "harness", *args[:2], "--help"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    for flag in (a for a in args[2:] if a.startswith("--")):
        assert flag in r.stdout, f"python -m harness {' '.join(args[:2])} has no {flag}"
