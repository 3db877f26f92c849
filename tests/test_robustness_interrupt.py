"""A compile stopped from outside is not the kernel's fault.

The run's Ctrl-C / SIGTERM path kills every compiler it started
(:func:`harness.build.kill_all_builds`); the agent loop must then stop without a
``compile_error`` step or reward, leaving the track resumable.  Real nvcc, killed while it
runs; the GPU stages replay recorded evaluations and are never reached.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import pytest

from harness import build as hbuild
from harness.shapes import Shape
from l2tui.agent.llm_client import LLMClient
from l2tui.agent.loop import AgentLoop, LoopConfig
from l2tui.agent.policies.llm import LLMPolicy
from l2tui.agent.recorded import RecordedEvaluator
from l2tui.session import Session

pytestmark = pytest.mark.compile   # runs nvcc (tools/test.sh --fast leaves it out)

ROOT = Path(__file__).resolve().parent.parent
SEED = ROOT / "tests" / "fixtures" / "recorded" / "seed_tiled.cu"
RECORDED = ROOT / "tests" / "fixtures" / "recorded" / "evaluations.json"


def test_an_interrupted_compile_is_never_a_compile_error(tmp_path, monkeypatch):
    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path / "cache"))   # cold: nvcc really runs
    session = Session.create(tmp_path / "s", config={}, gpu={}, versions={})
    policy = LLMPolicy(LLMClient(base_url="http://127.0.0.1:9/v1", model="never-called"))
    loop = AgentLoop(session, LoopConfig(max_steps=1, seed=str(SEED), arch="sm_90a"), policy=policy,
                     evaluator=RecordedEvaluator(RECORDED))
    loop.add_track(Shape(64, 64, 64), "f32")
    killed: list[int] = []

    def killer() -> None:   # what the command line's signal handler does, once a compiler is running
        for _ in range(60000):
            if hbuild._LIVE:
                killed.append(hbuild.kill_all_builds())
                return
            time.sleep(0.01)

    th = threading.Thread(target=killer, daemon=True)
    th.start()
    loop.run()
    th.join(timeout=60)
    assert killed and killed[0] >= 1
    events = Session.open(session.path).events
    types = [e["type"] for e in events]
    assert "compiled" not in types and "reward" not in types and "track_done" not in types, types
    assert session.rewards() == [] and (session.path / "rewards.jsonl").read_text() == ""
    assert any(e["type"] == "stage" and e.get("stage") == "compile" and e.get("detail") == "interrupted"
               for e in events)
    assert any(e["type"] == "error" and "interrupted" in e["message"] for e in events)
    states = [e["state"] for e in events if e["type"] == "track_state"]
    assert states[-1] == "stopped"                 # resumable, not failed
    assert events[-1]["type"] == "session_ended" and events[-1]["reason"] == "stopped"


def test_ctrl_c_during_a_sweeps_builds_kills_its_compilers_and_caches_nothing(tmp_path, monkeypatch):
    """A sweep builds while its tracks wait (``l2tui.agent.needed_builds``): Ctrl-C then stops the
    queued builds and kills the running compilers, instead of letting them finish. Real nvcc (a
    CUTLASS configuration, tens of seconds), interrupted as soon as it runs; nothing is cached."""
    import _thread

    from l2tui.agent.sweep import Sweep, SweepConfig
    from l2tui.executors.local import LocalExecutor

    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path / "cache"))   # cold: nvcc really runs
    cfg = SweepConfig(shapes=[Shape(4096, 4096, 4096)], steps=0, seeds=1, pick_kinds=False, arch="sm_90a",
                      families=["sm90_cutlass"])
    from tests.sweep_support import recorded_file

    # a recording of the shape (a replaying sweep picks what the recording holds)
    rec = recorded_file(tmp_path, [Shape(4096, 4096, 4096)])
    ex = LocalExecutor(RecordedEvaluator(rec, build=False), jobs=2, gpu={"uuid": "GPU-x", "name": "H200"})
    sweep = Sweep(cfg, session=None, progress=lambda line: None, executor=ex)
    fired: list[int] = []

    def ctrl_c() -> None:   # once a compiler runs: what the terminal's Ctrl-C does to the main thread
        for _ in range(60000):
            if hbuild._LIVE:
                fired.append(len(hbuild._LIVE))
                _thread.interrupt_main()
                return
            time.sleep(0.01)

    # the terminal's Ctrl-C with Python's own SIGINT handler (an earlier test of the same process may
    # have left a command's graceful-stop handler installed, which would end the sweep quietly)
    old_handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    th = threading.Thread(target=ctrl_c, daemon=True)
    th.start()
    try:
        sweep.run()
    except KeyboardInterrupt:
        pass
    else:
        raise AssertionError("the sweep ended without seeing the interrupt")
    finally:
        signal.signal(signal.SIGINT, old_handler)
    th.join(timeout=60)
    assert fired and fired[0] >= 1
    assert not hbuild._LIVE                                            # no compiler left running
    assert not list((tmp_path / "cache").rglob("kernel.so"))           # killed, not finished and cached
    assert sweep.builds is not None and sweep.builds.stats()["compiled"] == 0
