"""GPU tests (pytest -m gpu) of the timing modes: per call (the headline), back to back, server.

- a kernel launched with programmatic dependent launch is slower per call than back to back, the
  same kernel without it is not (the per-call method takes nothing from a subject that has no
  overlap to lose);
- every timed call is verified: a kernel that computes only when C is poisoned is rejected in
  server mode and per call;
- a kernel that accumulates in fp16 only when C is not poisoned (the timed calls) is rejected by
  the timed calls' verification, per call and in server mode;
- a kernel that updates its last product where A changed (right on every call) is rejected by
  part (3) of ``fresh`` per call, with both timings and in server mode; an honest one passes it;
- one subject's failure is its own: an illegal-address candidate, a hanging one and one that
  writes past C, evaluated beside an honest one, each fail with their own cause and the honest
  one passes.
"""

from __future__ import annotations

import math

import pytest

from harness import families
from harness.build import build
from harness.evaluate import Evaluator, uses_pdl
from harness.shapes import Shape
from harness.testkernels import source as kernel_source

pytestmark = pytest.mark.gpu


def src(name: str) -> str:
    return kernel_source(name)


def cand(label: str, source: str) -> dict:
    br = build(source, arch="sm_90a")
    assert br.ok, br.errors
    return {"label": label, "so_path": str(br.so_path), "pdl": uses_pdl(source)}


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def test_pdl_kernel_is_slower_per_call_than_back_to_back_and_the_same_kernel_without_pdl_is_not():
    pdl_src = families.render("tiny_mma", {"PDL": 1})
    plain_src = families.render("tiny_mma", {"PDL": 0})
    assert uses_pdl(pdl_src) and not uses_pdl(plain_src)
    cands = [cand("pdl", pdl_src), cand("plain", plain_src)]
    shapes = [Shape(128, 128, 128), Shape(256, 256, 256), Shape(128, 512, 256), Shape(512, 256, 512)]
    ratio: dict[str, list[float]] = {"pdl": [], "plain": [], "cublas": []}
    with Evaluator(baselines=("cublas",), timeout_s=120, timing="both") as ev:
        for shape in shapes:
            res = ev.run_shape(shape, "f32", cands, ["cublas"])
            assert res["timing"] == "both"
            for lb in ratio:
                assert res["status"][lb] == "ok", (lb, res["status"], res["checks"].get(lb))
                assert res["checks"].get(lb, {}).get("checks", {}).get("timed_calls", {"ok": True})["ok"]
                per, chained = res["times_ms"][lb], res["times_ms_chained"][lb]
                print(f"{shape} {lb}: per call {per * 1e3:.2f} us, back to back {chained * 1e3:.2f} us")
                assert per > 0 and chained > 0, (lb, per, chained, res["separator_ms"])
                ratio[lb].append(per / chained)
            assert res["separator_ms"] and res["separator_ms"] > 0
    summary = {lb: geomean(xs) for lb, xs in ratio.items()}
    print("per call / back to back:", {k: round(v, 3) for k, v in summary.items()})
    assert summary["pdl"] > 1.0, summary                    # PDL overlap is lost behind an unrelated kernel
    assert abs(summary["plain"] - 1.0) <= 0.03, summary      # no overlap to lose: the same time both ways
    assert abs(summary["cublas"] - 1.0) <= 0.03, summary


@pytest.mark.parametrize("mode", ["server", "offline"])
def test_kernel_that_computes_only_on_poisoned_c_is_rejected_in_every_mode(mode):
    kw = {"server_calls": 10} if mode == "server" else {}
    with Evaluator(baselines=("cublas",), mode=mode, timeout_s=120, **kw) as ev:
        bad = ev.evaluate(src("testbad_nanonly"), Shape(256, 256, 256))
        assert bad.status == "wrong", bad.message
        assert bad.check["failed"] == "timed_calls", bad.check
        assert "left C wrong" in bad.check["detail"]
        good = ev.evaluate(src("testgood_simple"), Shape(256, 256, 256))
        assert good.status == "ok", good.message
        tc = good.check["checks"]["timed_calls"]
        assert tc["ok"] and tc["verified_calls"] >= (10 if mode == "server" else 1)


@pytest.mark.parametrize("mode", ["server", "offline"])
def test_kernel_that_accumulates_in_fp16_only_when_timed_is_rejected(mode):
    """testbad_f16timed accumulates in fp32 on a poisoned C (every checked call) and in fp16
    otherwise (the timed calls): the verification of the timed calls, with the f32 limit, names it."""
    kw = {"server_calls": 10} if mode == "server" else {}
    with Evaluator(baselines=("cublas",), mode=mode, timeout_s=180, **kw) as ev:
        bad = ev.evaluate(src("testbad_f16timed"), Shape(512, 512, 2048))
        assert bad.status == "wrong", bad.message
        assert bad.check["failed"] == "timed_calls", bad.check
        checks = bad.check["checks"]
        for c in ("written", "guards", "inputs", "stale", "accuracy", "exact", "deterministic"):
            assert checks[c]["ok"], (c, checks[c])
        tc = checks["timed_calls"]
        assert tc["verify_worst"] > tc["verify_limit"], tc


@pytest.mark.parametrize("mode, timing", [("offline", "isolated"), ("offline", "both"), ("server", None)])
def test_kernel_that_updates_its_last_product_is_rejected_in_every_mode(mode, timing):
    """testbad_delta is right on every call (it diffs A and B against copies and updates the rows a
    change touched, or multiplies in full), so every verification passes; only part (3) of `fresh`,
    a call after a dense change of A against one after a one-element change, shows that its timed
    calls cost a diff, not a GEMM. An honest kernel passes the same part."""
    kw = {"server_calls": 10} if mode == "server" else {"timing": timing}
    shape = Shape(512, 512, 2048)       # its naive multiply (~1 GFLOP) dwarfs a diff of A and B (4 MB)
    with Evaluator(baselines=("cublas",), mode=mode, timeout_s=180, **kw) as ev:
        bad = ev.evaluate(src("testbad_delta"), shape)
        assert bad.status == "wrong", bad.message
        assert bad.check["failed"] == "fresh", bad.check
        checks = bad.check["checks"]
        passed = ("written", "guards", "inputs", "stale", "accuracy", "exact", "deterministic", "timed_calls")
        for c in passed + (("graph_replay",) if mode == "offline" else ()):
            assert checks[c]["ok"], (c, checks[c])
        fresh = checks["fresh"]
        assert "update their last product" in fresh["detail"], fresh
        good = ev.evaluate(src("testgood_simple"), shape)
        assert good.status == "ok", good.message
        f = good.check["checks"]["fresh"]
        assert f["ok"] and f["dense_ms"] > 0 and f["one_ms"] > 0, f
        assert f["dense_verified_calls"] >= f["dense_reps"], f
        print(f"{mode}/{timing}: delta one {fresh['one_ms'] * 1e3:.1f} us, dense {fresh['dense_ms'] * 1e3:.1f} us; "
              f"honest one {f['one_ms'] * 1e3:.1f} us, dense {f['dense_ms'] * 1e3:.1f} us")


def test_each_failure_is_charged_to_its_own_subject():
    good = cand("good", src("testgood_simple"))
    crash = cand("crash", src("testbad_crash"))
    hang = cand("hang", src("testbad_hang"))
    oob = cand("oob", src("testbad_oob"))
    with Evaluator(baselines=("cublas",), timeout_s=20) as ev:
        res = ev.run_shape(Shape(256, 200, 1024), "f32", [crash, good, hang, oob], ["cublas"])
    st = res["status"]
    assert st["good"] == "ok" and st["cublas"] == "ok", (st, res["checks"].get("good"))
    assert st["crash"] == "crashed" and st["hang"] == "timeout", st
    assert st["oob"] == "wrong" and res["checks"]["oob"]["failed"] == "guards", res["checks"]["oob"]
    assert res["times_ms"]["good"] > 0 and res["times_ms"]["crash"] is None
    assert set(res["charged_alone"]) == {"crash", "hang"}
    assert "no answer within" in res["checks"]["hang"]["detail"]
    assert "CUDA context poisoned" in res["checks"]["crash"]["detail"] or "died" in res["checks"]["crash"]["detail"]
