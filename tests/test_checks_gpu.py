"""GPU tests (pytest -m gpu): the checks reject each adversarial kernel BY THE RIGHT CHECK,
crash/hang/sticky-error handling with real kernels, baselines agree and time.

The module's evaluator times back to back (``timing="chained"``), where the ``fresh`` check
guards against memoization; tests/test_timing_gpu.py covers the per-call headline."""

from __future__ import annotations

import pytest

from harness.evaluate import Evaluator
from harness.paths import KERNELS_DIR
from harness.shapes import Shape
from harness.testkernels import source as kernel_source
from harness.worker import WorkerCrashed

pytestmark = pytest.mark.gpu

SHAPE = Shape(256, 200, 1024)       # N not a multiple of 64; K large enough to expose fp16 accumulation
ALL = ("cublas", "cublaslt_heuristic", "cublaslt_autotune", "torch")


def src(name: str) -> str:
    return kernel_source(name)


@pytest.fixture(scope="module")
def ev():
    e = Evaluator(baselines=("cublas",), timeout_s=60, timing="chained")
    yield e
    e.close()


@pytest.mark.parametrize("name", ["testgood_simple", "reference_naive"])
def test_correct_kernel_passes_every_check(ev, name):
    if not (KERNELS_DIR / f"{name}.cu").exists():
        pytest.skip(f"{name}.cu not there")
    r = ev.evaluate(src(name), SHAPE)
    assert r.status == "ok", r.message
    checks = r.check["checks"]
    for c in ("runs", "written", "guards", "inputs", "accuracy", "exact", "deterministic", "graph_replay", "fresh"):
        assert checks[c]["ok"], (c, checks[c])
    assert checks["fresh"]["fresh_ms"] > 0 and checks["fresh"]["timed_ms"] > 0
    # every call of the fresh-input graphs was verified, each within the limit
    assert checks["fresh"]["verified_calls"] >= checks["fresh"]["reps"]
    assert checks["fresh"]["dense_verified_calls"] >= checks["fresh"]["dense_reps"]
    assert checks["fresh"]["verify_worst"] <= checks["fresh"]["verify_limit"]
    assert r.check["rel_err"] <= r.check["bound"]
    assert r.times_ms["candidate"] > 0 and r.times_ms["cublas"] > 0
    assert r.roofline_ms and r.roofline_ms > 0


@pytest.mark.parametrize("name, check", [
    ("testbad_skiplastrow", "written"),
    ("testbad_oob", "guards"),
    ("testbad_f16acc", "accuracy"),
    ("testbad_stale", "stale"),
    ("testbad_marker", "inputs"),
])
def test_bad_kernel_rejected_by_the_right_check(ev, name, check):
    r = ev.evaluate(src(name), SHAPE)
    assert r.status == "wrong", r.message
    assert r.check["failed"] == check, r.check
    assert "candidate" not in r.times_ms          # wrong kernels are not timed
    if name == "testbad_f16acc":
        assert r.check["checks"]["exact"]["ok"]   # exact on 0/1 inputs: fp16 sums <= 2048 are exact
        assert r.check["rel_err"] > r.check["bound"]


@pytest.mark.parametrize("samples, part", [("0", "memoized by content"), ("64", "stale")])
def test_memoizing_kernel_rejected_by_fresh(ev, samples, part):
    """testbad_memo passes every other check (it is correct on unchanged and on wholly new inputs)
    and is caught by `fresh`: hashing all inputs by the timing part, a sample by the sparse change."""
    source = src("testbad_memo").replace("#define MEMO_SAMPLES 0", f"#define MEMO_SAMPLES {samples}")
    # a shape where its plain 16x16-tile multiply (~1 GFLOP) dwarfs a hash of the inputs (3 MB)
    r = ev.evaluate(source, Shape(512, 512, 2048))
    assert r.status == "wrong", r.message
    assert r.check["failed"] == "fresh", r.check
    checks = r.check["checks"]
    for c in ("written", "guards", "stale", "accuracy", "exact", "deterministic", "graph_replay"):
        assert checks[c]["ok"], (c, checks[c])
    assert part in checks["fresh"]["detail"]


def test_kernel_updating_its_last_product_rejected_by_fresh_back_to_back(ev):
    """testbad_delta passes parts (1) and (2) of `fresh` back to back (after a sparse or a
    one-element change it updates the changed rows, right and cheap) and fails part (3)."""
    r = ev.evaluate(src("testbad_delta"), Shape(512, 512, 2048))
    assert r.status == "wrong", r.message
    assert r.check["failed"] == "fresh", r.check
    checks = r.check["checks"]
    for c in ("written", "guards", "inputs", "stale", "accuracy", "exact", "deterministic", "graph_replay"):
        assert checks[c]["ok"], (c, checks[c])
    fresh = checks["fresh"]
    assert "update their last product" in fresh["detail"], fresh     # part (3) runs only after (1) and (2) pass
    assert fresh["dense_verified_calls"] >= fresh["dense_reps"], fresh


def test_kernel_accumulating_in_fp16_when_timed_fails_graph_replay_back_to_back(ev):
    """Back to back no timed call is verified on its own: the replay of the timed graph on a
    poisoned C computes its first call in fp32 and the others in fp16, and is off the bound."""
    r = ev.evaluate(src("testbad_f16timed"), Shape(512, 512, 2048))
    assert r.status == "wrong", r.message
    assert r.check["failed"] == "graph_replay", r.check
    for c in ("written", "guards", "inputs", "stale", "accuracy", "exact", "deterministic"):
        assert r.check["checks"][c]["ok"], (c, r.check["checks"][c])


def test_kernel_leaving_work_on_the_gpu_fails_runs_and_the_next_one_is_unharmed(ev):
    """testbad_hog's first call leaves a spinning kernel on the legacy default stream: the probe
    after the call waits for it and names it; the next candidate starts on an idle device."""
    r = ev.evaluate(src("testbad_hog"), SHAPE)
    assert r.status == "wrong", r.message
    assert r.check["failed"] == "runs", r.check
    assert "left work running on the GPU outside the caller's stream" in r.check["detail"], r.check
    good = ev.evaluate(src("testgood_simple"), SHAPE)
    assert good.status == "ok", good.message


@pytest.mark.parametrize("gate_ns, gate_calls", [("20000", "0"), ("3000", "0"), ("20000", "64")])
def test_kernel_skipping_rapid_calls_rejected_by_fresh(ev, gate_ns, gate_calls):
    """testbad_timegate skips its work when called again within GATE_NS of its last call (the GPU's
    global timer), leaving the previous C: right in every timed replay and in graph_replay (whose
    first call computes). `fresh` catches it: by the verification of every call that follows a
    change of A when it skips there too, by the timing part when it skips only back-to-back calls."""
    source = src("testbad_timegate").replace("#define GATE_NS 20000", f"#define GATE_NS {gate_ns}")
    source = source.replace("#define GATE_CALLS 0 ", f"#define GATE_CALLS {gate_calls} ")
    r = ev.evaluate(source, Shape(512, 512, 2048))
    assert r.status == "wrong", r.message
    assert r.check["failed"] == "fresh", r.check
    checks = r.check["checks"]
    for c in ("written", "guards", "inputs", "stale", "accuracy", "exact", "deterministic", "graph_replay"):
        assert checks[c]["ok"], (c, checks[c])
    if gate_ns == "20000":  # skips in the fresh-input graph too (by the clock or by the count)
        assert "skips work" in checks["fresh"]["detail"], checks["fresh"]


def test_illegal_address_is_crashed_and_worker_recovers(ev):
    r = ev.evaluate(src("testbad_crash"), SHAPE)
    assert r.status == "crashed", r.message
    r2 = ev.evaluate(src("testgood_simple"), SHAPE)
    assert r2.status == "ok", r2.message


def test_hanging_kernel_is_timeout_and_worker_recovers():
    with Evaluator(baselines=(), timeout_s=20) as e:
        r = e.evaluate(src("testbad_hang"), Shape(64, 64, 64))
        assert r.status == "timeout", r.message
        r2 = e.evaluate(src("testgood_simple"), Shape(64, 64, 64))
        assert r2.status == "ok", r2.message


def test_sticky_error_restarts_worker(ev):
    pid = ev.worker.call("ping")["pid"]
    with pytest.raises(WorkerCrashed):
        ev.worker.call("_debug_sticky", timeout_s=60)
    assert ev.worker.call("ping")["pid"] != pid


def test_baselines_agree_with_reference_and_time():
    with Evaluator(baselines=ALL, timeout_s=120, checks="full") as e:
        res = e.run_shape(Shape(1024, 768, 512), "f32", [], ALL)
        for b in ALL:
            assert res["status"][b] == "ok", (b, res["status"], res.get("errors"), res.get("absent"), res["checks"].get(b))
            assert res["checks"][b]["rel_err"] <= res["checks"][b]["bound"]
            assert res["times_ms"][b] > 0
        assert res["cublas_variant"] in ("nn", "tn")
        # the autotune's record names the heuristic list it indexed (an export pins from it)
        tune = res["autotune"]
        assert 0 <= tune["best_index"] < tune["available"] <= tune["requested"] == 100
        assert tune["cublaslt_version"] > 0


def test_f16_accumulate_mode_runs():
    with Evaluator(baselines=ALL, timeout_s=120) as e:
        res = e.run_shape(Shape(512, 512, 512), "f16", [], ALL)
        assert res["status"]["torch"] == "absent"
        for b in ("cublas", "cublaslt_heuristic", "cublaslt_autotune"):
            assert res["status"][b] == "ok", (b, res["status"], res.get("errors"))
            assert res["times_ms"][b] > 0
        assert res["bound"] >= 1e-3


def test_server_mode_times_every_subject():
    with Evaluator(baselines=ALL, mode="server", timeout_s=120, server_calls=5) as e:
        r = e.evaluate(src("testgood_simple"), Shape(128, 128, 128))
        assert r.status == "ok", r.message
        for lb in ("candidate",) + ALL:
            assert r.times_ms[lb] > 0
            assert r.extra["p90_ms"][lb] >= r.times_ms[lb] * 0.999
