"""Session folders: create, append (fsync), torn last line, missing kernels, replay, secrets."""

import json

import pytest

from l2tui.errors import SessionError
from l2tui.session import Session, sha256_text


def make(tmp_path, **cfg):
    return Session.create(tmp_path / "s", config={"llm": {"model": "m", "api_key_env": "OPENAI_API_KEY"}, **cfg},
                          gpu={"name": "GPU", "uuid": None}, versions={"l2tui": "0"})


def test_create_writes_toml_and_first_event(tmp_path):
    s = make(tmp_path)
    assert (s.path / "session.toml").is_file() and (s.path / "kernels").is_dir()
    text = (s.path / "session.toml").read_text()
    assert "[config.llm]" in text and 'api_key_env = "OPENAI_API_KEY"' in text and "uuid" not in text
    ev = s.events[0]
    assert ev["seq"] == 0 and ev["type"] == "session_started" and ev["gpu"]["name"] == "GPU"


def test_secret_keys_are_scrubbed_from_snapshot(tmp_path):
    s = Session.create(tmp_path / "s", config={"llm": {"api_key": "sk-leak", "model": "m"}}, gpu={}, versions={})
    for f in s.path.rglob("*"):
        if f.is_file():
            assert "sk-leak" not in f.read_text()


def test_refuses_existing_session(tmp_path):
    make(tmp_path)
    with pytest.raises(SessionError, match="already holds a session"):
        make(tmp_path)


def test_append_kernels_rewards_roundtrip(tmp_path):
    s = make(tmp_path)
    sha = s.put_kernel("int x;\n")
    assert sha == sha256_text("int x;\n") and s.put_kernel("int x;\n") == sha
    e = s.append("candidate", track="t", step=1, sha=sha, parent=None)
    assert e["seq"] == 1 and isinstance(e["time"], float)
    s.append_reward({"track": "t", "reward": 1.5})
    s2 = Session.open(s.path)
    assert [x["type"] for x in s2.events] == ["session_started", "candidate"]
    assert s2.get_kernel(sha) == "int x;\n"
    assert s2.rewards()[0]["reward"] == 1.5
    assert s2.problems == []
    assert s2.config["llm"]["model"] == "m"
    assert [x["seq"] for x in s2.iter_events({"candidate"})] == [1]
    assert [x["seq"] for x in s2.replay()] == [0, 1]


def test_torn_last_line_is_ignored_and_trimmed(tmp_path):
    s = make(tmp_path)
    s.append("hint", track=None, text="a")
    with open(s.path / "events.jsonl", "a") as f:
        f.write('{"seq": 2, "time": 1.0, "type": "hi')   # a write cut by kill -9
    with open(s.path / "rewards.jsonl", "a") as f:
        f.write('{"track": ')
    s2 = Session.open(s.path)
    assert len(s2.events) == 2
    assert any("torn" in p for p in s2.problems)
    e = s2.append("hint", track=None, text="b")
    assert e["seq"] == 2
    lines = (s.path / "events.jsonl").read_text().splitlines()
    assert [json.loads(x)["seq"] for x in lines] == [0, 1, 2]
    assert Session.open(s.path).problems == []


def test_corrupt_middle_line_is_an_error(tmp_path):
    s = make(tmp_path)
    s.append("hint", track=None, text="a")
    p = s.path / "events.jsonl"
    lines = p.read_text().splitlines()
    p.write_text(lines[0] + "\n" + "garbage\n" + lines[1] + "\n")
    with pytest.raises(SessionError, match="corrupted"):
        Session.open(s.path)


def test_missing_kernel_reported(tmp_path):
    s = make(tmp_path)
    sha = s.put_kernel("k\n")
    s.append("candidate", track="t", step=1, sha=sha)
    (s.path / "kernels" / f"{sha}.cu").unlink()
    s2 = Session.open(s.path)
    assert any("missing" in p and sha[:12] in p for p in s2.problems)
    with pytest.raises(SessionError, match="missing"):
        s2.get_kernel(sha)


def test_not_a_session(tmp_path):
    with pytest.raises(SessionError, match="not a session folder"):
        Session.open(tmp_path)


def test_batched_writes_every_line_at_once_and_fsyncs_once_at_the_end(tmp_path, monkeypatch):
    import os as _os

    s = Session.create(tmp_path / "s", config={}, gpu={}, versions={})
    synced: list[int] = []
    real = _os.fsync
    monkeypatch.setattr("l2tui.session.os.fsync", lambda fd: (synced.append(fd), real(fd))[1])
    with s.batched():
        with s.batched():                       # nested: only the outermost one syncs
            for i in range(20):
                s.append("note", text=f"line {i}")
                s.append_reward({"track": "t", "reward": float(i)})
        # written and flushed already: another reader sees every line before the sync
        assert len(Session.open(s.path).events) == len(s.events)
        assert synced == []
    assert len(synced) == 2                     # events.jsonl and rewards.jsonl, once each
    s.append("note", text="outside")           # outside a batch: one fsync per line again
    assert len(synced) == 3
    back = Session.open(s.path)
    assert [e.get("text") for e in back.events[-21:]] == [f"line {i}" for i in range(20)] + ["outside"]
    assert len(back.rewards()) == 20
