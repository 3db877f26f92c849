"""What the agent loop keeps of an evaluation (``l2tui.agent.track.KernelEval``): made from the
worker's Evaluation where the loop receives one, and from a track's own events on resume.

No nvcc and no GPU: the sessions here are written event by event, as the loop writes them.
"""

from __future__ import annotations

import math

from harness.build import BuildResult, PtxasReport
from harness.evaluate import Evaluation
from l2tui.agent.loop import AgentLoop, LoopConfig
from l2tui.agent.policies.search import SearchPolicy
from l2tui.agent.track import KernelEval
from l2tui.session import Session

SEED = "// one seed kernel shared by two tracks\nextern \"C\" int l2_hgemm() { return 0; }\n"
OTHER = "// a faster kernel for the small shape\nextern \"C\" int l2_hgemm() { return 1; }\n"
PTXAS = {"registers": 96, "smem_bytes": 32768, "spill_store_bytes": 0, "spill_load_bytes": 0, "stack_bytes": 0,
         "kernels": []}


def _timed_kernel(s: Session, tid: str, sha: str, times: dict, *, step: int, flags: list[str],
                  mode: str = "offline") -> None:
    """The events one candidate leaves on a track: candidate, compiled, checked, timed."""
    sp = times["cublas"] / times["candidate"]
    s.append("candidate", track=tid, step=step, sha=sha, origin="seed" if step == 0 else "patch", flags=flags)
    s.append("compiled", track=tid, step=step, sha=sha, ok=True, ptxas=PTXAS, errors=[], seconds=1.0, cached=False)
    s.append("checked", track=tid, step=step, sha=sha, ok=True, status="ok", rel_err=1e-4, bound=1e-3)
    s.append("timed", track=tid, step=step, sha=sha, mode=mode, times_ms=times, roofline_ms=0.001,
             baseline="cublas", speedup=sp)


def _session_of_two_tracks_sharing_a_seed(tmp_path) -> tuple[Session, str, str]:
    s = Session.create(tmp_path / "s", config={}, gpu={}, versions={})
    seed, other = s.put_kernel(SEED), s.put_kernel(OTHER)
    s.append("track_added", track="64x64x64-f32", shape=[64, 64, 64], acc="f32", baseline="cublas")
    s.append("track_added", track="4096x4096x4096-f32", shape=[4096, 4096, 4096], acc="f32", baseline="cublas")
    _timed_kernel(s, "64x64x64-f32", seed, {"candidate": 0.010, "cublas": 0.005}, step=0, flags=["-O3"])
    s.append("best", track="64x64x64-f32", sha=seed, speedup=0.5, baseline="cublas",
             times_ms={"candidate": 0.010, "cublas": 0.005})
    _timed_kernel(s, "4096x4096x4096-f32", seed, {"candidate": 1.0, "cublas": 2.0}, step=0, flags=[])
    s.append("best", track="4096x4096x4096-f32", sha=seed, speedup=2.0, baseline="cublas",
             times_ms={"candidate": 1.0, "cublas": 2.0})
    _timed_kernel(s, "64x64x64-f32", other, {"candidate": 0.004, "cublas": 0.005}, step=1, flags=["-O2"])
    return s, seed, other


def _resumed(s: Session) -> AgentLoop:
    return AgentLoop(s, LoopConfig(), policy=SearchPolicy(budget=0), evaluator=None)  # type: ignore[arg-type]


def test_a_seed_shared_by_two_tracks_keeps_each_tracks_own_times_on_resume(tmp_path):
    """Each track's best is the same kernel, timed on its own shape: resume gives each track its
    own times and speedup, not those of whichever track timed the kernel last."""
    s, seed, other = _session_of_two_tracks_sharing_a_seed(tmp_path)
    loop = _resumed(s)
    small, big = loop.tracks["64x64x64-f32"], loop.tracks["4096x4096x4096-f32"]
    assert small.best_sha == big.best_sha == seed
    assert small.best_eval is not None and big.best_eval is not None
    assert dict(small.best_eval.times_ms) == {"candidate": 0.010, "cublas": 0.005}
    assert dict(big.best_eval.times_ms) == {"candidate": 1.0, "cublas": 2.0}
    assert small.best_speedup is not None and math.isclose(small.best_speedup, 0.5)
    assert big.best_speedup is not None and math.isclose(big.best_speedup, 2.0)
    assert small.flags == ["-O3"] and big.flags == []
    assert small.best_eval.status == "ok" and small.best_eval.ptxas == PTXAS
    # what each track timed, for an accept to restore: the other kernel only on the small shape
    assert set(small.known) == {seed, other} and set(big.known) == {seed}
    assert small.known[other].flags == ("-O2",) and small.known[other].speedup is not None
    assert math.isclose(small.known[other].speedup, 1.25)
    assert dict(big.known[seed].evaluation.times_ms) == {"candidate": 1.0, "cublas": 2.0}


def test_a_kernel_timed_in_both_modes_keeps_the_loops_mode_on_resume(tmp_path):
    s = Session.create(tmp_path / "s", config={}, gpu={}, versions={})
    sha = s.put_kernel(SEED)
    s.append("track_added", track="64x64x64-f32", shape=[64, 64, 64], acc="f32", baseline="cublas")
    _timed_kernel(s, "64x64x64-f32", sha, {"candidate": 0.010, "cublas": 0.005}, step=0, flags=[])
    s.append("best", track="64x64x64-f32", sha=sha, speedup=0.5, baseline="cublas")
    s.append("timed", track="64x64x64-f32", step=0, sha=sha, mode="server", times_ms={"candidate": 0.5, "cublas": 1.0},
             baseline="cublas", speedup=2.0)
    t = _resumed(s).tracks["64x64x64-f32"]
    assert t.best_eval is not None and dict(t.best_eval.times_ms) == {"candidate": 0.010, "cublas": 0.005}


def test_an_evaluation_is_kept_with_its_times_resources_and_timing():
    build = BuildResult(ok=True, key="ab", so_path=None, ptxas=PtxasReport(registers=96, smem_bytes=32768), errors=[],
                        log="", seconds=1.0, cached=False, arch="sm_90a", flags=[])
    ev = Evaluation("ok", build, check={"rel_err": 1e-4}, times_ms={"candidate": 0.01, "cublas": 0.02},
                    roofline_ms=0.001, extra={"timing": "chained", "mode": "offline"})
    kept = KernelEval.of(ev)
    assert kept.status == "ok" and dict(kept.times_ms) == {"candidate": 0.01, "cublas": 0.02}
    assert kept.roofline_ms == 0.001 and kept.timing == "chained"
    assert kept.ptxas is not None and kept.ptxas["registers"] == 96
    ev.times_ms["candidate"] = 9.0          # the kept copy does not follow the evaluation
    assert kept.times_ms["candidate"] == 0.01
    assert KernelEval.of(Evaluation("crashed", None, message="gone")).ptxas is None


def test_hostile_event_fields_are_left_out_of_the_kept_evaluation():
    kept = KernelEval.from_events(
        {"ptxas": "not a dict"},
        {"status": ["ok"]},
        {"times_ms": {"candidate": "0.01", "cublas": float("nan"), "torch": None, "cublaslt": -1, "ok": 0.02},
         "roofline_ms": True, "timing": 7})
    assert kept is not None
    assert dict(kept.times_ms) == {"torch": None, "ok": 0.02}
    assert kept.status == "" and kept.ptxas is None and kept.roofline_ms is None and kept.timing is None
    assert KernelEval.from_events(None, None, None) is None
    assert KernelEval.from_events(None, None, {"times_ms": [1, 2]}) == KernelEval(status="")


def test_the_timing_method_reaches_the_timed_event_the_known_kernel_and_resume(tmp_path, agent_cache):
    """An evaluation's timing method (``extra["timing"]``) is written on the loop's ``timed``
    event, names the method of the known kernel a finished track records, and is read back on
    resume. Recorded builds are replayed: no nvcc."""
    import json
    from pathlib import Path

    from harness.known import GpuKey, KnownKernel, KnownStore, read_local
    from harness.shapes import Shape
    from l2tui.agent.recorded import RecordedEvaluator

    fixtures = Path(__file__).resolve().parent / "fixtures"
    # recorded on the H200 at 512x512x512; known from an H100, so the loop times it here
    fast = (fixtures / "sessions" / "demo-h200-scripted" / "kernels"
            / "04fe70be41e028a397a2b7d5f105e36eb9c8179cdff142f063b18da80a14c4a9.cu").read_text()
    h200, h100 = GpuKey("NVIDIA H200", 132, 13), GpuKey("NVIDIA H100 80GB HBM3", 132, 13)
    store = KnownStore(bundled=[], local=tmp_path / "known.json")
    store.record(KnownKernel(Shape(512, 512, 512), "f32", h100, fast, "from-h100", "local", 1.0, "cublas", 0.05,
                             {"timing": "offline, per call"}))
    doc = json.loads((fixtures / "recorded" / "evaluations.json").read_text())
    for rec in doc["records"].values():
        rec.setdefault("extra", {})["timing"] = "chained"
    recording = tmp_path / "evaluations.json"
    recording.write_text(json.dumps(doc))
    ev = RecordedEvaluator(recording, build="unrecorded")
    s = Session.create(tmp_path / "s", config={}, gpu=dict(ev.meta.get("gpu") or {}), versions={})
    loop = AgentLoop(s, LoopConfig(max_steps=1, known=True, baseline="cublas", arch="sm_90a"),
                     policy=SearchPolicy(budget=0), evaluator=ev)
    loop.known_store = store
    loop.record_replays = True    # the recording stands for the GPU here
    tid = loop.add_track(Shape(512, 512, 512), "f32")
    loop.run()
    timed = [e for e in s.events if e["type"] == "timed"]
    assert timed and all(e.get("timing") == "chained" for e in timed)
    mine = [k for k in read_local(tmp_path / "known.json") if k.gpu.same_model(h200)]
    assert len(mine) == 1 and mine[0].made["timing"] == "offline, chained"
    kept = _resumed(Session.open(s.path)).tracks[tid].best_eval
    assert kept is not None and kept.timing == "chained" and kept.status == "ok" and kept.times_ms.get("candidate")
