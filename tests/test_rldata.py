"""rl-data: TRL / OpenAI SFT / OpenAI DPO rows from a recorded session, validated and loadable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.shapes import Shape
from l2tui.cli import main as cli_main
from l2tui.rldata import RlDataError, RowError, rl_data, validate_row
from tests.fixtures.export import make_session as fx


@pytest.fixture(scope="module")
def session(tmp_path_factory) -> Path:
    return fx.make_session(tmp_path_factory.mktemp("sess") / "run-1")


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_trl_rows_carry_the_reward_and_are_deduplicated(session, tmp_path):
    out = tmp_path / "trl.jsonl"
    st = rl_data([session], "trl", out)
    rows = _rows(out)
    assert st.rows == len(rows) == 12 and st.read == 13 and st.duplicates == 1
    for r in rows:
        validate_row("trl", r)
        assert r["prompt"][0]["role"] == "system" and r["prompt"][-1]["role"] == "user"
        assert r["completion"][0]["role"] == "assistant"
    merged = [r for r in rows if r["n"] == 2]
    assert len(merged) == 1
    assert merged[0]["reward"] == pytest.approx((0.012 / 0.008 + 0.012 / 0.0082) / 2, rel=1e-5)
    assert merged[0]["improvement"] is True and merged[0]["track"] == "128x128x128-f32"
    assert sum(n for _, n in st.histogram()) == len(rows)
    assert dict(st.histogram())["<0"] == 4  # the failures


def test_sft_rows_are_accepted_improvements_only(session, tmp_path):
    out = tmp_path / "sft.jsonl"
    rl_data([session], "openai-sft", out)
    rows = _rows(out)
    for r in rows:
        validate_row("openai-sft", r)
    answers = sorted(r["messages"][-1]["content"] for r in rows)
    # 128^3 TILE=32 (became best), 256x128x64 TILE=16 (accepted) and TILE=32 (became best);
    # not: the 64^3 seed (accepted then rejected), the failing accepted 192x64x96 patch
    assert answers == sorted([fx.patch(16, 32), "seed tiled TILE=16", fx.patch(16, 32)])
    users = [r["messages"][1]["content"] for r in rows]
    assert sum("128x128x128-f32" in u for u in users) == 1
    assert sum("256x128x64-f32" in u for u in users) == 2
    assert not any("64x64x64" in u.split(".")[0] for u in users)


def test_dpo_pairs_prefer_the_better_completion_of_the_same_parent(session, tmp_path):
    out = tmp_path / "dpo.jsonl"
    st = rl_data([session], "openai-dpo", out)
    rows = _rows(out)
    for r in rows:
        validate_row("openai-dpo", r)
    pair = [r for r in rows if "128x128x128-f32" in r["input"]["messages"][1]["content"]]
    assert len(pair) == 1
    assert pair[0]["preferred_output"][0]["content"] == fx.patch(16, 32)
    assert pair[0]["non_preferred_output"][0]["content"] == fx.patch(16, 8)
    # --min-reward applies to the preferred side: only pairs whose winner is good remain
    st2 = rl_data([session], "openai-dpo", tmp_path / "dpo2.jsonl", min_reward=1.0)
    assert st2.rows == 1 < st.rows


def test_filters(session, tmp_path):
    st = rl_data([session], "trl", tmp_path / "a.jsonl", policy="search")
    assert {r["policy"] for r in _rows(tmp_path / "a.jsonl")} == {"search"} and st.filtered > 0
    rl_data([session], "trl", tmp_path / "b.jsonl", shapes=[Shape(64, 64, 64)])
    assert {tuple(r["shape"]) for r in _rows(tmp_path / "b.jsonl")} == {(64, 64, 64)}
    rl_data([session], "trl", tmp_path / "c.jsonl", min_reward=1.0)
    assert min(r["reward"] for r in _rows(tmp_path / "c.jsonl")) >= 1.0
    with pytest.raises(RlDataError, match="nothing to write"):
        rl_data([session], "trl", tmp_path / "d.jsonl", policy="nobody")
    assert not (tmp_path / "d.jsonl").exists()


def test_existing_output_needs_force(session, tmp_path):
    out = tmp_path / "x.jsonl"
    out.write_text("keep\n")
    with pytest.raises(RlDataError, match="--force"):
        rl_data([session], "trl", out)
    assert out.read_text() == "keep\n"
    rl_data([session], "trl", out, force=True)
    assert len(_rows(out)) == 12


@pytest.mark.parametrize("fmt,row,match", [
    ("trl", {"prompt": [], "completion": [{"role": "assistant", "content": "x"}], "reward": 1.0}, "non-empty"),
    ("trl", {"prompt": [{"role": "user", "content": "p"}], "completion": [{"role": "assistant", "content": "x"}],
             "reward": float("nan")}, "finite"),
    ("trl", {"prompt": [{"role": "user", "content": "p"}], "completion": [{"role": "user", "content": "x"}],
             "reward": 1}, "assistant"),
    ("openai-sft", {"messages": [{"role": "user", "content": "p"}]}, "assistant"),
    ("openai-sft", {"messages": [{"role": "robot", "content": "p"}, {"role": "assistant", "content": "a"}]}, "role"),
    ("openai-sft", {"messages": [{"role": "assistant", "content": "a"}], "reward": 1}, "exactly one key"),
    ("openai-dpo", {"input": {"messages": [{"role": "user", "content": "p"}]},
                    "preferred_output": [{"role": "assistant", "content": "a"}],
                    "non_preferred_output": [{"role": "assistant", "content": "a"}]}, "identical"),
    ("openai-dpo", {"input": {"messages": [{"role": "user", "content": "p"}]},
                    "preferred_output": [{"role": "assistant", "content": "a"}]}, "keys"),
    ("openai-dpo", {"input": {"messages": [{"role": "user", "content": "p"}]},
                    "preferred_output": [{"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}],
                    "non_preferred_output": [{"role": "assistant", "content": "c"}]}, "exactly one"),
])
def test_validator_rejects_malformed_rows(fmt, row, match):
    with pytest.raises(RowError, match=match):
        validate_row(fmt, row)


def test_cli_prints_a_stats_line(session, tmp_path, capsys):
    out = tmp_path / "s.jsonl"
    assert cli_main(["rl-data", str(session), "--format", "openai-sft", "--out", str(out)]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("rl-data: wrote 3 rows (openai-sft)") and "histogram [<0]:0" in line
    assert cli_main(["rl-data", str(session), "--format", "openai-sft", "--out", str(out)]) == 2
    assert "--force" in capsys.readouterr().err


def test_rows_round_trip_through_the_datasets_loader(session, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    datasets = pytest.importorskip("datasets")
    for fmt, cols in (("trl", {"prompt", "completion", "reward"}), ("openai-sft", {"messages"}),
                      ("openai-dpo", {"input", "preferred_output", "non_preferred_output"})):
        out = tmp_path / f"{fmt}.jsonl"
        rl_data([session], fmt, out)
        ds = datasets.load_dataset("json", data_files=str(out), split="train", cache_dir=str(tmp_path / "hf"))
        assert cols <= set(ds.column_names)
        assert len(ds) == len(_rows(out))
        first = _rows(out)[0]
        for c in cols:
            assert ds[0][c] == first[c]


def test_logged_reward_matches_only_the_logged_completion(session, tmp_path):
    from l2tui.rldata import logged_reward

    out = tmp_path / "t.jsonl"
    rl_data([session], "trl", out)
    rows = _rows(out)
    cols = {k: [r[k] for r in rows] for k in rows[0] if k not in ("prompt", "completion")}
    same = [r["completion"] for r in rows]
    assert logged_reward(prompts=[r["prompt"] for r in rows], completions=same, **cols) == [r["reward"] for r in rows]
    other = [[{"role": "assistant", "content": "something new"}] for _ in rows]
    assert logged_reward(completions=other, **cols) == [None] * len(rows)


@pytest.mark.compile
def test_live_reward_scores_new_completions_like_the_loop(session, tmp_path):
    """Apply each completion to its parent, evaluate (recorded results, real nvcc), reward as the loop does."""
    import json as _json

    from harness.shapes import Shape as S
    from l2tui.agent.recorded import RecordedEvaluator, record_key
    from l2tui.rldata import live_reward

    ok = {"status": "ok", "build": None, "check": {"ok": True, "rel_err": 2e-4, "bound": 1e-3},
          "times_ms": {"candidate": 0.008, "cublas": 0.012}, "spread": {}, "roofline_ms": None, "message": "ok"}
    wrong = {"status": "wrong", "build": None, "check": {"ok": False, "rel_err": 0.4, "bound": 1e-3},
             "times_ms": {}, "spread": {}, "roofline_ms": None, "message": "wrong"}
    shape = S(128, 128, 128)
    rec = tmp_path / "rec.json"
    rec.write_text(_json.dumps({"meta": {"arch": "sm_90a"}, "records": {
        record_key(fx.tiled(32), shape, "f32"): ok, record_key(fx.tiled(8), shape, "f32"): wrong}}))
    fn = live_reward(RecordedEvaluator(rec, arch="sm_90a"))
    out = tmp_path / "t.jsonl"
    rl_data([session], "trl", out, shapes=[shape], policy="llm")
    rows = [r for r in _rows(out) if r["acc"] == "f32"]
    cols = {k: [r[k] for r in rows] for k in rows[0] if k not in ("prompt", "completion")}
    got = fn(prompts=[r["prompt"] for r in rows], completions=[r["completion"] for r in rows], **cols)
    by = dict(zip((r["logged_completion"] for r in rows), got))
    assert by[fx.patch(16, 32)] == pytest.approx(1.5)      # speedup 0.012 / 0.008, no penalties
    assert by[fx.patch(16, 8)] == pytest.approx(-0.7)      # the loop's fixed reward for a wrong kernel
    garbage = fn(completions=[[{"role": "assistant", "content": "no patch here"}]], shape=[[128, 128, 128]],
                 acc=["f32"], parent_sha=[rows[0]["parent_sha"]], session=[rows[0]["session"]], baseline=["cublas"])
    assert garbage == [pytest.approx(-0.8)]                # patch_failed


def test_dpo_pair_by_parent_pairs_across_prompts(session, tmp_path):
    same = rl_data([session], "openai-dpo", tmp_path / "a.jsonl")
    by_parent = rl_data([session], "openai-dpo", tmp_path / "b.jsonl", pair_by="parent")
    assert by_parent.rows >= same.rows
    for r in _rows(tmp_path / "b.jsonl"):
        validate_row("openai-dpo", r)
    with pytest.raises(RlDataError, match="pair-by"):
        rl_data([session], "openai-dpo", tmp_path / "c.jsonl", pair_by="prompt")
