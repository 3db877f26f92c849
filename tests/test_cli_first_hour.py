"""What a newcomer's first hour hit on the command line, each pinned by the real command.

A bad choice is one line; a recording without the asked shape is refused at once; an LLM
endpoint that refuses, rejects the key or never answers stops a headless run after the first
call's retries with one line and a non-zero exit; ``l2tui profile`` finds ncu before it builds.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from l2tui.cli import main
from tests.openai_server import Reply, ScriptedServer

ROOT = Path(__file__).resolve().parent.parent
DEMO_RECORDING = ROOT / "sessions" / "demo-h200" / "evaluations.json"
RECORDED_SHAPE = "128x128x128"   # a shape the demo recording holds


def _stderr_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]


@pytest.mark.parametrize("argv, names", [
    (["--policy", "bogus"], "--policy"),
    (["run", "--headless", "--policy", "bogus"], "--policy"),
    (["run", "--headless", "--acc", "bf16"], "--acc"),
    (["run", "--headless", "--mode", "fast"], "--mode"),
    (["sweep", "--policy", "llm"], "--policy"),
    (["profile", "--shape", "64x64x64"], "--kernel"),
    (["rl-data"], "required"),
    (["frobnicate"], "COMMAND"),
], ids=["app-policy", "run-policy", "run-acc", "run-mode", "sweep-policy", "profile-missing", "rl-data-missing",
        "unknown-command"])
def test_a_bad_argument_is_one_line_without_the_usage_block(argv: list[str], names: str,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    lines = _stderr_lines(capsys)
    assert len(lines) == 1, lines
    assert "usage:" not in lines[0] and names in lines[0] and "--help" in lines[0]
    assert lines[0].startswith("l2tui")


def test_help_still_prints_the_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["run", "--help"])
    assert e.value.code == 0 and "usage: l2tui run" in capsys.readouterr().out


def test_a_recording_without_the_shape_is_refused_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    session = tmp_path / "s"
    rc = main(["run", "--headless", "--policy", "search", "--recorded", str(DEMO_RECORDING),
               "--shapes", "4096x4096x4096", "--session", str(session)])
    captured = capsys.readouterr()
    lines = [ln for ln in captured.err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1, lines
    assert "has no evaluations for 4096x4096x4096 (f32)" in lines[0] and RECORDED_SHAPE in lines[0]
    assert "proposed nothing" not in captured.out and "seed generation failed" not in captured.out
    assert not session.exists()


def test_recorded_shapes_reads_only_well_formed_keys() -> None:
    from l2tui.compose import recorded_shapes

    records = {"ab:64x64x64:f32": {}, "cd:64x64x64:f16": {}, "garbage": {}, "a:b:c:d": {}}
    assert recorded_shapes(records) == {"64x64x64:f32", "64x64x64:f16"}


# ------------------------------------------------------------------ a misconfigured endpoint
def _closed_port_url() -> str:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}/v1"


def _llm_config(path: Path, base_url: str) -> Path:
    """Short timeouts and one retry, so that each failing call ends within seconds."""
    path.write_text(f'[llm]\nbase_url = "{base_url}"\nmodel = "m"\napi_key_env = "L2TUI_TEST_KEY"\n'
                    "timeout_s = 1.0\nmax_retries = 1\nbackoff_s = 0.01\n\n[loop]\nmax_steps = 20\n")
    return path


def _run_llm(tmp_path: Path, base_url: str) -> tuple[int, Path]:
    session = tmp_path / "s"
    rc = main(["run", "--headless", "--no-sandbox", "--policy", "llm", "--recorded", str(DEMO_RECORDING),
               "--shapes", RECORDED_SHAPE, "--session", str(session),
               "--config", str(_llm_config(tmp_path / "l2tui.toml", base_url))])
    return rc, session


def _assert_stopped_after_the_first_call(rc: int, session: Path, lines: list[str], why: str) -> None:
    import json

    errors = [ln for ln in lines if ln.startswith("l2tui: error:")]
    assert rc == 2 and len(errors) == 1, lines
    assert "LLM endpoint cannot be used" in errors[0] and why in errors[0] and "--resume" in errors[0]
    assert not any("Traceback" in ln for ln in lines)
    events = [json.loads(ln) for ln in (session / "events.jsonl").read_text().splitlines()]
    calls = [e for e in events if e["type"] == "llm_call"]
    assert len(calls) == 1 and not calls[0]["ok"]
    assert not [e for e in events if e["type"] in ("candidate", "reward", "track_done")]
    assert [e["state"] for e in events if e["type"] == "track_state"][-2:] == ["paused", "stopped"]


def test_a_refused_connection_stops_the_run_after_the_first_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("L2TUI_TEST_KEY", "sk-test-first-hour")
    rc, session = _run_llm(tmp_path, _closed_port_url())
    _assert_stopped_after_the_first_call(rc, session, _stderr_lines(capsys), "cannot reach")


def test_a_rejected_key_stops_the_run_after_the_first_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("L2TUI_TEST_KEY", "sk-test-first-hour")
    with ScriptedServer() as srv:
        srv.defaults["*"] = Reply(status=401)
        srv.defaults["coder"] = Reply(status=401)
        rc, session = _run_llm(tmp_path, srv.base_url)
        assert len(srv.requests) == 1   # 401 is not retried
    lines = _stderr_lines(capsys)
    _assert_stopped_after_the_first_call(rc, session, lines, "HTTP 401")
    assert not any("sk-test-first-hour" in ln for ln in lines)


def test_an_endpoint_that_never_answers_stops_the_run_after_the_first_call(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("L2TUI_TEST_KEY", "sk-test-first-hour")
    with ScriptedServer() as srv:
        silent = Reply(content="never sent", delay_s=30.0)
        srv.defaults["*"] = silent
        srv.defaults["coder"] = silent
        rc, session = _run_llm(tmp_path, srv.base_url)
        assert len(srv.requests) == 2   # the call and its one retry
    _assert_stopped_after_the_first_call(rc, session, _stderr_lines(capsys), "timed out")


def test_an_endpoint_that_answered_once_is_retried_as_before() -> None:
    """Only an endpoint that never answered is a setup mistake: a later failure (a server
    restarting) stays an ordinary failed call."""
    from l2tui.agent.llm_client import LLMClient

    with ScriptedServer() as srv:
        srv.add("first reply")
        srv.add(Reply(status=401))
        client = LLMClient(base_url=srv.base_url, model="m", api_key_env="L2TUI_NO_SUCH_KEY", timeout_s=5.0,
                           max_retries=0)
        assert client.chat([{"role": "user", "content": "hi"}]).ok
        later = client.chat([{"role": "user", "content": "hi"}])
    assert not later.ok and "HTTP 401" in (later.error or "") and not later.endpoint_unusable


# ------------------------------------------------------------------ profile checks its tools first
def test_profile_says_ncu_is_missing_before_building(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    kernel = tmp_path / "k.cu"
    kernel.write_text((ROOT / "harness" / "kernels" / "reference_naive.cu").read_text())
    cache = tmp_path / "cache"
    monkeypatch.setenv("L2TUI_CACHE_DIR", str(cache))
    monkeypatch.setenv("L2TUI_NCU", str(tmp_path / "no-ncu-here"))
    rc = main(["profile", "--shape", "64x64x64", "--kernel", str(kernel)])
    lines = _stderr_lines(capsys)
    assert rc == 2 and len(lines) == 1 and "ncu (Nsight Compute CLI) not found" in lines[0]
    assert not list(cache.rglob("*.so")) and not list(cache.rglob("*.cu"))   # nvcc never ran


def test_a_sweep_of_a_recording_without_the_shape_is_refused_once(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    session = tmp_path / "s"
    rc = main(["sweep", "--recorded", str(DEMO_RECORDING), "--shapes", "4096x4096x4096", "--steps", "0",
               "--session", str(session)])
    captured = capsys.readouterr()
    lines = [ln for ln in captured.err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1, (lines, captured.out)
    assert "has no evaluations for 4096x4096x4096 (f32)" in lines[0] and RECORDED_SHAPE in lines[0]
    assert "None" not in captured.out and not session.exists()


def test_the_app_on_a_recording_without_the_shape_is_refused_before_it_starts(tmp_path: Path) -> None:
    import argparse

    from l2tui.config import parse_config
    from l2tui.errors import UserError
    from l2tui.tui.launch import make_live_app

    session = tmp_path / "s"
    args = argparse.Namespace(session=str(session), resume=False, shapes=["4096x4096x4096"], policy="search",
                              app_recorded=str(DEMO_RECORDING), no_sandbox=False)
    with pytest.raises(UserError, match=r"has no evaluations for 4096x4096x4096 \(f32\)") as e:
        make_live_app(args, parse_config({}))
    assert RECORDED_SHAPE in str(e.value) and not session.exists()
    args.shapes = [RECORDED_SHAPE]
    app = make_live_app(args, parse_config({}))   # a recorded shape still opens the app
    app.ctx.session.close()
