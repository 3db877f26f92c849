"""GPU: a few shapes from a cold build cache, end to end through the product's commands
(run with ``pytest -m gpu``).

``l2tui sweep`` with ``--executor local`` and with ``--executor ray`` (one GPU actor, the builds
as Ray tasks on this machine's cores), each from an empty ``L2TUI_CACHE_DIR``, then
``l2tui run --headless --policy search`` on one shape: its seed comes from the pick (over the
whole catalog: about 20 CUTLASS builds in parallel from a cold cache, a few minutes). The wall
time and the nvcc/GPU time of each sweep are printed (not asserted: the record of the run says
what a cold sweep costs and what Ray's build spreading buys).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.gpu

# a latency-bound shape, an off-tile mid one and a bigger one
SHAPES = ("64x64x64", "1000x512x1032", "2048x2048x1024")
# the families that build in seconds: a cold cache costs a minute, not the CUTLASS catalog's many
# (its builds are the same nvcc calls, only longer; `l2tui build --catalog` times them)
ARGS = ("--steps", "1", "--width", "2", "--seeds", "3", "--new-builds", "1",
        "--families", "tiny_mma", "sm80_mma", "small_splitk")


def _l2tui(*args: str, env: dict, timeout: float = 3000) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "l2tui.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def _needs_gpu():
    from harness.gpuinfo import gpu_present

    if not gpu_present():
        pytest.skip("no GPU")


def _sweep(tmp_path, executor: str) -> tuple[float, dict, str]:
    env = dict(os.environ, L2TUI_CACHE_DIR=str(tmp_path / f"cache-{executor}"), RAY_USAGE_STATS_ENABLED="0")
    sdir = tmp_path / f"sweep-{executor}"
    shapes = [a for s in SHAPES for a in ("--shapes", s)]
    t0 = time.monotonic()
    p = _l2tui("sweep", *shapes, *ARGS, "--session", str(sdir), "--executor", executor, env=env)
    wall = time.monotonic() - t0
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    done = json.loads((sdir / "sweep.json").read_text())["tracks"]
    assert len(done) == len(SHAPES)
    for tid, t in done.items():
        assert t["speedup"] and t["best_ms"] > 0 and t["picked"] >= 3, (tid, t)
        assert t["gpu_uuid"] and t["gpu_uuid"].startswith("GPU-"), (tid, t)
        assert 0 < t["gpu_s"] <= t["seconds"], (tid, t)
    from l2tui.session import Session

    s = Session.open(sdir)
    checked = [e for e in s.events if e["type"] == "checked"]
    assert checked and len({e["gpu"] for e in checked}) == 1
    # the pick checked and timed its candidates together: one request, several subjects
    assert any((e.get("batch") or 0) >= 3 for e in checked)
    return wall, done, p.stdout + p.stderr


def _report(executor: str, wall: float, done: dict) -> None:
    build = sum(t["build_s"] for t in done.values())
    gpu = sum(t["gpu_s"] for t in done.values())
    print(f"--executor {executor}: {len(done)} shapes from a cold cache in {wall:.0f} s wall "
          f"(tracks: nvcc {build:.0f} s, GPU {gpu:.1f} s)")
    for tid, t in sorted(done.items()):
        print(f"  {tid}: {t['best_name']} {t['speedup']:.3f}x per call vs cublaslt_autotune, "
              f"{t['picked']} picked, {t['evaluated']} evaluated, on {t['gpu_uuid']}")


def test_cold_sweep_local_executor(tmp_path):
    _needs_gpu()
    wall, done, out = _sweep(tmp_path, "local")
    print(out[-2000:])
    _report("local", wall, done)


def test_cold_sweep_ray_executor_one_gpu_actor(tmp_path):
    _needs_gpu()
    pytest.importorskip("ray")
    wall, done, out = _sweep(tmp_path, "ray")
    print(out[-2000:])
    assert "1 x " in out and "(Ray)" in out
    _report("ray", wall, done)


def test_run_policy_search_seeds_from_the_pick(tmp_path):
    _needs_gpu()
    env = dict(os.environ, L2TUI_CACHE_DIR=str(tmp_path / "cache"))
    sdir = tmp_path / "run"
    t0 = time.monotonic()
    p = _l2tui("run", "--headless", "--policy", "search", "--shapes", "2048x2048x2048", "--max-steps", "1",
               "--session", str(sdir), env=env)
    wall = time.monotonic() - t0
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    from l2tui.session import Session

    s = Session.open(sdir)
    plans = [e for e in s.events if e["type"] == "plan"]
    assert plans and plans[0]["text"].startswith("Pick:"), plans[:1]
    stages = [(e.get("stage"), e.get("status")) for e in s.events if e["type"] == "stage"]
    assert ("pick", "start") in stages and ("pick", "end") in stages
    best = [e for e in s.events if e["type"] == "best"]
    print(f"l2tui run --policy search 2048x2048x2048, cold cache: {wall:.0f} s wall; {plans[0]['text']}")
    if best:
        print(f"  best {best[-1].get('speedup')}x per call")
