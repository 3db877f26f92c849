"""LLM calls against a misbehaving endpoint: a real HTTP server on 127.0.0.1 (tests/openai_server.py).

* a server that drips a token a second must not outlive ``timeout_s``: the deadline is for
  the whole call, streaming included;
* a stream that ends without its finish reason (or whose connection drops) is a failed
  call, retried, and never becomes a plan;
* a 5 MB reply must not become thousands of fsynced ``llm_delta`` events in the session.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.shapes import Shape
from l2tui import events as E
from l2tui.agent.llm_client import LLMClient
from l2tui.agent.policies.base import TrackContext
from l2tui.agent.policies.llm import LLMPolicy
from l2tui.session import Session
from tests.openai_server import Reply

ROOT = Path(__file__).resolve().parent.parent
SEED = (ROOT / "tests" / "fixtures" / "recorded" / "seed_tiled.cu").read_text()
MSGS = [{"role": "system", "content": "s"}, {"role": "user", "content": "ROLE: planner\nhello"}]


def client_for(server, **kw) -> LLMClient:
    opts = dict(timeout_s=3.0, max_retries=0, backoff_s=0.01)
    opts.update(kw)
    return LLMClient(base_url=server.base_url, model="m", api_key_env="L2TUI_NO_SUCH_KEY", **opts)


def test_a_token_a_second_does_not_outlive_the_deadline(scripted_server):
    scripted_server.add(Reply(content="abcdefghijklmnopqrst", chunk_chars=1, chunk_delay_s=1.0))  # 20 s of reply
    deltas: list[str] = []
    r = client_for(scripted_server).chat(MSGS, role="planner", on_delta=deltas.append)
    assert not r.ok and r.text == ""
    assert "timed out after 3 s" in r.error and "whole call" in r.error and "\n" not in r.error
    assert r.attempts == 1 and len("".join(deltas)) < 20    # it never waited for the end of the drip


def test_the_deadline_holds_per_attempt_and_retries_are_visible(scripted_server):
    for _ in range(2):
        scripted_server.add(Reply(content="abcdefghijklmnopqrst", chunk_chars=1, chunk_delay_s=1.0))
    retries = []
    r = client_for(scripted_server, timeout_s=2.0, max_retries=1).chat(
        MSGS, on_retry=lambda n, why, d: retries.append(why))
    assert not r.ok and r.attempts == 2 and "timed out" in r.error
    assert len(retries) == 1 and "timed out" in retries[0]


@pytest.mark.parametrize("broken", [Reply(content="Plan: half a pla", finish_reason=None),
                                    Reply(content="Plan: half a pla", cut=True)],
                         ids=["no-finish-reason", "connection-dropped"])
def test_a_truncated_stream_is_retried_then_fails(scripted_server, broken):
    for _ in range(3):
        scripted_server.add(broken)
    retries = []
    r = client_for(scripted_server, max_retries=2).chat(MSGS, on_retry=lambda n, why, d: retries.append(why))
    assert not r.ok and r.attempts == 3 and r.text == ""
    assert len(scripted_server.requests) == 3 and len(retries) == 2
    if broken.finish_reason is None:
        assert "finish reason" in r.error


def test_a_truncated_stream_then_a_whole_one(scripted_server):
    scripted_server.add(Reply(content="Plan: half", finish_reason=None))
    scripted_server.add("Plan: the whole plan.")
    r = client_for(scripted_server, max_retries=2).chat(MSGS)
    assert r.ok and r.text == "Plan: the whole plan." and r.attempts == 2 and r.finish_reason == "stop"


def test_a_non_streamed_reply_without_finish_reason_is_retried(scripted_server):
    scripted_server.add(Reply(content="half", finish_reason=None))
    scripted_server.add("whole")
    r = client_for(scripted_server, max_retries=1, stream=False).chat(MSGS)
    assert r.ok and r.text == "whole" and r.attempts == 2


def test_a_truncated_planner_reply_is_never_a_plan(scripted_server, tmp_path):
    """Through the policy: the planner's cut-short stream is a failed call, not a plan for the coder."""
    scripted_server.defaults["planner"] = Reply(content="Plan: use 128x128 tiles and", finish_reason=None)
    scripted_server.defaults["coder"] = "<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n"
    session = Session.create(tmp_path / "s", config={}, gpu={}, versions={})
    policy = LLMPolicy(client_for(scripted_server, max_retries=1))
    props = policy.propose(ctx_for(session))
    assert len(props) == 1 and props[0].error and "planner call failed" in props[0].error
    assert props[0].patch is None and props[0].plan == ""
    assert [r["role"] for r in scripted_server.requests] == ["planner", "planner"]   # retried, coder never asked
    assert not [e for e in session.events if e["type"] == "plan"]


def ctx_for(session: Session) -> TrackContext:
    def emit(event: E.StepEvent) -> None:
        event.track, event.step = "64x64x64-f32", 1
        session.record(event)

    return TrackContext(track="64x64x64-f32", shape=Shape(64, 64, 64), acc="f32", baseline="cublas", step=1,
                        source=SEED, sha=session.put_kernel(SEED), times_ms={"candidate": 0.01, "cublas": 0.012},
                        speedup=1.2, emit=emit)


@pytest.mark.parametrize("max_reply_chars", [None, 8 * 1024 * 1024], ids=["refused-as-too-long", "accepted"])
def test_a_5mb_reply_becomes_a_bounded_number_of_events(scripted_server, tmp_path, max_reply_chars):
    big = "x" * 5_000_000
    scripted_server.add(Reply(content=big, chunk_chars=4096), role="planner")
    scripted_server.defaults["coder"] = "no code"
    session = Session.create(tmp_path / "s", config={}, gpu={}, versions={})
    cap = {} if max_reply_chars is None else {"max_reply_chars": max_reply_chars}
    policy = LLMPolicy(client_for(scripted_server, timeout_s=120.0, max_tokens=200_000, **cap))
    props = policy.propose(ctx_for(session))
    deltas = [e for e in Session.open(session.path).events if e["type"] == "llm_delta"]
    assert 1 <= len(deltas) < 50
    assert (session.path / "events.jsonl").stat().st_size < 1_000_000
    if max_reply_chars is None:
        assert props[0].error and "max_reply_chars" in props[0].error  # past the default cap: not a reply
    else:
        assert props[0].plan == big                                     # the whole reply still comes back


def test_the_llm_policy_without_the_openai_package_is_one_line_before_any_step(tmp_path, monkeypatch, capsys):
    """Without the SDK every call would fail alike and each step would log a no_patch reward the
    model never earned: the run refuses at the start instead, in one line, and writes no session."""
    from l2tui.cli import main as cli_main

    demo = ROOT / "sessions" / "demo-h200"
    monkeypatch.setitem(__import__("sys").modules, "openai", None)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-key")
    sess = tmp_path / "s"
    rc = cli_main(["run", "--headless", "--recorded", str(demo / "evaluations.json"), "--shapes", "64x64x64",
                   "--policy", "llm", "--session", str(sess)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err
    assert "openai package" in err and "pip install openai" in err and "sk-test" not in err
    assert not sess.exists()


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_an_over_long_reply_is_refused_in_one_line_and_reading_stops(scripted_server, stream):
    """A reply past ``max_reply_chars`` fails the call in one line, streamed or not, however many
    characters max_tokens would allow."""
    scripted_server.add(Reply(content="y" * 4_000_000, chunk_chars=65536))
    r = client_for(scripted_server, timeout_s=120.0, max_tokens=10_000_000, stream=stream,
                   max_reply_chars=32 * 1024).chat(MSGS)
    assert not r.ok and r.text == "" and r.attempts == 1
    assert "passed 32768 characters" in r.error and "max_reply_chars" in r.error and "\n" not in r.error


def test_a_reply_under_the_cap_is_whole_when_not_streamed(scripted_server):
    body = "z" * 100_000
    scripted_server.add(Reply(content=body))
    r = client_for(scripted_server, stream=False, max_reply_chars=128 * 1024).chat(MSGS)
    assert r.ok and r.text == body and r.finish_reason == "stop"


def test_the_reply_cap_is_a_bounded_config_key(tmp_path):
    from l2tui.config import parse_config
    from l2tui.errors import ConfigError

    cfg = parse_config({"llm": {"max_reply_chars": 65536}})
    assert LLMClient.from_config(cfg).max_reply_chars == 65536
    for bad in (10, 10**12):
        with pytest.raises(ConfigError, match="max_reply_chars"):
            parse_config({"llm": {"max_reply_chars": bad}})
