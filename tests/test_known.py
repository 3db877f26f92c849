"""Known kernels (harness.known): the layers, the keys, neighbours, and every policy seeding from
them on evaluations recorded on the H200 (tests/fixtures/recorded)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.known import (CHECKOUT_RESULTS, GpuKey, KnownError, KnownKernel, KnownStore, bf16_twin, bundled_dirs,
                           log_distance, read_local)
from harness.shapes import Shape
from l2tui.agent.loop import AgentLoop, LoopConfig
from l2tui.agent.recorded import RecordedEvaluator
from l2tui.session import Session

H200 = GpuKey("NVIDIA H200", 132, 13)
H100 = GpuKey("NVIDIA H100 80GB HBM3", 132, 13)
REPO = Path(__file__).resolve().parent.parent
FIX = REPO / "tests" / "fixtures"
KERNELS = FIX / "sessions" / "demo-h200-scripted" / "kernels"
#: recorded on the H200 at 512x512x512: the faster and the slower of two tiled kernels
FAST = (KERNELS / "04fe70be41e028a397a2b7d5f105e36eb9c8179cdff142f063b18da80a14c4a9.cu").read_text()
SLOW = (KERNELS / "9e1087a10dcdf9d229324bd8bb864b331f0105d2960f0c3b9e5cc586473704c5.cu").read_text()
SHAPE = Shape(512, 512, 512)


def kernel(source: str, gpu: GpuKey = H200, shape: Shape = SHAPE, ms: float | None = 0.05, name: str = "k") -> KnownKernel:
    return KnownKernel(shape, "f32", gpu, source, name, "local", 1.0, "cublas", ms, {"timing": "offline, per call"})


def test_bundled_layer_is_the_committed_h200_winners(tmp_path):
    assert CHECKOUT_RESULTS / "h200" in bundled_dirs()
    store = KnownStore(local=tmp_path / "known.json")
    mine = store.results(H200, "f32")
    winners = json.loads((REPO / "results" / "h200" / "winners-f32.json").read_text())
    models = json.loads((REPO / "results" / "h200" / "winners-models-f32.json").read_text())
    assert len(mine) == len(set(winners["shapes"]) | set(models["shapes"]))
    k = mine[("f32", Shape(4096, 4096, 4096))]
    assert k.name == winners["shapes"]["4096x4096x4096"] and k.layer == "bundled h200"
    bench = json.loads((REPO / "results" / "h200" / "kernels-offline.json").read_text())
    row = next(r for r in bench["rows"] if (r["m"], r["n"], r["k"]) == (4096, 4096, 4096))
    assert k.time_ms == row["times_ms"]["l2"] and k.baseline == "cublaslt_autotune"
    assert k.speedup == pytest.approx(row["times_ms"]["cublaslt_autotune"] / row["times_ms"]["l2"])
    assert store.problems == []


def test_each_bundled_winners_file_is_timed_by_its_own_bench(tmp_path):
    """The model-shape winners carry the times of the bench that measured them; a shape both files
    hold keeps the grid winner with the grid bench's time."""
    store = KnownStore(local=tmp_path / "known.json")
    mine = store.results(H200, "f32")
    models = json.loads((REPO / "results" / "h200" / "winners-models-f32.json").read_text())
    bench = json.loads((REPO / "results" / "h200" / "kernels-models.json").read_text())
    row = next(r for r in bench["rows"] if (r["m"], r["n"], r["k"]) == (16, 6144, 4096))
    k = mine[("f32", Shape(16, 6144, 4096))]
    assert k.name == models["shapes"]["16x6144x4096"] and k.time_ms == row["times_ms"]["l2"]
    grid = json.loads((REPO / "results" / "h200" / "kernels-offline.json").read_text())
    both = mine[("f32", Shape(4096, 4096, 4096))]
    grow = next(r for r in grid["rows"] if (r["m"], r["n"], r["k"]) == (4096, 4096, 4096))
    assert both.time_ms == grow["times_ms"]["l2"]


def test_another_gpu_model_is_only_a_candidate(tmp_path):
    store = KnownStore(local=tmp_path / "known.json")
    a100 = GpuKey("NVIDIA A100-SXM4-80GB", 108, 13)
    assert store.results(a100) == {}            # the H200's and H100's winners are no result on an A100 ...
    seeds = store.seeds(Shape(4096, 4096, 4096), "f32", a100)
    assert seeds and seeds[0].gpu in (H200, H100)   # ... but they are timed there first
    assert H100 not in {k.gpu for k in store.results(H200).values()}
    assert store.results(GpuKey("NVIDIA H200", 132, 12)) == {}   # another CUDA major: another key
    assert store.results(GpuKey("NVIDIA H200", 114, 13)) == {}   # another SM count: another key


def test_local_layer_records_the_faster_and_keeps_its_provenance(tmp_path):
    path = tmp_path / "known.json"
    store = KnownStore(bundled=[], local=path)
    assert store.record(kernel(SLOW, ms=0.05))
    assert not store.record(kernel(FAST, ms=0.06))       # slower than what is known: not recorded
    assert store.record(kernel(FAST, ms=0.04))
    again = read_local(path)
    assert [k.source for k in again] == [FAST]
    assert again[0].made["timing"] == "offline, per call" and again[0].time_ms == 0.04
    assert KnownStore(bundled=[], local=path).results(H200)[("f32", SHAPE)].source == FAST


@pytest.mark.parametrize("content", [b"{not json", b'{"format": "other"}', b"\xff\xfe",
                                     json.dumps({"format": "l2tui-known/1", "entries": [{"gpu": {"name": "x"}}]}).encode()])
def test_a_corrupt_local_file_is_refused_in_one_line_and_loses_nothing(tmp_path, content):
    path = tmp_path / "known.json"
    path.write_bytes(content)
    store = KnownStore(local=path)
    assert store.results(H200)                   # the bundled layer still answers
    assert len(store.problems) == 1 and "\n" not in store.problems[0] and "refused" in store.problems[0]
    with pytest.raises(KnownError) as e:
        store.record(kernel(FAST))
    assert "\n" not in str(e.value)
    assert path.read_bytes() == content          # never overwritten


def test_a_tampered_source_is_refused(tmp_path):
    path = tmp_path / "known.json"
    KnownStore(bundled=[], local=path).record(kernel(FAST))
    doc = json.loads(path.read_text())
    doc["entries"][0]["source"] += "// changed"
    path.write_text(json.dumps(doc))
    with pytest.raises(KnownError, match="sha256"):
        read_local(path)


def test_neighbours_of_an_off_grid_shape_are_the_nearest_in_log_space(tmp_path):
    store = KnownStore(local=tmp_path / "known.json")
    shape = Shape(24, 5120, 4096)    # a fused qkv at 24 tokens: neither a grid shape nor a committed model shape
    assert ("f32", shape) not in store.results(H200, "f32")
    seeds = store.seeds(shape, "f32", H200, limit=4)
    assert 1 <= len(seeds) <= 4 and len({k.sha256 for k in seeds}) == len(seeds)
    dists = [log_distance(k.shape, shape) for k in seeds]
    assert dists == sorted(dists)
    assert dists[0] == min(log_distance(k.shape, shape) for k in store.results(H200, "f32").values())


def test_a_shape_this_gpu_knows_seeds_from_its_own_kernel(tmp_path):
    store = KnownStore(local=tmp_path / "known.json")
    seeds = store.seeds(Shape(4096, 4096, 4096), "f32", H200)
    assert len(seeds) == 1 and seeds[0].shape == Shape(4096, 4096, 4096)


# ----------------------------------------------------------------------------- the loop


def _loop(tmp_path: Path, policy, store: KnownStore) -> AgentLoop:
    ev = RecordedEvaluator(FIX / "recorded" / "evaluations.json", build="unrecorded")
    session = Session.create(tmp_path / "s", config={}, gpu=dict(ev.meta.get("gpu") or {}), versions={})
    loop = AgentLoop(session, LoopConfig(max_steps=1, known=True, baseline="cublas", arch="sm_90a"),
                     policy=policy, evaluator=ev)
    loop.known_store = store
    loop.add_track(SHAPE, "f32")
    return loop


def _first_best(loop: AgentLoop) -> dict:
    return next(e for e in loop.session.events if e["type"] == "best")


def _stop_after_first_best(loop: AgentLoop) -> None:
    loop.subscribe(lambda e: loop.request_stop() if e["type"] == "best" else None)


def test_search_policy_seeds_from_the_fastest_known_kernel(tmp_path, agent_cache):
    from l2tui.agent.policies.search import SearchPolicy

    store = KnownStore(bundled=[], local=tmp_path / "known.json")
    store.record(kernel(SLOW, gpu=H100, name="slow-on-h100"))
    store.record(kernel(FAST, gpu=GpuKey("NVIDIA A100-SXM4-80GB", 108, 13), name="fast-on-a100"))
    loop = _loop(tmp_path, SearchPolicy(), store)
    _stop_after_first_best(loop)
    loop.run()
    best = _first_best(loop)
    import hashlib
    assert best["sha"] == hashlib.sha256(FAST.encode()).hexdigest()
    timed = {e["sha"]: e["times_ms"]["candidate"] for e in loop.session.events if e["type"] == "timed"}
    slow_ms = json.loads((FIX / "recorded" / "evaluations.json").read_text())["records"][
        f"{hashlib.sha256(SLOW.encode()).hexdigest()}:512x512x512:f32"]["times_ms"]["candidate"]
    assert timed[best["sha"]] <= slow_ms      # never slower than a known kernel it was timed beside
    plan = next(e for e in loop.session.events if e["type"] == "candidate" and e.get("origin") == "seed")
    assert plan["sha"] == best["sha"]


def test_human_policy_opens_on_the_known_kernel(tmp_path, agent_cache):
    import hashlib

    from l2tui.agent.policies.human import HumanPolicy

    store = KnownStore(bundled=[], local=tmp_path / "known.json")
    store.record(kernel(FAST, ms=0.0423, name="this-gpu"))
    loop = _loop(tmp_path, HumanPolicy(), store)
    _stop_after_first_best(loop)
    loop.run()
    assert _first_best(loop)["sha"] == hashlib.sha256(FAST.encode()).hexdigest()


def test_llm_policy_improves_on_the_known_kernel(tmp_path, agent_cache, scripted_server, monkeypatch):
    import hashlib

    from l2tui.agent.policies.llm import LLMPolicy
    from l2tui.config import parse_config

    monkeypatch.setenv("L2TUI_TEST_KEY", "k")
    scripted_server.defaults["planner"] = "Plan: keep it."
    scripted_server.defaults["coder"] = "no patch"
    cfg = parse_config({"llm": {"base_url": scripted_server.base_url, "model": "scripted-model",
                                "api_key_env": "L2TUI_TEST_KEY", "max_retries": 0}}, "test")
    store = KnownStore(bundled=[], local=tmp_path / "known.json")
    store.record(kernel(FAST, ms=0.0423, name="this-gpu"))
    loop = _loop(tmp_path, LLMPolicy.from_config(cfg), store)
    loop.run()
    assert _first_best(loop)["sha"] == hashlib.sha256(FAST.encode()).hexdigest()
    roles = [r["role"] for r in scripted_server.requests]
    assert roles and roles[0] == "planner"        # no generation call for the seed
    first = scripted_server.requests[0]["body"]["messages"]
    assert any("hgemm_tiled" in (m.get("content") or "") for m in first)   # the known kernel, to improve


def test_a_finished_track_records_its_best_in_the_local_layer(tmp_path, agent_cache):
    from l2tui.agent.policies.search import SearchPolicy

    store = KnownStore(bundled=[], local=tmp_path / "known.json")
    store.record(kernel(FAST, gpu=H100, name="from-h100"))
    loop = _loop(tmp_path, SearchPolicy(budget=0), store)
    loop.record_replays = True    # the recording stands for the GPU here
    loop.run()
    mine = read_local(tmp_path / "known.json")
    rec = [k for k in mine if k.gpu.same_model(H200)]
    assert len(rec) == 1 and rec[0].source == FAST and rec[0].time_ms and rec[0].made["gpu"] == "NVIDIA H200"
    assert rec[0].made["date"] and rec[0].made["timing"].startswith("offline")


def test_known_command_lists_this_gpu_and_refuses_a_corrupt_file(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "L2TUI_KNOWN_DIR": str(tmp_path)}
    run = [sys.executable, "-m", "l2tui", "known", "--gpu", "NVIDIA H200", "--acc", "f16"]
    p = subprocess.run(run, capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "NVIDIA H200" in p.stdout and "64x64x2048" in p.stdout and "bundled h200" in p.stdout
    (tmp_path / "known.json").write_text("{oops")
    p = subprocess.run(run, capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0 and "Traceback" not in p.stderr
    warn = [line for line in p.stderr.splitlines() if "known.json" in line]
    assert len(warn) == 1 and "refused" in warn[0]
    assert "64x64x2048" in p.stdout


def test_a_sweep_pick_times_the_known_kernels_beside_its_own(tmp_path):
    from l2tui.agent.policies.base import TrackContext
    from l2tui.agent.sweep import Sweep, SweepConfig

    shape = Shape(16, 6144, 4096)          # off the grid: the nearest grid shapes' winners
    store = KnownStore(local=tmp_path / "known.json")
    cfg = SweepConfig(shapes=[shape], seeds=2, pick_kinds=False, arch="sm_90a", known=store, known_gpu=H200)
    sweep = Sweep(cfg, evaluator=None, progress=lambda line: None)
    props = sweep._pick_proposals(TrackContext(track="t", shape=shape, acc="f32", baseline="cublaslt_autotune",
                                               step=0, arch="sm_90a"))
    known = store.seeds(shape, "f32", H200)
    sources = [p.source for p in props]
    assert known and all(k.source in sources for k in known)
    assert len(sources) == len(set(sources))
    assert any("known kernel" in p.plan for p in props)
    off = Sweep(SweepConfig(shapes=[shape], seeds=2, pick_kinds=False, arch="sm_90a"), evaluator=None,
                progress=lambda line: None)
    assert not any("known kernel" in p.plan for p in off._pick_proposals(
        TrackContext(track="t", shape=shape, acc="f32", baseline="cublaslt_autotune", step=0, arch="sm_90a")))


def _bf16(source: str) -> str:
    """``source`` as a bf16 kernel by its entry point (what the element type of a kernel is)."""
    return source.replace("l2_hgemm(", "l2_hgemm_bf16(")


def test_dtype_is_part_of_the_key_and_never_crosses(tmp_path):
    path = tmp_path / "known.json"
    store = KnownStore(bundled=[], local=path)
    bf16 = KnownKernel(SHAPE, "f32", H200, _bf16(FAST), "bf", "local", 1.0, "cublas", 0.01, {}, "bf16")
    assert store.record(kernel(SLOW, ms=0.05))
    assert store.record(bf16)                  # faster, but another element type: a key of its own
    again = KnownStore(bundled=[], local=path)
    assert again.results(H200)[("f32", SHAPE)].source == SLOW
    assert again.results(H200, dtype="bf16")[("f32", SHAPE)].source == _bf16(FAST)
    assert [k.source for k in again.seeds(SHAPE, "f32", H200)] == [SLOW]
    assert [k.source for k in again.seeds(SHAPE, "f32", H200, dtype="bf16")] == [_bf16(FAST)]
    # nor through neighbours or other GPU models
    off = Shape(500, 512, 512)
    assert all(k.dtype == "fp16" for k in again.seeds(off, "f32", H200))
    assert [k.dtype for k in again.seeds(SHAPE, "f32", H100, dtype="bf16")] == ["bf16"]
    assert [k.dtype for k in again.seeds(SHAPE, "f32", None)] == ["fp16"]
    assert {e["dtype"] for e in json.loads(path.read_text())["entries"]} == {"fp16", "bf16"}


def test_an_entry_without_dtype_is_fp16_and_a_wrong_dtype_is_refused(tmp_path):
    path = tmp_path / "known.json"
    KnownStore(bundled=[], local=path).record(kernel(FAST))
    doc = json.loads(path.read_text())
    del doc["entries"][0]["dtype"]             # written before bf16
    path.write_text(json.dumps(doc))
    (old,) = read_local(path)
    assert old.dtype == "fp16"
    doc["entries"][0]["dtype"] = "bf16"        # says bf16 but defines the fp16 entry point
    path.write_text(json.dumps(doc))
    with pytest.raises(KnownError, match="'dtype' is bf16 but its source takes fp16") as e:
        read_local(path)
    assert "\n" not in str(e.value)
    doc["entries"][0]["dtype"] = "fp8"
    path.write_text(json.dumps(doc))
    with pytest.raises(KnownError, match="'dtype' must be fp16 or bf16"):
        read_local(path)


def test_a_bf16_track_starts_from_this_gpus_fp16_winner_retyped(tmp_path):
    from harness import families as F
    from harness.build import source_dtype

    path = tmp_path / "known.json"
    store = KnownStore(local=path)
    shape = Shape(1024, 1024, 1024)
    (won,) = store.seeds(shape, "f32", H200)
    first, *near = store.seeds(shape, "f32", H200, dtype="bf16")
    fp16_cfg, twin_cfg = F.Config.from_source(won.source), F.Config.from_source(first.source)
    assert twin_cfg == F.Config.of(fp16_cfg.family, {**fp16_cfg.knob_dict, "DTYPE": "DTYPE_BF16"})
    assert (first.shape, first.dtype, source_dtype(first.source), first.name) == (shape, "bf16", "bf16", fp16_cfg.name + "-bf16")
    assert first.time_ms is None and first.speedup is None and "fp16 twin" in first.layer   # a candidate, never a result
    assert near and all(k.dtype == "bf16" and k.shape != shape for k in near)
    assert not store.results(H200, dtype="bf16")
    # a bf16 result of this GPU for the shape is the seed, alone
    measured = KnownKernel(shape, "f32", H200, first.source, first.name, "local", 1.1, "cublas", 0.02, {}, "bf16")
    assert store.record(measured)
    assert KnownStore(local=path).seeds(shape, "f32", H200, dtype="bf16") == [measured]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "L2TUI_KNOWN_DIR": str(tmp_path / "empty")}
    p = subprocess.run([sys.executable, "-m", "l2tui", "known", "--gpu", "NVIDIA H200", "--dtype", "bf16", "--shapes",
                        str(shape)], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert f"fp16 twins: {fp16_cfg.name}-bf16 ({shape})" in p.stdout


def test_only_a_family_render_with_f32_accumulation_has_a_bf16_twin():
    from harness import families as F

    assert bf16_twin(kernel(FAST)) is None                      # hand-written code is not retyped
    f16acc = F.Config.of("sm80_mma", {"ACC": "ACC_F16"}).source()
    assert bf16_twin(KnownKernel(SHAPE, "f16", H200, f16acc, "f16acc", "local")) is None
    edited = F.Config.of("sm80_mma", {}).source() + "\n// edited\n"   # no longer the family's render
    assert bf16_twin(kernel(edited)) is None
    assert bf16_twin(kernel(F.Config.of("sm80_mma", {}).source())) is not None


def test_the_bundled_fp16_winners_are_never_bf16_results():
    store = KnownStore(local=Path("/nonexistent/known.json"))
    assert store.results(H200) and not store.results(H200, dtype="bf16")

def _h100_layer(root: Path) -> Path:
    """A bundled H100 folder as `tools/measure.py h100-grid` leaves it: gpu.json keyed by the GPU's name and
    a winners file (the H200's configurations stand in for H100 winners: the key is what is tested)."""
    d = root / "h100"
    d.mkdir(parents=True)
    (d / "winners-f32.json").write_text((REPO / "results" / "h200" / "winners-f32.json").read_text())
    (d / "gpu.json").write_text(json.dumps({"format": "l2tui-known-gpu/1", "gpu": H100.name, "sms": 132,
                                            "cuda_major": 13, "timing": "offline, per call",
                                            "winners": ["winners-f32.json"]}))
    return d


def test_an_h100_layer_is_found_by_its_folder_and_keyed_by_the_gpu_name(tmp_path, monkeypatch):
    import harness.known as known

    root = tmp_path / "results"
    h100 = _h100_layer(root)
    monkeypatch.setattr(known, "WHEEL_KNOWN", tmp_path / "no-wheel")
    monkeypatch.setattr(known, "CHECKOUT_RESULTS", root)
    assert bundled_dirs() == [h100]
    key = GpuKey.from_info({"name": "NVIDIA H100 80GB HBM3", "cuda_driver": "13.0"})
    store = KnownStore(local=tmp_path / "known.json")
    mine = store.results(key, "f32")
    assert mine and {k.layer for k in mine.values()} == {"bundled h100"}
    assert store.results(H200) == {} and store.problems == []


def test_h100_and_h200_winners_are_each_only_a_candidate_on_the_other(tmp_path):
    store = KnownStore(bundled=[_h100_layer(tmp_path), CHECKOUT_RESULTS / "h200"], local=tmp_path / "known.json")
    on_h100, on_h200 = store.results(H100, "f32"), store.results(H200, "f32")
    assert on_h100 and on_h200
    assert {k.gpu for k in on_h100.values()} == {H100} and {k.gpu for k in on_h200.values()} == {H200}
    assert {k.gpu for k in store.candidates(H100, "f32")} == {H200}
    assert {k.gpu for k in store.candidates(H200, "f32")} == {H100}
    big = Shape(4096, 4096, 4096)
    assert store.seeds(big, "f32", H100)[0].gpu == H100      # each card starts from its own winner
    assert store.seeds(big, "f32", H200)[0].gpu == H200


def test_the_committed_h100_layer_is_this_cards_result_and_carries_its_own_bench(tmp_path):
    """results/h100 (the model shapes swept on an H100): an H100 starts from those winners, timed by
    the bench that measured them there; on an H200 they are candidates only."""
    store = KnownStore(local=tmp_path / "known.json")
    mine = store.results(H100, "f32")
    winners = json.loads((REPO / "results" / "h100" / "winners-models-f32.json").read_text())
    assert set(winners["shapes"]) == {f"{s.m}x{s.n}x{s.k}" for _, s in mine}
    bench = json.loads((REPO / "results" / "h100" / "kernels-models.json").read_text())
    assert bench["meta"]["gpu"] == "NVIDIA H100 80GB HBM3"
    row = next(r for r in bench["rows"] if (r["m"], r["n"], r["k"]) == (16, 28672, 4096))
    k = mine[("f32", Shape(16, 28672, 4096))]
    assert k.layer == "bundled h100" and k.time_ms == row["times_ms"]["l2"]
    assert store.seeds(Shape(16, 28672, 4096), "f32", H100)[0].gpu == H100
    assert store.problems == []


def test_every_file_a_bundled_layer_names_ships_in_the_wheel():
    """The wheel carries results/<gpu>/ as harness/data/known/<gpu>/ file by file (pyproject's
    force-include): every gpu.json, winners file and bench file a layer names is listed, or an
    installed l2tui would refuse the layer."""
    from l2tui.config import tomllib

    forced = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"][
        "force-include"]
    for d in bundled_dirs():
        if d.parent != CHECKOUT_RESULTS:
            continue
        doc = json.loads((d / "gpu.json").read_text())
        named = ["gpu.json", *doc["winners"], *doc.get("bench", {}).values()]
        for name in named:
            src = f"results/{d.name}/{name}"
            assert forced.get(src) == f"harness/data/known/{d.name}/{name}", src


def test_the_revision_a_local_entry_records_is_the_one_named_in_the_environment(monkeypatch):
    from harness.known import git_revision

    monkeypatch.setenv("L2TUI_GIT_REV", "1c85e46")
    assert git_revision() == "1c85e46"
    monkeypatch.delenv("L2TUI_GIT_REV")
    assert git_revision() == "" or len(git_revision()) == 12
