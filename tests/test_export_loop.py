"""Export and rl-data of a session written by the real agent loop (LLM policy against a scripted
OpenAI-compatible server on 127.0.0.1, real nvcc builds, GPU results replayed from recordings)."""

from __future__ import annotations

import json

import pytest

from l2tui.agent.recorded import RecordedEvaluator
from l2tui.export import export_session, load_manifest
from l2tui.export.cdispatch import exported_symbols, parse_table
from l2tui.rldata import rl_data, validate_row
from l2tui.session import Session

pytestmark = pytest.mark.compile   # runs nvcc (tools/test.sh --fast leaves it out)


@pytest.fixture(scope="module")
def loop_session(scenarios, tmp_path_factory):
    import os

    from tests.openai_server import ScriptedServer

    tmp = tmp_path_factory.mktemp("loop")
    old = os.environ.get("L2TUI_TEST_API_KEY")
    os.environ["L2TUI_TEST_API_KEY"] = "sk-export-test"
    try:
        with ScriptedServer() as srv:
            s = scenarios.run_main_scenario(tmp / "session", RecordedEvaluator(scenarios.RECORDINGS), srv,
                                            [scenarios.SHAPE_A])
    finally:
        if old is None:
            os.environ.pop("L2TUI_TEST_API_KEY", None)
        else:
            os.environ["L2TUI_TEST_API_KEY"] = old
    return Session.open(s.path)


def test_export_of_a_loop_session_builds_and_matches_its_events(loop_session, tmp_path):
    s = loop_session
    decisions = [e for e in s.events if e["type"] == "decision" and e["action"] == "accept"]
    assert decisions, "the loop records an accept for each new best"
    res = export_session(s.path, tmp_path / "exp", build=True, arch="sm_90a")
    man = load_manifest(res.out)
    (entry,) = man["kernels"]
    m, n, k = entry["shape"]
    assert f"{m}x{n}x{k}" == "512x512x512"
    assert entry["sha256"] == decisions[-1]["sha"] and entry["selected_by"] == "accepted"
    assert (entry["file"] is None) == bool(entry["fallback"])   # a fallback shape's kernel is not shipped
    if entry["file"]:
        assert (res.out / entry["file"]).read_text() == s.get_kernel(entry["sha256"])
    timed = [e for e in s.events if e["type"] == "timed" and e["sha"] == entry["sha256"]]
    assert timed and entry["times_ms"] == {k2: v for k2, v in timed[-1]["times_ms"].items()}
    table = parse_table((res.out / "src" / "l2hgemm_dispatch.cu").read_text())
    assert table == [(m, n, k, None if entry["fallback"] else entry["symbol"])]
    syms = exported_symbols(res.library)
    assert "l2hgemm" in syms and (entry["symbol"] in syms) == (entry["fallback"] is None)


@pytest.mark.parametrize("fmt", ["trl", "openai-sft", "openai-dpo"])
def test_rl_data_of_a_loop_session(loop_session, tmp_path, fmt):
    out = tmp_path / f"{fmt}.jsonl"
    # improvements = candidates after the seed that became a track's best (from the events)
    seeds = {e["track"]: e["sha"] for e in loop_session.events if e["type"] == "candidate" and e["origin"] == "seed"}
    improved = [e for e in loop_session.events if e["type"] == "best" and e["sha"] != seeds.get(e["track"])]
    # SFT also imitates a debugger's repair that compiled and passed (its job is to fix, not to win)
    repaired = [r for r in loop_session.rewards() if r.get("role") == "debugger" and r.get("kind") == "ok"]
    try:
        st = rl_data([loop_session.path], fmt, out)
    except Exception as e:
        # DPO may find no pair in a short scripted run; SFT finds nothing exactly when no step
        # beat the seed (with the H200 recordings the scripted patches were slower than the seed)
        assert "nothing to write" in str(e)
        assert fmt == "openai-dpo" or (fmt == "openai-sft" and not improved and not repaired
                                       and "no accepted improvements" in str(e))
        return
    if fmt == "openai-sft":
        assert improved or repaired, "SFT rows without any improvement or repair in the session"
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows and st.rows == len(rows)
    for r in rows:
        validate_row(fmt, r)
    if fmt == "trl":
        assert {r["agent_role"] for r in rows} <= {"planner", "coder", "debugger", "compiler"}
        assert all(r["policy"] == "llm" for r in rows)


def test_dpo_pairs_by_parent_in_a_loop_session(loop_session, tmp_path):
    """The loop's prompts grow with its history, so same-prompt pairs are rare; --pair-by parent finds them."""
    out = tmp_path / "dpo.jsonl"
    st = rl_data([loop_session.path], "openai-dpo", out, pair_by="parent")
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows and st.rows == len(rows)
    for r in rows:
        validate_row("openai-dpo", r)
