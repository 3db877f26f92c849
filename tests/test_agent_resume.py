"""Headless runs as real subprocesses: kill -9 mid-run, resume, the session stays consistent;
and no GPU means a one-line error (unless --recorded)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from l2tui.session import Session
from tests.openai_server import Reply

ROOT = Path(__file__).resolve().parent.parent
SECRET = "sk-l2tui-resume-SECRET-99e1"
ENV = "L2TUI_TEST_API_KEY"


def write_config(path: Path, scenarios, base_url: str, **loop) -> None:
    import tomli_w

    doc = scenarios.scenario_config(base_url, api_key_env=ENV, **loop)
    doc["llm"]["timeout_s"] = 10.0
    path.write_bytes(tomli_w.dumps(doc).encode())


def env_for(tmp_path: Path, cache: Path) -> dict:
    env = dict(os.environ)
    env[ENV] = SECRET
    env["L2TUI_CACHE_DIR"] = str(cache)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def cmd(session: Path, scenarios, *extra: str) -> list[str]:
    return [sys.executable, "-m", "l2tui", "run", "--headless", "--policy", "llm", "--session", str(session),
            "--recorded", str(scenarios.RECORDINGS), *extra]


@pytest.mark.parametrize("kill_at", [" step  0 compiled", " step  3 "])
def test_kill_9_then_resume(tmp_path, scenarios, scripted_server, agent_cache, kill_at):
    scripted_server.defaults["planner"] = scenarios.PLAN
    # slow, streamed coder replies so the kill lands mid-run
    scripted_server.defaults["coder"] = Reply(content=scenarios.GOOD_BK, chunk_chars=8, chunk_delay_s=0.03)
    write_config(tmp_path / "l2tui.toml", scenarios, scripted_server.base_url, max_steps=6)
    session = tmp_path / "sess"
    env = env_for(tmp_path, agent_cache)
    p = subprocess.Popen(cmd(session, scenarios, "--shapes", scenarios.SHAPE_A), cwd=tmp_path, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    deadline = time.monotonic() + 240
    try:
        for line in p.stdout:  # type: ignore[union-attr]
            lines.append(line)
            if kill_at in line:
                break
            assert time.monotonic() < deadline, "".join(lines)
        else:
            pytest.fail("the run ended before it could be killed:\n" + "".join(lines))
        os.kill(p.pid, signal.SIGKILL)
    finally:
        p.wait(30)
    assert p.returncode == -signal.SIGKILL

    before = Session.open(session)
    assert not [e for e in before.events if e["type"] in ("track_done", "session_ended")]
    steps_before = max(e.get("step", 0) for e in before.events if isinstance(e.get("step"), int))

    r = subprocess.run(cmd(session, scenarios, "--resume"), cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "resumed the session" in r.stdout and "512x512x512-f32" in r.stdout

    s = Session.open(session)
    assert [p for p in s.problems if "torn" not in p] == []
    ev = s.events
    assert [e["seq"] for e in ev] == list(range(len(ev)))
    resumed = [e for e in ev if e["type"] == "session_resumed"]
    assert len(resumed) == 1 and resumed[0]["from_seq"] <= len(before.events)
    # one track, finished exactly once, after max_steps refinement steps counted across both runs
    assert len([e for e in ev if e["type"] == "track_added"]) == 1
    done = [e for e in ev if e["type"] == "track_done"]
    assert len(done) == 1 and done[0]["reason"] == "max_steps (6)"
    cps = [e["steps_done"] for e in ev if e["type"] == "checkpoint"]
    assert cps == list(range(1, 7))
    # a seed whose evaluation finished is not redone (one killed mid-evaluation is); new steps get new numbers
    seeds = [e for e in ev if e["type"] == "candidate" and e["origin"] == "seed"]
    seed_done = any(e["type"] == "best" for e in before.events)
    assert len(seeds) == (1 if seed_done else 2) and len({e["sha"] for e in seeds}) == 1
    new_steps = [e["step"] for e in ev[resumed[0]["seq"]:] if e["type"] == "stage"]
    assert min(new_steps) > steps_before - 1
    # delayed profiling (profile_after = 3) triggered exactly once across both runs, and stayed on
    en = [e for e in ev if e["type"] == "profiling_enabled"]
    assert len(en) == 1 and en[0]["reason"] == "after 3 steps"
    assert [e["profiling_enabled"] for e in ev if e["type"] == "checkpoint"] == [False] * 3 + [True] * 3
    # every kernel an event or a reward row names is stored
    for e in ev:
        if e["type"] in ("candidate", "best") or (e["type"] == "reward" and e.get("sha")):
            assert s.has_kernel(e["sha"]), e
    for row in s.rewards():
        for k in ("parent_sha", "child_sha"):
            assert row[k] is None or s.has_kernel(row[k])
    # the best of the resumed run is the best of all ok candidates seen
    bests = [e for e in ev if e["type"] == "best"]
    assert done[0]["best_sha"] == bests[-1]["sha"]
    for f in session.rglob("*"):
        if f.is_file():
            assert SECRET not in f.read_text(errors="replace")


def test_no_gpu_is_a_one_line_error(tmp_path, scenarios):
    from harness.gpuinfo import gpu_present

    if gpu_present():
        pytest.skip("this machine has a GPU")
    env = env_for(tmp_path, tmp_path / "cache")
    r = subprocess.run([sys.executable, "-m", "l2tui", "run", "--headless", "--shapes", "512x512x512",
                        "--session", str(tmp_path / "s")], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("l2tui: error: no NVIDIA GPU found"), r.stderr
    assert not (tmp_path / "s").exists()


def test_headless_usage_errors(tmp_path, scenarios):
    env = env_for(tmp_path, tmp_path / "cache")
    r = subprocess.run([sys.executable, "-m", "l2tui", "run", "--headless", "--recorded", str(scenarios.RECORDINGS),
                        "--session", str(tmp_path / "s")], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and "no shapes" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    (tmp_path / "l2tui.toml").write_text("[loop]\nmax_stepz = 1\n")
    r = subprocess.run(cmd(tmp_path / "s", scenarios, "--shapes", "512x512x512"), cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "unknown key [loop] max_stepz" in r.stderr and "l2tui.toml" in r.stderr


def test_llm_without_key_or_endpoint_is_a_one_line_error(tmp_path, scenarios):
    env = env_for(tmp_path, tmp_path / "cache")
    env.pop("OPENAI_API_KEY", None)
    env["L2TUI_CONFIG_DIR"] = str(tmp_path / "nocfg")
    r = subprocess.run(cmd(tmp_path / "s", scenarios, "--shapes", "512x512x512"), cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.strip() == (
        "l2tui: error: no API key: export $OPENAI_API_KEY, or point [llm] base_url at your endpoint "
        "(or use --policy search)")
    assert not (tmp_path / "s").exists()
