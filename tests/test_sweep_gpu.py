"""GPU: ``l2tui sweep`` end to end on the H200 (run with ``pytest -m gpu``).

The real command in a subprocess, the real Evaluator (nvcc builds, every check, interleaved
timing against cuBLASLt), then ``--resume`` and ``l2tui bench`` of the winners it wrote. CI
covers the same driver with recorded evaluations (tests/test_sweep.py); this is the part only a
GPU can show: that the search's own patches build and pass the harness on the device, and how
long a track takes (printed, so the record of the run says what a grid sweep would cost).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.gpu

# a latency-bound shape (tiny_mma / split-K seeds) and a mid one (sm90_cutlass seeds); the odd
# one is not a multiple of any tile
SHAPES = ("64x64x64", "1000x512x1032")


def _l2tui(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "l2tui.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ))


def test_sweep_search_resume_and_bench_on_the_gpu(tmp_path):
    from harness.gpuinfo import gpu_present

    if not gpu_present():
        pytest.skip("no GPU")
    sdir = tmp_path / "sweep"
    shapes = [a for s in SHAPES for a in ("--shapes", s)]
    t0 = time.monotonic()
    p = _l2tui("sweep", *shapes, "--policy", "search", "--session", str(sdir), "--steps", "1", "--width", "2",
               "--seeds", "2", "--jobs", "8")
    took = time.monotonic() - t0
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    print(p.stdout[-3000:])
    print(f"sweep of {len(SHAPES)} shapes: {took:.0f} s")

    done = json.loads((sdir / "sweep.json").read_text())["tracks"]
    assert len(done) == len(SHAPES)
    for tid, t in done.items():
        assert t["speedup"] and t["speedup"] > 0, (tid, t)
        assert t["best_ms"] > 0 and t["baseline_ms"]["cublaslt_autotune"] > 0, (tid, t)
        assert t["evaluated"] >= 2, (tid, t)
        # where a track's time goes: the GPU worker's checks and timing, nvcc for uncached builds
        assert 0 < t["gpu_s"] <= t["seconds"] and 0 <= t["build_s"] <= t["seconds"], (tid, t)
    winners = sorted(f.name for f in (sdir / "winners").iterdir())
    assert winners == ["1000_512_1032.cu", "64_64_64.cu"]

    from l2tui.session import Session

    s = Session.open(sdir)
    assert s.problems == []
    types = [e["type"] for e in s.events]
    for needed in ("candidate", "compiled", "checked", "timed", "reward", "best", "track_done"):
        assert needed in types, needed
    # the refinement step ran: candidates of step 1 are patches of the seed's best (with a diff)
    step1 = [e for e in s.events if e["type"] == "candidate" and e.get("step") == 1]
    assert step1 and all(e["parent"] and e["diff"] for e in step1)
    checked = [e for e in s.events if e["type"] == "checked"]
    assert checked and all(e["worker_s"] > 0 and {"setup", "checks"} <= set(e["phases"]) for e in checked)
    rewards = s.rewards()
    assert rewards and all(r["policy"] == "search" for r in rewards)

    # resume: every track is done, nothing is evaluated again
    n_candidates = types.count("candidate")
    p = _l2tui("sweep", "--session", str(sdir), "--resume")
    assert p.returncode == 0, p.stderr[-2000:]
    assert f"{len(SHAPES)} of {len(SHAPES)} tracks already done" in p.stdout
    assert [e["type"] for e in Session.open(sdir).events].count("candidate") == n_candidates

    # the winners through the grid bench's checks and timing
    out = tmp_path / "bench.json"
    p = _l2tui("bench", "--kernels", str(sdir / "winners"), "--baselines", "cublaslt_autotune", "--out", str(out))
    assert p.returncode == 0, p.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == len(SHAPES)
    for r in rows:
        assert r["status"]["candidate"] == "ok" and r["times_ms"]["candidate"] > 0, r["status"]


def test_also_times_a_named_catalog_configuration_on_the_gpu(tmp_path):
    """``--also``: the named configuration is built (or found in the cache), checked and timed on
    the track beside the pick's seed, per call, and the sweep's result says which of them won."""
    from harness.gpuinfo import gpu_present

    if not gpu_present():
        pytest.skip("no GPU")
    from harness.families import Config
    from l2tui.session import Session

    name = "sm90-64x64x64-c1x1-ws-p-st8-noc-nopdl"
    sdir = tmp_path / "also"
    p = _l2tui("sweep", "--shapes", "520x264x2056", "--session", str(sdir), "--steps", "0", "--seeds", "0",
               "--no-pick-kinds", "--families", "tiny_mma", "--also", name, timeout=600)
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    print(p.stdout[-1500:])
    s = Session.open(sdir)
    shas = {Config.from_source(s.get_kernel(e["sha"])).name: e["sha"] for e in s.events if e["type"] == "candidate"}
    assert name in shas and any(n.startswith("tiny-") for n in shas)
    timed = {e["sha"]: e["times_ms"] for e in s.events if e["type"] == "timed"}
    assert shas[name] in timed and timed[shas[name]].get("candidate", 0) > 0
    (track,) = json.loads((sdir / "sweep.json").read_text())["tracks"].values()
    assert track["best_name"] in shas and track["best_ms"] > 0
