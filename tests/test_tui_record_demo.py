"""tools/record_demo.py rehearsed without a GPU: the live app, its budget, the files it leaves.

The recorder drives the real app (Textual pilot) with the search policy; here the GPU results
come from the committed recording (``--recorded``) and the builds are real nvcc.  Then the
recording it wrote must replay the same run headless: the same kernels, in the same order.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures" / "recorded"


def _env(tmp: Path) -> dict[str, str]:
    return {**os.environ, "L2TUI_FAKE_NO_GPU": "1", "L2TUI_CONFIG_DIR": str(tmp / "cfg"),
            "L2TUI_SESSIONS_DIR": str(tmp / "sessions")}


def _kernels(events_file: Path) -> list[tuple[str, str]]:
    out = []
    for line in events_file.read_text().splitlines():
        e = json.loads(line)
        if e["type"] == "candidate":
            out.append((e["track"], e["sha"]))
    return out


@pytest.mark.slow
def test_record_demo_rehearsal_leaves_a_complete_replayable_session(tmp_path):
    out, shot = tmp_path / "demo", tmp_path / "live.svg"
    shapes_file = tmp_path / "model.txt"   # a shapes file whose comment names the GEMM's role
    shapes_file.write_text("512,512,512  # toy-model qkv t512\n")
    cmd = [sys.executable, str(ROOT / "tools" / "record_demo.py"), "--recorded", str(FIX / "evaluations.json"),
           "--seed-kernel", str(FIX / "seed_tiled.cu"), "--shapes", str(shapes_file), "--min-shapes", "1",
           "--profile-after", "0", "--candidates-per-step", "1", "--max-steps", "1",
           "--out", str(out), "--screenshot", str(shot), "--budget-s", "600"]
    r = subprocess.run(cmd, cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    summary = json.loads(r.stdout.strip().splitlines()[-1].split("record_demo: ", 1)[1])
    assert summary["tracks"] == 1 and summary["timed"] >= 1 and summary["profiled"] >= 1
    assert summary["profiling_enabled"] >= 1 and summary["ended"] and summary["loop_finished"]

    # the files: session, shapes, settings, recording, and a screenshot of the live screen
    for name in ("events.jsonl", "session.toml", "rewards.jsonl", "shapes.txt", "l2tui.toml", "evaluations.json"):
        assert (out / name).is_file(), name
    assert (out / "shapes.txt").read_text() == "512x512x512\n"
    assert 'baseline = "cublaslt_autotune"' in (out / "l2tui.toml").read_text()   # what the replay is over
    svg = shot.read_text()
    assert svg.startswith("<svg") and "l2tui" in svg and "512x512x512" in svg
    rec = json.loads((out / "evaluations.json").read_text())
    assert rec["meta"]["replayed_from"] == str(FIX / "evaluations.json")
    timed = [json.loads(x) for x in (out / "events.jsonl").read_text().splitlines()]
    for e in timed:
        if e["type"] == "timed":     # every GPU result the session shows is in the recording
            assert any(k.startswith(e["sha"]) and ":512x512x512:" in k for k in rec["records"])

    # the app opens it in replay, from the beginning
    from l2tui.tui.launch import make_replay_app

    app = make_replay_app(out)
    assert app.ctx.events and app.ctx.start is None
    # the role from the shapes file's comment is in the session, for the list view and the export
    from l2tui.gemm_roles import session_roles

    assert session_roles(app.ctx.session.config) == {"512x512x512": "toy-model qkv t512"}

    # and the recording replays the same run headless, with the settings the recorder wrote
    rp = subprocess.run([sys.executable, "-m", "l2tui.cli", "run", "--headless", "--quiet",
                         "--recorded", str(out / "evaluations.json"), "--config", str(out / "l2tui.toml"),
                         "--policy", "search", "--shapes", str(out / "shapes.txt"), "--session", str(tmp_path / "again")],
                        cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=900)
    assert rp.returncode == 0, rp.stderr[-2000:]
    assert _kernels(tmp_path / "again" / "events.jsonl") == _kernels(out / "events.jsonl")


def test_record_demo_refuses_without_a_gpu_or_recording(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "record_demo.py"), "--out", str(tmp_path / "d")],
                       cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "record_demo: error: no NVIDIA GPU found: record the demo on a GPU machine, or rehearse with --recorded FILE"]
    assert not (tmp_path / "d").exists()


def test_a_recording_on_another_gpu_never_replaces_the_bundled_h200_demo():
    sys.path.insert(0, str(ROOT / "tools"))
    import record_demo

    from l2tui.errors import UserError

    record_demo.refuse_another_gpu_over_the_bundled_demo("NVIDIA H200")
    with pytest.raises(UserError, match=r"^the bundled demo \(demo-h200\) is an H200 recording and this GPU is "
                                        r"NVIDIA H100 80GB HBM3: record it into a folder of its own with --out DIR$"):
        record_demo.refuse_another_gpu_over_the_bundled_demo("NVIDIA H100 80GB HBM3")


def test_the_demo_shapes_cover_the_size_classes():
    import importlib.util

    spec = importlib.util.spec_from_file_location("record_demo", ROOT / "tools" / "record_demo.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    shapes = mod.demo_shapes()
    assert len(shapes) == len(set(shapes)) == 24
    assert [s.size_class for s in shapes].count("small") == 8
    assert [s.size_class for s in shapes].count("mid") == 8
    assert [s.size_class for s in shapes].count("big") == 8


def _recorder():
    import importlib.util

    spec = importlib.util.spec_from_file_location("record_demo", ROOT / "tools" / "record_demo.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def test_the_prebuild_builds_each_shapes_known_kernels_and_their_first_proposals(tmp_path, monkeypatch):
    from harness.known import GpuKey, KnownStore, family_usable
    from harness.shapes import parse_shape
    from l2tui.config import load_config

    monkeypatch.setenv("L2TUI_KNOWN_DIR", str(tmp_path))
    rd, cfg = _recorder(), load_config(None)
    shapes = [parse_shape("16x6144x4096"), parse_shape("1024x128x1024")]
    known = rd.known_sources(shapes, cfg, "sm_90a", {"name": "NVIDIA H200", "sms": 132, "cuda_driver": "13.0"})
    store = KnownStore()
    for s in shapes:   # what the loop's seed stage times on this GPU
        want = store.seeds(s, "f32", GpuKey("NVIDIA H200", 132, 13), usable=family_usable(s, "sm_90a"))
        assert known[s] == [k.source for k in want] and known[s]
    seeds, firsts = rd.predicted_sources(shapes, cfg, "sm_90a", known)
    plain, plain_firsts = rd.predicted_sources(shapes, cfg, "sm_90a")
    assert all(src in seeds for srcs in known.values() for src in srcs)
    assert set(plain) <= set(seeds) and set(plain_firsts) <= set(firsts) and len(firsts) > len(plain_firsts)
    assert rd.known_sources(shapes, cfg, "sm_90a", {}) == {}      # no GPU named: nothing known to build


def test_the_demo_is_over_cublaslt_autotuned_unless_told_otherwise():
    rd = _recorder()
    seen: list[str] = []
    rd.record = lambda args, t0: seen.append(args.baseline) or 0   # the arguments only
    rd.main(["--out", "x"])
    rd.main(["--out", "x", "--baseline", "cublas"])
    assert seen == ["cublaslt_autotune", "cublas"]


@pytest.mark.gpu
def test_record_demo_on_the_gpu(tmp_path):
    """The recorder on a GPU, small: two shapes, real builds (seeds and first proposals in
    parallel), real evaluations, delayed profiling after one step, NVML telemetry."""
    out, shot = tmp_path / "demo", tmp_path / "live.svg"
    env = {k: v for k, v in _env(tmp_path).items() if k != "L2TUI_FAKE_NO_GPU"}
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "record_demo.py"), "--shapes", "512x512x512,2048x2048x2048",
                        "--min-shapes", "2", "--out", str(out), "--screenshot", str(shot), "--budget-s", "300"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    summary = json.loads(r.stdout.strip().splitlines()[-1].split("record_demo: ", 1)[1])
    assert summary["profiled"] >= 1 and summary["telemetry"] >= 1 and summary["ended"]
    assert shot.read_text().startswith("<svg")
    rec = json.loads((out / "evaluations.json").read_text())
    assert rec["records"] and rec["meta"]["gpu"]["name"]
