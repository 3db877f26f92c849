"""The agent loop end to end: a real scripted HTTP server, real nvcc builds, replayed GPU results.

GPU stages (check, time, profile) replay Evaluation dicts recorded on the H200
by tools/record_evaluations.py (tests/fixtures/recorded/evaluations.json);
compiles are real.  Kernels the recording does not cover come back as
``not_recorded`` and these tests fail loudly on that instead of inventing
numbers.
"""

from __future__ import annotations

import json

import pytest

from harness.shapes import parse_shape
from l2tui.agent.loop import AgentLoop, LoopConfig
from l2tui.agent.policies.llm import LLMPolicy
from l2tui.agent.recorded import NOT_RECORDED, RecordedEvaluator
from l2tui.config import parse_config
from l2tui.session import Session

pytestmark = pytest.mark.compile   # runs nvcc (tools/test.sh --fast leaves it out)

SECRET = "sk-l2tui-test-SECRET-4d2c81"
ENV = "L2TUI_TEST_API_KEY"


def by_type(session, typ, **match):
    return [e for e in session.events if e["type"] == typ and all(e.get(k) == v for k, v in match.items())]


def assert_no_secret(path):
    for f in path.rglob("*"):
        if f.is_file():
            assert SECRET not in f.read_text(errors="replace"), f"API key leaked into {f}"


@pytest.fixture
def recorded(scenarios):
    return RecordedEvaluator(scenarios.RECORDINGS)


@pytest.fixture(scope="module")
def main_run(scenarios, tmp_path_factory, agent_cache_dir):
    """One run of the main scenario on shape A (shared by the assertions below)."""
    from tests.openai_server import ScriptedServer

    tmp = tmp_path_factory.mktemp("main")
    with pytest.MonkeyPatch.context() as mp:   # module scope: the fixture's own monkeypatch
        mp.setenv(ENV, SECRET)
        mp.setenv("L2TUI_CACHE_DIR", str(agent_cache_dir))
        ev = RecordedEvaluator(scenarios.RECORDINGS)
        with ScriptedServer() as srv:
            session = scenarios.run_main_scenario(tmp / "session", ev, srv, [scenarios.SHAPE_A], api_key_env=ENV)
            requests = list(srv.requests)
    return Session.open(session.path), ev, requests


def test_recordings_cover_the_scenario(main_run):
    s, ev, _ = main_run
    statuses = [e["status"] for e in by_type(s, "checked")]
    assert NOT_RECORDED not in statuses, (
        f"recordings are stale for {ev.misses}: run tools/record_evaluations.py on the GPU (see the README, 'The agent loop')")
    assert statuses and all(x == "ok" for x in statuses)


def test_events_are_dense_and_kernels_stored(main_run):
    s, _, _ = main_run
    assert [e["seq"] for e in s.events] == list(range(len(s.events)))
    assert s.problems == []
    for e in by_type(s, "candidate"):
        assert s.has_kernel(e["sha"])
    done = by_type(s, "track_done")
    assert len(done) == 1 and done[0]["reason"].startswith("max_steps")
    assert s.events[-1]["type"] == "session_ended"


def test_step1_rate_limit_then_good_patch_fuzzy(main_run):
    s, _, requests = main_run
    retry = by_type(s, "llm_retry", step=1, role="planner")
    assert retry and "429" in retry[0]["error"]
    assert by_type(s, "patch", step=1, role="coder")[0]["ok"] is True
    cand = by_type(s, "candidate", step=1)[0]
    assert cand["origin"] == "patch" and "+#define BK 32" in cand["diff"]
    assert by_type(s, "compiled", step=1)[0]["ok"] is True
    assert by_type(s, "reward", step=1)[0]["kind"] == "ok"
    assert any(r["role"] == "planner" for r in requests) and any(r["role"] == "coder" for r in requests)
    assert by_type(s, "llm_delta", step=1, role="coder")  # streamed tokens surfaced


def test_step2_malformed_reply_is_no_patch(main_run):
    s, _, _ = main_run
    r = by_type(s, "reward", step=2)
    assert [x["kind"] for x in r] == ["no_patch"]
    assert not by_type(s, "candidate", step=2)


def test_step3_patch_that_does_not_apply_feeds_back_nearest_lines(main_run):
    s, _, _ = main_run
    p = by_type(s, "patch", step=3)[0]
    assert p["ok"] is False and "nearest lines" in p["error"] and "#define BK" in p["error"]
    assert [x["kind"] for x in by_type(s, "reward", step=3)] == ["patch_failed"]
    # the feedback reaches the next prompt
    rows = [r for r in s.rewards() if r["step"] == 4 and r["role"] == "coder"]
    assert "could not be used" in rows[0]["messages"][1]["content"]


def test_step4_compile_error_debug_rejects_tiling_removal_then_fixes(main_run):
    s, _, _ = main_run
    comp = by_type(s, "compiled", step=4)
    assert comp[0]["ok"] is False and any("alpha" in e["message"] for e in comp[0]["errors"])
    patches = by_type(s, "patch", step=4, role="debugger")
    assert patches[0]["ok"] is False and "shrinks a tile size" in patches[0]["error"]
    assert patches[1]["ok"] is True
    dbg = by_type(s, "candidate", step=4, origin="debug")
    assert len(dbg) == 1 and dbg[0]["parent"] == by_type(s, "candidate", step=4, origin="patch")[0]["sha"]
    assert comp[1]["ok"] is True
    kinds = [(x["kind"], x["role"]) for x in by_type(s, "reward", step=4)]
    assert kinds == [("compile_error", "coder"), ("patch_failed", "debugger"), ("ok", "debugger")]
    rows = [r for r in s.rewards() if r["step"] == 4 and r["role"] == "debugger"]
    assert "identifier \"alpha\" is undefined" in rows[0]["messages"][1]["content"]
    assert "shrinks a tile size" in rows[1]["messages"][1]["content"]  # rejection reason fed back


def test_step5_timeout_then_patch_with_compiler_flags(main_run):
    s, _, _ = main_run
    assert "timed out" in by_type(s, "llm_retry", step=5, role="coder")[0]["error"]
    cand = by_type(s, "candidate", step=5)[0]
    assert cand["flags"] == ["-maxrregcount=128"]           # -fake-flag dropped by the compiler role
    assert any("-fake-flag" in e["text"] for e in by_type(s, "plan", step=5, role="compiler"))


def test_delayed_profiling(main_run):
    s, _, _ = main_run
    en = by_type(s, "profiling_enabled")
    assert len(en) == 1 and en[0]["reason"] == "after 3 steps" and en[0]["step"] == 3
    prof = by_type(s, "profiled")
    assert prof and prof[0]["in_context"] is True and prof[0]["seq"] > en[0]["seq"]
    for r in s.rewards():
        if not r["messages"]:
            continue
        text = json.dumps(r["messages"])
        if r["step"] <= 3:
            assert "Bottleneck verdict" not in text and "not available yet" in text
        elif r["role"] == "coder":
            assert "Bottleneck verdict: " + str(prof[0]["verdict"]) in text


def test_reward_rows_follow_the_contract(main_run):
    s, _, _ = main_run
    rows = s.rewards()
    keys = {"seq", "time", "track", "shape", "acc", "step", "role", "policy", "model", "messages", "completion",
            "reward", "parts", "kind", "parent_sha", "child_sha", "usage", "baseline", "speedup"}
    for r in rows:
        assert keys <= set(r), keys - set(r)
        assert r["shape"] == [512, 512, 512] and r["policy"] == "llm" and r["baseline"] == "cublas"
        assert set(r["usage"]) == {"prompt_tokens", "completion_tokens"}
    coder = [r for r in rows if r["role"] == "coder" and r["step"] == 1][0]
    assert coder["model"] == "scripted-model" and coder["completion"].startswith("The plan needs one knob")
    assert [m["role"] for m in coder["messages"]] == ["system", "user", "assistant", "user"]
    assert coder["usage"]["prompt_tokens"] > 0
    ok = [r for r in rows if r["kind"] == "ok"]
    for r in ok:
        assert r["reward"] == pytest.approx(r["parts"]["speedup"] - r["parts"]["error_penalty"] - r["parts"]["length_penalty"])
    fails = {r["kind"]: r["reward"] for r in rows if r["kind"] != "ok"}
    cfg = parse_config({})
    for kind, value in fails.items():
        assert value == cfg.rewards[kind]
    # reward events mirror rows one to one
    assert len(by_type(s, "reward")) == len(rows)


def test_api_key_never_reaches_the_session(main_run):
    s, _, requests = main_run
    assert any(r["headers"].get("authorization") == f"Bearer {SECRET}" for r in requests)  # it was used
    assert_no_secret(s.path)


def _loop(tmp_path, scenarios, server, evaluator, **loop):
    cfg = parse_config(scenarios.scenario_config(server.base_url, api_key_env=ENV, **loop))
    session = Session.create(tmp_path / "s", config=cfg.snapshot(), gpu={}, versions={})
    return AgentLoop(session, LoopConfig.from_config(cfg), policy=LLMPolicy.from_config(cfg), evaluator=evaluator), session


def _closed_port_url() -> str:
    """The URL of a port on 127.0.0.1 that nothing listens on (bound, then released)."""
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}/v1"


def test_an_endpoint_that_never_answered_pauses_the_llm_track_once(tmp_path, scenarios, recorded, agent_cache,
                                                                   monkeypatch):
    """A refused first call is a setup mistake, not the model's: after its retries the loop says so
    once and pauses the track; no step is charged a no_patch reward, and resuming tries again."""
    monkeypatch.setenv(ENV, SECRET)

    class Dead:
        base_url = _closed_port_url()

    loop, s = _loop(tmp_path, scenarios, Dead, recorded, max_steps=2)
    loop.policy.client.max_retries, loop.policy.client.backoff_s = 1, 0.0
    errors: list[dict] = []

    def stop_at_second_error(ev: dict) -> None:
        if ev["type"] == "error":
            errors.append(ev)
            if len(errors) == 1:
                loop.send({"name": "resume", "track": None})   # the user resumes: one more try
            else:
                loop.request_stop()

    loop.subscribe(stop_at_second_error)
    tid = loop.add_track(parse_shape(scenarios.SHAPE_A))
    loop.run()
    assert [e["kind"] for e in by_type(s, "reward")] == ["ok"]          # the configured seed only
    assert len(errors) == 2 and all("\n" not in e["message"] for e in errors)
    assert "cannot reach" in errors[0]["message"] and "paused" in errors[0]["message"]
    calls = by_type(s, "llm_call")
    assert len(calls) == 2 and all(not c["ok"] and c["attempts"] == 2 for c in calls)
    assert {c["step"] for c in calls} == {1}                          # the step was not used up
    states = [e["state"] for e in by_type(s, "track_state", track=tid)]
    assert states.count("paused") == 2 and states[-1] == "stopped"
    assert loop.endpoint_error and "cannot reach" in loop.endpoint_error
    assert not by_type(s, "track_done")


def test_commands_hint_edit_and_not_recorded(tmp_path, scenarios, recorded, agent_cache, scripted_server, monkeypatch):
    monkeypatch.setenv(ENV, SECRET)
    scripted_server.defaults["planner"] = scenarios.PLAN
    scripted_server.defaults["coder"] = "no code today"
    loop, s = _loop(tmp_path, scenarios, scripted_server, recorded, max_steps=2)
    events = []
    loop.subscribe(events.append)
    tid = loop.add_track(parse_shape(scenarios.SHAPE_A))
    edited = scenarios.SEED.read_text().replace("#define BN 64", "#define BN 32")
    loop.send({"name": "hint", "track": None, "text": "try a 128-wide tile"})
    loop.send({"name": "edit", "track": tid, "source": edited})
    loop.run()
    assert events == s.events[1:]  # subscribers see every event after session_started, in order
    assert [c["name"] for c in by_type(s, "command")] == ["hint", "edit"]
    human = by_type(s, "candidate", origin="human")
    assert len(human) == 1
    # the edited kernel compiles for real but was never timed on a GPU: an honest "not recorded"
    chk = by_type(s, "checked", sha=human[0]["sha"])[0]
    assert chk["status"] == NOT_RECORDED and chk["ok"] is False
    assert by_type(s, "reward", sha=human[0]["sha"])[0]["kind"] == NOT_RECORDED
    assert not by_type(s, "best", sha=human[0]["sha"])
    planner_rows = [r for r in s.rewards() if r["role"] == "coder"]
    assert planner_rows and "try a 128-wide tile" in planner_rows[0]["messages"][1]["content"]


def test_pause_step_resume_and_stop(tmp_path, scenarios, recorded, agent_cache, scripted_server, monkeypatch):
    import threading

    monkeypatch.setenv(ENV, SECRET)
    scripted_server.defaults["*"] = "nothing"
    loop, s = _loop(tmp_path, scenarios, scripted_server, recorded, max_steps=50)
    tid = loop.add_track(parse_shape(scenarios.SHAPE_A))
    seen = threading.Event()

    def watch(e):
        if e["type"] == "reward" and e["step"] >= 1:
            seen.set()

    loop.subscribe(watch)
    loop.send({"name": "pause", "track": tid})
    th = threading.Thread(target=loop.run, daemon=True)
    th.start()
    assert not seen.wait(0.5)                      # paused: no step happens
    loop.send({"name": "step", "track": tid})       # one stage, then paused again
    loop.send({"name": "resume", "track": tid})
    assert seen.wait(30)
    loop.send({"name": "stop", "track": tid})
    th.join(30)
    assert not th.is_alive()
    states = [e["state"] for e in by_type(s, "track_state", track=tid)]
    assert "paused" in states and states[-1] == "stopped"
    assert by_type(s, "track_done")[0]["reason"] == "stopped by user"


def test_token_budget_ends_the_track(tmp_path, scenarios, recorded, agent_cache, scripted_server, monkeypatch):
    monkeypatch.setenv(ENV, SECRET)
    scripted_server.defaults["*"] = "nothing useful"
    loop, s = _loop(tmp_path, scenarios, scripted_server, recorded, max_steps=50, token_budget=1000)
    loop.add_track(parse_shape(scenarios.SHAPE_A))
    loop.run()
    done = by_type(s, "track_done")
    assert done[0]["reason"] == "token_budget (1000)"
    assert len(by_type(s, "checkpoint")) == 1    # the first step used more than the budget


def test_profiling_triggers_when_structure_is_stable(tmp_path, scenarios, recorded, agent_cache, scripted_server, monkeypatch):
    monkeypatch.setenv(ENV, SECRET)
    scripted_server.defaults["*"] = "nothing useful"     # the best kernel never changes
    loop, s = _loop(tmp_path, scenarios, scripted_server, recorded, max_steps=4, profile_after=100, stable_steps=2)
    loop.add_track(parse_shape(scenarios.SHAPE_A))
    loop.run()
    en = by_type(s, "profiling_enabled")
    assert len(en) == 1 and en[0]["reason"] == "structure stable for 2 steps" and en[0]["step"] == 3
    assert [e["stable"] for e in by_type(s, "checkpoint")] == [0, 1, 2, 3]


def test_request_stop_then_run_again_continues(tmp_path, scenarios, recorded, agent_cache, scripted_server, monkeypatch):
    monkeypatch.setenv(ENV, SECRET)
    scripted_server.defaults["*"] = "nothing useful"
    loop, s = _loop(tmp_path, scenarios, scripted_server, recorded, max_steps=3)
    loop.add_track(parse_shape(scenarios.SHAPE_A))

    def stop_after_first_step(e):
        if e["type"] == "checkpoint" and e["steps_done"] == 1:
            loop.request_stop()

    loop.subscribe(stop_after_first_step)
    loop.run()
    assert [e["reason"] for e in by_type(s, "session_ended")] == ["stopped"]
    assert not by_type(s, "track_done")
    loop.run()
    assert by_type(s, "track_done")[0]["reason"] == "max_steps (3)"
    assert [e["steps_done"] for e in by_type(s, "checkpoint")] == [1, 2, 3]


def test_llm_writes_the_first_kernel_when_no_seed_is_configured(tmp_path, scenarios, recorded, agent_cache,
                                                                scripted_server, monkeypatch):
    monkeypatch.setenv(ENV, SECRET)
    scripted_server.defaults["planner"] = scenarios.PLAN
    scripted_server.add("Here is a first kernel:\n```cuda\n" + scenarios.SEED.read_text() + "```\n", role="coder")
    loop, s = _loop(tmp_path, scenarios, scripted_server, recorded, max_steps=1, seed="")
    loop.add_track(parse_shape(scenarios.SHAPE_A))
    loop.run()
    seed = by_type(s, "candidate", step=0)[0]
    assert seed["origin"] == "seed" and s.get_kernel(seed["sha"]) == scenarios.SEED.read_text()
    row = [r for r in s.rewards() if r["step"] == 0][0]
    assert row["role"] == "coder" and "Write a first, correct" in row["messages"][1]["content"]
    assert by_type(s, "checked", step=0)[0]["status"] == "ok"   # the recorded seed


def test_unusable_first_generation_falls_back_to_the_reference_kernel(tmp_path, scenarios, recorded, agent_cache,
                                                                      scripted_server, monkeypatch):
    monkeypatch.setenv(ENV, SECRET)
    scripted_server.defaults["*"] = "I cannot write kernels."
    loop, s = _loop(tmp_path, scenarios, scripted_server, recorded, max_steps=1, seed="")
    loop.add_track(parse_shape(scenarios.SHAPE_A))
    loop.run()
    assert [r["kind"] for r in s.rewards() if r["step"] == 0][0] == "no_patch"
    assert any("starting from the reference kernel" in e["message"] for e in by_type(s, "error"))
    seed = by_type(s, "candidate", step=0)[0]
    assert "hgemm_naive" in s.get_kernel(seed["sha"])
    assert by_type(s, "best", sha=seed["sha"])   # anchors the track even without a recorded time


def test_planner_requested_rewrite(tmp_path, scenarios, recorded, agent_cache, scripted_server, monkeypatch):
    monkeypatch.setenv(ENV, SECRET)
    new = scenarios.SEED.read_text().replace("#define BK 16", "#define BK 32")
    scripted_server.add("REWRITE\nRestructure the k loop.", role="planner")
    scripted_server.add("```cuda\n" + new + "```", role="coder")
    loop, s = _loop(tmp_path, scenarios, scripted_server, recorded, max_steps=1)
    loop.add_track(parse_shape(scenarios.SHAPE_A))
    loop.run()
    cand = by_type(s, "candidate", step=1)[0]
    assert cand["origin"] == "rewrite" and s.get_kernel(cand["sha"]) == new
    row = [r for r in s.rewards() if r["step"] == 1][0]
    assert "complete kernel file in ONE fenced block" in row["messages"][-1]["content"]
    assert by_type(s, "checked", step=1)[0]["status"] == "ok"


def test_reject_and_accept_commands_move_the_best(tmp_path, scenarios, recorded, agent_cache, scripted_server, monkeypatch):
    monkeypatch.setenv(ENV, SECRET)
    scripted_server.defaults["planner"] = scenarios.PLAN
    scripted_server.add(scenarios.GOOD_BK, role="coder")
    loop, s = _loop(tmp_path, scenarios, scripted_server, recorded, max_steps=1)
    tid = loop.add_track(parse_shape(scenarios.SHAPE_A))
    loop.run()
    seed_sha = by_type(s, "candidate", step=0)[0]["sha"]
    cand_sha = by_type(s, "candidate", step=1)[0]["sha"]
    best = loop.tracks[tid].best_sha
    other = seed_sha if best == cand_sha else cand_sha
    loop.send({"name": "accept", "track": tid, "sha": other})
    loop.run()
    assert loop.tracks[tid].best_sha == other and by_type(s, "best")[-1]["sha"] == other
    loop.send({"name": "reject", "track": tid, "sha": other})
    loop.run()
    assert loop.tracks[tid].best_sha == best and by_type(s, "best")[-1]["sha"] == best
    decisions = [(d["action"], d["by"]) for d in by_type(s, "decision") if d["by"] == "user"]
    assert decisions == [("accept", "user"), ("reject", "user")]


def test_resume_with_a_larger_step_budget_continues_a_finished_track(tmp_path, scenarios, recorded, agent_cache,
                                                                      scripted_server, monkeypatch):
    """`l2tui run --resume --max-steps 4` after a run of 2 steps: the track that ended on its step
    budget goes on to 4; resumed with the same budget it stays done."""
    monkeypatch.setenv(ENV, SECRET)
    scripted_server.defaults["*"] = "nothing useful"
    loop, s = _loop(tmp_path, scenarios, scripted_server, recorded, max_steps=2)
    loop.add_track(parse_shape(scenarios.SHAPE_A))
    loop.run()
    assert [e["reason"] for e in by_type(s, "track_done")] == ["max_steps (2)"]

    def reopen(max_steps):
        cfg = parse_config(scenarios.scenario_config(scripted_server.base_url, api_key_env=ENV, max_steps=max_steps))
        session = Session.open(tmp_path / "s")
        lp = AgentLoop(session, LoopConfig.from_config(cfg), policy=LLMPolicy.from_config(cfg), evaluator=recorded)
        lp.run()
        return session

    same = reopen(2)
    assert [e["steps_done"] for e in by_type(same, "checkpoint")] == [1, 2]
    more = reopen(4)
    assert [e["steps_done"] for e in by_type(more, "checkpoint")] == [1, 2, 3, 4]
    assert [e["reason"] for e in by_type(more, "track_done")] == ["max_steps (2)", "max_steps (4)"]
    assert [e["seq"] for e in more.events] == list(range(len(more.events)))
