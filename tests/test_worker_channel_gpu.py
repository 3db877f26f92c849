"""GPU (pytest -m gpu): the channel attack of issue 51 through the product's own commands.

The attacker (tests/channel_attack.py ``first_call_source``) is a correct GEMM whose first call
writes, before computing, a frame of its own to every descriptor from 3 to 9 through the bytes of
``syscall`` in inline asm; it passes the source policy. Each test runs it beside an honest
candidate with ``L2TUI_SANDBOX=require`` and an API key in the environment, and checks that the
frame ran nothing (no marker), that the attacker alone is charged ``crashed`` in one line naming
it, that the honest candidate passes, and that the key appears nowhere.

Run on a GPU box: ``pytest -m gpu tests/test_worker_channel_gpu.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import channel_attack as attack
from harness import sandbox
from harness import source_policy as sp
from harness.testkernels import source as kernel_source
from l2tui.session import Session

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not sandbox.probe().works, reason=f"bwrap does not work: {sandbox.probe().detail}")]

ROOT = Path(__file__).resolve().parent.parent
SHAPE = "256x256x256"
KEY_ENV = "L2TUI_TEST_API_KEY"
KEY = "sk-l2tui-channel-SECRET-5e17"


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"L2TUI_SANDBOX": "require", KEY_ENV: KEY, "OPENAI_API_KEY": KEY,
                "L2TUI_CACHE_DIR": str(tmp_path / "cache"), "PYTHONUNBUFFERED": "1",
                "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")})
    return env


def _everything_under(path: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in path.rglob("*") if p.is_file() and p.stat().st_size < 50 << 20)


@pytest.mark.parametrize("kind", ["pickle", "json"])
@pytest.mark.parametrize("command", [["l2tui"], ["harness"]])
def test_the_attacker_through_bench_is_contained_and_the_honest_kernel_passes(tmp_path, kind, command):
    marker = tmp_path / "outside" / "marker"
    marker.parent.mkdir()
    evil_src = attack.first_call_source(attack.frames_for(kind, marker))
    assert sp.violations(evil_src) == []                 # the policy lets it through: the channel must hold
    (tmp_path / "evil").mkdir()
    (tmp_path / "honest").mkdir()
    stem = SHAPE.replace("x", "_")
    (tmp_path / "evil" / f"{stem}.cu").write_text(evil_src)
    (tmp_path / "honest" / f"{stem}.cu").write_text(kernel_source("testgood_simple"))
    out = tmp_path / "bench.json"
    prog = [sys.executable, "-m", "l2tui" if command == ["l2tui"] else "harness", "bench"]
    r = subprocess.run(prog + ["--kernels", str(tmp_path / "evil"), "--label", "evil", "--kernels",
                               str(tmp_path / "honest"), "--label", "honest", "--shapes", SHAPE, "--baselines", "cublas",
                               "--out", str(out)],
                       cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert not marker.exists(), "the worker's frame ran code in the bench process"
    row = json.loads(out.read_text())["rows"][0]
    assert row["status"]["honest"] == "ok", row["checks"]["honest"]
    assert row["status"]["evil"] == "crashed", row["checks"]["evil"]
    detail = row["checks"]["evil"]["detail"]
    # the frame reaches the answer pipe (fd 3) before anything else the attacker wrote could break
    assert "\n" not in detail and "while evaluating evil" in detail, detail
    assert ("malformed answer" if kind == "pickle" else "answered out of turn") in detail, detail
    assert KEY not in r.stdout + r.stderr + out.read_text()


def test_the_attacker_as_an_llm_rewrite_is_contained_and_the_seed_passes(tmp_path, scenarios, scripted_server):
    import tomli_w

    marker = tmp_path / "outside" / "marker"
    marker.parent.mkdir()
    evil_src = attack.first_call_source(attack.frames_for("pickle", marker))
    scripted_server.add("REWRITE\nStart again from a simpler kernel.", role="planner")
    scripted_server.add("```cuda\n" + evil_src + "```", role="coder")
    doc = scenarios.scenario_config(scripted_server.base_url, api_key_env=KEY_ENV, max_steps=1)
    (tmp_path / "l2tui.toml").write_bytes(tomli_w.dumps(doc).encode())
    session = tmp_path / "sess"
    r = subprocess.run([sys.executable, "-m", "l2tui", "run", "--headless", "--policy", "llm", "--shapes", SHAPE,
                        "--session", str(session)],
                       cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert not marker.exists(), "the worker's frame ran code in l2tui"
    s = Session.open(session)
    checked = {e["step"]: e for e in s.events if e["type"] == "checked"}
    assert checked[0]["status"] == "ok", checked[0]                    # the honest seed
    cand = [e for e in s.events if e["type"] == "candidate" and e.get("step") == 1]
    assert cand and cand[0]["origin"] == "rewrite" and s.get_kernel(cand[0]["sha"]) == evil_src
    assert checked[1]["status"] == "crashed", checked[1]
    assert "malformed answer while evaluating" in checked[1]["detail"] and "\n" not in checked[1]["detail"]
    assert KEY not in r.stdout + r.stderr + _everything_under(session)
