"""The LLM client against a real HTTP server on 127.0.0.1 (tests/openai_server.py)."""

import pytest

from l2tui.agent.llm_client import LLMClient
from tests.openai_server import Reply

KEY = "sk-test-client-7f3a9"
MSGS = [{"role": "system", "content": "s"}, {"role": "user", "content": "ROLE: planner\nhello"}]


@pytest.fixture
def client(scripted_server, monkeypatch):
    monkeypatch.setenv("L2TUI_TEST_KEY", KEY)
    return LLMClient(base_url=scripted_server.base_url, model="m", api_key_env="L2TUI_TEST_KEY",
                     timeout_s=1.0, max_retries=2, backoff_s=0.01)


def test_streaming_deltas_are_batched_and_usage_reported(client, scripted_server, monkeypatch):
    from l2tui.agent import llm_client

    monkeypatch.setattr(llm_client, "DELTA_BATCH_S", 3600.0)   # batches by size only: the count is the machine's, not
    monkeypatch.setattr(llm_client, "DELTA_BATCH_CHARS", 100)  # the server's pace
    text = "x" * 300 + " end"
    scripted_server.add(Reply(content=text, chunk_chars=3))
    deltas = []
    r = client.chat(MSGS, role="planner", on_delta=deltas.append)
    assert r.ok and r.text == text and r.attempts == 1
    assert "".join(deltas) == text
    assert [len(d) for d in deltas] == [102, 102, 100]   # batched, not one event per 3-character chunk
    assert r.usage["completion_tokens"] == len(text) // 4 and r.usage["prompt_tokens"] > 0
    req = scripted_server.requests[-1]
    assert req["headers"]["authorization"] == f"Bearer {KEY}"
    assert req["body"]["stream"] is True and req["role"] == "planner"


def test_non_streaming(client, scripted_server):
    client.stream = False
    scripted_server.add("plain reply")
    r = client.chat(MSGS)
    assert r.ok and r.text == "plain reply" and scripted_server.requests[-1]["body"].get("stream") in (None, False)


def test_429_then_success_honours_retry_after(client, scripted_server):
    scripted_server.add(Reply(status=429, retry_after=0.3))
    scripted_server.add("fine")
    retries, slept = [], []
    client._sleep = slept.append      # the waits it chose, not how long the machine took
    r = client.chat(MSGS, on_retry=lambda n, why, d: retries.append((n, why, d)))
    assert r.ok and r.text == "fine" and r.attempts == 2
    assert retries[0][0] == 1 and "429" in retries[0][1] and retries[0][2] >= 0.3
    assert slept == [retries[0][2]]


def test_5xx_then_success(client, scripted_server):
    scripted_server.add(Reply(status=503))
    scripted_server.add("ok")
    assert client.chat(MSGS).ok


def test_timeout_then_success(client, scripted_server):
    scripted_server.add(Reply(content="late", delay_s=2.5))
    scripted_server.add("in time")
    retries = []
    r = client.chat(MSGS, on_retry=lambda *a: retries.append(a))
    assert r.ok and r.text == "in time"
    assert "timed out" in retries[0][1]


def test_retries_exhausted_is_a_result_not_an_exception(client, scripted_server):
    for _ in range(3):
        scripted_server.add(Reply(status=500))
    r = client.chat(MSGS)
    assert not r.ok and r.attempts == 3 and "HTTP 500" in r.error and "\n" not in r.error


def test_garbage_reply(client, scripted_server):
    scripted_server.add(Reply(raw=b"<html>oops</html>"))
    r = client.chat(MSGS)
    assert not r.ok and r.error and "\n" not in r.error
    client.stream = False
    scripted_server.add(Reply(raw=b"not json"))
    r = client.chat(MSGS)
    assert not r.ok and "garbage" in r.error


def test_empty_reply(client, scripted_server):
    scripted_server.add("   ")
    r = client.chat(MSGS)
    assert not r.ok and "empty" in r.error


def test_auth_error_is_not_retried_and_names_the_variable(client, scripted_server):
    scripted_server.add(Reply(status=401))
    r = client.chat(MSGS)
    assert not r.ok and r.attempts == 1 and "$L2TUI_TEST_KEY" in r.error and KEY not in r.error


def test_unreachable_endpoint(monkeypatch):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()                         # nothing listens there now
    c = LLMClient(base_url=f"http://127.0.0.1:{port}/v1", model="m", timeout_s=1.0, max_retries=1, backoff_s=0.01)
    r = c.chat(MSGS)
    assert not r.ok and "cannot reach" in r.error and r.attempts == 2


def test_an_estimated_usage_stays_marked_through_the_policy_and_into_the_reward_row(tmp_path):
    """A server that reports no usage: the client counts (``estimated``); the planner+coder sum
    and the RL row keep the mark, so token counts in rl-data are never taken for the server's."""
    from types import SimpleNamespace

    from harness.shapes import Shape
    from l2tui.agent.loop import AgentLoop
    from l2tui.agent.policies.base import Proposal
    from l2tui.agent.policies.llm import _add_usage
    from l2tui.session import Session

    exact = {"prompt_tokens": 10, "completion_tokens": 5}
    guessed = {"prompt_tokens": 7, "completion_tokens": 3, "estimated": True}
    assert _add_usage(exact, exact) == {"prompt_tokens": 20, "completion_tokens": 10}
    assert _add_usage(exact, guessed) == {"prompt_tokens": 17, "completion_tokens": 8, "estimated": True}
    s = Session.create(tmp_path / "s", config={}, gpu={}, versions={})
    fake = SimpleNamespace(_policy=lambda t: SimpleNamespace(name="llm", model="m"), session=s,
                           _emit=lambda *a, **k: None, config=SimpleNamespace(dtype="fp16"))
    track = SimpleNamespace(id="t", shape=Shape(64, 64, 64), acc="f32", baseline="cublas", seed_lines=0)
    for usage in (guessed, exact):
        prop = Proposal(plan="p", messages=[], completion="c", usage=usage, role="coder", origin="llm")
        AgentLoop._row(fake, track, 1, prop, None, None, "ok", 1.0, {}, 1.0)
    rows = s.rewards()
    assert rows[0]["usage"] == {"prompt_tokens": 7, "completion_tokens": 3, "estimated": True}
    assert rows[1]["usage"] == exact
