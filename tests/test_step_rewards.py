"""One reward definition: a recorded sweep and a recorded live session score the same evaluation alike.

Both replay the same recorded H200 evaluation of one catalog configuration (the committed
timings, tests/fixtures/h200_timings, with the recording's own build, so no nvcc runs) under a
``[rewards]`` section that is not the default, and write their rows through ``l2tui.agent.step``:
the rows, and the ``l2tui rl-data`` rows made from them, have the same keys and the same reward.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.families import catalog
from harness.shapes import Shape
from l2tui.agent.loop import AgentLoop, LoopConfig
from l2tui.agent.policies.search import SearchPolicy
from l2tui.agent.recorded import RecordedEvaluator
from l2tui.agent.rewards import RewardConfig
from l2tui.agent.step import ROW_KEYS, score, speedup
from l2tui.agent.sweep import Sweep, SweepConfig
from l2tui.rldata import rl_data
from l2tui.session import Session
from tests.sweep_support import fixture_times

SHAPE = Shape(4096, 4096, 4096)
#: not the defaults: a sweep that ignored the session's [rewards] would score differently
REWARDS = {"error_weight": 2.0, "length_weight": 0.3, "wrong": -0.25}
#: ten times the reference error (half the bound): the error penalty is error_weight
CHECK = {"ok": True, "failed": None, "detail": "", "rel_err": 5e-3, "bound": 1e-3}


def _config_and_time() -> tuple[str, str, float, float]:
    """A catalog configuration the fixture timed on SHAPE: its name, source, time and cuBLASLt's."""
    times = fixture_times()[(SHAPE.m, SHAPE.n, SHAPE.k)]
    for c in catalog("f32", "sm_90a"):
        if times.get(c.name):
            return c.name, c.source(), float(times[c.name]), float(times["cublaslt_autotune"])
    raise AssertionError("the fixture timed no catalog configuration on 4096^3")


def _recording(tmp_path: Path, source: str, t: float, base: float) -> Path:
    from l2tui.agent.recorded import record_key

    build = {"ok": True, "key": "0" * 40, "so_path": None, "ptxas": None, "errors": [], "log": "", "seconds": 0.0,
             "cached": True, "arch": "sm_90a", "flags": []}
    rec = {"status": "ok", "build": build, "check": CHECK, "times_ms": {"candidate": t, "cublaslt_autotune": base},
           "spread": {}, "roofline_ms": None, "message": f"ok: {t:.4g} ms", "extra": {"mode": "offline"}}
    p = tmp_path / "recorded.json"
    meta = {"gpu": {"name": "NVIDIA H200", "uuid": "GPU-fixture", "arch": "sm_90a"}, "arch": "sm_90a",
            "provisional": False}
    p.write_text(json.dumps({"meta": meta, "records": {record_key(source, SHAPE, "f32"): rec}}))
    return p


def _only(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The search policy's catalog holds just ``name``: the sweep's pick and the live seed are that kernel."""
    import l2tui.agent.policies.search as search

    full = search.catalog
    monkeypatch.setattr(search, "catalog", lambda acc, arch, dtype="fp16": [c for c in full(acc, arch, dtype) if c.name == name])


def _sweep_session(tmp_path: Path, rec: Path) -> Session:
    s = Session.create(tmp_path / "sweep", config={"sweep": {}, "rewards": REWARDS}, gpu={"name": "H200"},
                       versions={})
    cfg = SweepConfig(shapes=[SHAPE], steps=0, seeds=1, pick_kinds=False, arch="sm_90a", build_batches=False,
                      rewards=RewardConfig.from_section(REWARDS))
    Sweep(cfg, RecordedEvaluator(rec, build="unrecorded"), session=s, out_dir=s.path,
          progress=lambda line: None, gpu_name="H200").run()
    return s


def _live_session(tmp_path: Path, rec: Path) -> Session:
    s = Session.create(tmp_path / "live", config={"rewards": REWARDS}, gpu={"name": "H200"}, versions={})
    cfg = LoopConfig(max_steps=1, baseline="cublaslt_autotune", arch="sm_90a",
                     rewards=RewardConfig.from_section(REWARDS))
    loop = AgentLoop(s, cfg, policy=SearchPolicy(), evaluator=RecordedEvaluator(rec, build="unrecorded"))
    loop.subscribe(lambda e: loop.request_stop() if e["type"] == "best" else None)
    loop.add_track(SHAPE, "f32")
    loop.run()
    return s


def _row_of(session: Session, sha: str) -> dict:
    rows = [r for r in session.rewards() if r["child_sha"] == sha]
    assert len(rows) == 1, session.rewards()
    return rows[0]


def test_a_sweep_and_a_live_session_give_the_same_reward_for_the_same_evaluation(tmp_path, monkeypatch):
    import hashlib

    name, source, t, base = _config_and_time()
    rec = _recording(tmp_path, source, t, base)
    sha = hashlib.sha256(source.encode()).hexdigest()
    _only(name, monkeypatch)
    swept, live = _row_of(_sweep_session(tmp_path, rec), sha), _row_of(_live_session(tmp_path, rec), sha)

    expected, parts = score("ok", speedup=base / t, check=CHECK, source=source, seed_lines=0,
                            cfg=RewardConfig.from_section(REWARDS))
    assert parts["error_penalty"] == pytest.approx(REWARDS["error_weight"])
    assert swept["reward"] == pytest.approx(expected) and live["reward"] == pytest.approx(expected)
    assert swept["parts"] == pytest.approx(live["parts"])
    assert set(swept) == set(live) == {*ROW_KEYS, "seq", "time"}
    assert swept["origin"] == live["origin"] == "seed" and swept["plan"] and live["plan"]

    # l2tui rl-data: rows of one form from either session
    out = {}
    for kind in ("sweep", "live"):
        rl_data([tmp_path / kind], "trl", tmp_path / f"{kind}.jsonl")
        out[kind] = [json.loads(line) for line in (tmp_path / f"{kind}.jsonl").read_text().splitlines()]
    assert set(out["sweep"][0]) == set(out["live"][0])
    assert out["sweep"][0]["reward"] == pytest.approx(out["live"][0]["reward"])


def test_a_failure_scores_the_same_with_a_reason_in_both_writers():
    cfg = RewardConfig.from_section(REWARDS)
    r, parts = score("wrong", speedup=None, check=None, source="", seed_lines=0, cfg=cfg,
                     message="wrong:\n  max error 3.0 at (1, 2)")
    assert r == REWARDS["wrong"] and parts == {"failure": "wrong", "fixed": REWARDS["wrong"],
                                               "reason": "wrong: max error 3.0 at (1, 2)"}
    assert score("not_recorded", speedup=None, check=None, source="", seed_lines=0, cfg=cfg) == (
        0.0, {"not_recorded": True})


def test_the_length_penalty_is_measured_against_the_seed():
    cfg = RewardConfig.from_section(REWARDS)
    seed = "a\nb\n\nc\nd\n"            # 4 non-blank lines
    longer = seed + "e\nf\n"            # 6
    _, as_seed = score("ok", speedup=1.0, check=None, source=longer, seed_lines=0, cfg=cfg)
    _, refined = score("ok", speedup=1.0, check=None, source=longer, seed_lines=4, cfg=cfg)
    assert as_seed["length_penalty"] == 0.0
    assert refined["length_penalty"] == pytest.approx(REWARDS["length_weight"] * 2 / 4)


@pytest.mark.parametrize("times, want", [
    ({"cublas": 2.0, "candidate": 1.0}, 2.0),
    ({"cublas": 2.0}, None),
    ({"cublas": "x", "candidate": 1.0}, None),
    ({"cublas": 2.0, "candidate": 0.0}, None),
    ({"cublas": -2.0, "candidate": 1.0}, None),
    ({"cublas": True, "candidate": 1.0}, None),
    ({"cublas": float("inf"), "candidate": 1.0}, None),
    (None, None),
])
def test_speedup_is_a_positive_finite_ratio_or_none(times, want):
    assert speedup(times, "cublas") == want
