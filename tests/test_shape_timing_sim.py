"""The timing-and-checks flow of one shape (harness.shape_timing) end to end on a simulated GPU
(tests/gpusim.py): graphs, rounds, verifications and verdicts as the worker runs them, with
subjects whose output and cost the test chooses.

Why: part (3) of ``fresh`` decides from timings and verifications made in several places (the
per-call rounds' own dense graphs, a check after the back-to-back timing, one after the server
calls); a slip in that bookkeeping (a graph left out of the rounds, a verdict charged to the wrong
subject, a field lost) shows here without a GPU. The real kernels and their costs are tested by
tests/test_timing_gpu.py and tests/test_checks_gpu.py (``pytest -m gpu``)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from harness import baselines as bl
from harness import checks as ck
from harness import shape_fresh as sf
from harness import shape_timing as st
from harness.shape_eval import SeedChecks, ShapeChecks

import gpusim

SHAPE = (64, 48, 96)
BOUND = 1e-3


def _setup(subjects: dict[str, tuple[str, object]], shape: tuple[int, int, int] = SHAPE):
    gpu = gpusim.SimGpu()
    ctx = gpusim.context(gpu, *shape)
    made = {}
    for label, (kind, make) in subjects.items():
        made[label] = bl.Subject(label, make(gpu, ctx), kind=kind)
    status: dict[str, str] = {}
    sc = ShapeChecks(gpu.cp, gpu.stream, ctx, made, status)
    sc.set_statuses()
    sc.keep_inputs()
    ref = ck.reference(gpu.cp, ctx.A.data, ctx.B.data)
    seeds = SeedChecks(ref=ref, norm=ck.ref_norm(gpu.cp, ref), bound=BOUND)
    return gpu, ctx, sc, seeds


def _time(gpu, sc, seeds, subjects, mode: str, seed: int) -> None:
    """One shape's timing of ``subjects`` in ``mode`` (isolated, chained, both or server)."""
    if mode == "server":
        st.time_server(gpu, sc, list(subjects), 1e6, 4, random.Random(seed), ck.verify_limit(BOUND))
    else:
        st.time_offline(gpu, sc, list(subjects), mode, 3, random.Random(seed), seeds, ck.verify_limit(BOUND), {})


SUBJECTS = {
    "honest": ("candidate", lambda gpu, ctx: gpusim.honest(gpu, ctx, 0.050)),
    "delta": ("candidate", lambda gpu, ctx: gpusim.delta(gpu, ctx, gemm_ms=0.050, diff_ms=0.008)),
    "cublas": ("baseline", lambda gpu, ctx: gpusim.honest(gpu, ctx, 0.045)),
}


@pytest.mark.parametrize("mode", ["isolated", "both", "chained"])
def test_offline_timing_rejects_the_delta_subject_by_part_three_only(mode):
    gpu, ctx, sc, seeds = _setup(SUBJECTS)
    a0 = np.array(ctx.A.data)
    errors: dict[str, str] = {}
    timed, chained = st.time_offline(gpu, sc, list(SUBJECTS), mode, 3, random.Random(1), seeds,
                                     ck.verify_limit(BOUND), errors)
    assert errors == {}
    assert sc.status == {"honest": "ok", "delta": "wrong", "cublas": "ok"}, {lb: sc.recs[lb].results for lb in sc.recs}
    bad = sc.recs["delta"]
    assert bad.failed() == "fresh"
    fresh = bad.results["fresh"]
    assert "update their last product" in fresh["detail"], fresh
    # per call a replay's first call may follow another graph's flips and multiply in full
    assert fresh["dense_ms"] == pytest.approx(0.058) and fresh["one_ms"] < 0.010
    for name in ("graph_replay",) + (("timed_calls",) if mode != "chained" else ()):
        assert bad.results[name]["ok"], (name, bad.results[name])   # right on every call: nothing else sees it
    good = sc.recs["honest"].results["fresh"]
    assert good["ok"] and good["dense_ms"] == pytest.approx(0.050) and good["one_ms"] == pytest.approx(0.050)
    assert good["dense_verified_calls"] >= good["dense_reps"]
    assert "fresh" not in sc.recs["cublas"].results                 # baselines are not its business
    headline = timed["honest"]["median_ms"]
    assert headline == pytest.approx(0.050)                         # the flips stay out of the headline
    if mode != "chained":
        assert timed["delta"]["median_ms"] < 0.010                   # what it would have claimed per call
    if mode != "chained":   # (back to back, parts (1) and (2) leave their changes of A, as they always have)
        np.testing.assert_array_equal(ctx.A.data.view(np.uint16), a0.view(np.uint16))   # A as the checks left it


def test_per_call_rounds_hold_the_dense_graphs_and_no_separate_check_runs(monkeypatch):
    """Per call, part (3) comes from dense graphs timed in the headline's own rounds."""
    ran: list[str] = []
    monkeypatch.setattr(sf, "check_dense", lambda *a, **k: ran.append(a[4]) or (True, "", {}))
    seen: list[list[str]] = []
    offline = st.timing.offline
    monkeypatch.setattr(st.timing, "offline",
                        lambda cp, s, graphs, **kw: seen.append([g.label for g in graphs]) or offline(cp, s, graphs, **kw))
    gpu, ctx, sc, seeds = _setup(SUBJECTS)
    st.time_offline(gpu, sc, list(SUBJECTS), "isolated", 3, random.Random(2), seeds, ck.verify_limit(BOUND), {})
    assert ran == []
    (labels,) = seen
    assert {st.DENSE_PREFIX + "honest", st.DENSE_PREFIX + "delta", st.DENSE_SEPARATOR_LABEL} <= set(labels)
    assert st.DENSE_PREFIX + "cublas" not in labels and st.PER_CALL_PREFIX + "cublas" in labels


def test_server_mode_runs_part_three_after_the_verified_calls():
    gpu, ctx, sc, seeds = _setup(SUBJECTS)
    st.time_server(gpu, sc, list(SUBJECTS), 1e6, 6, random.Random(3), ck.verify_limit(BOUND))
    assert sc.status == {"honest": "ok", "delta": "wrong", "cublas": "ok"}
    assert sc.recs["delta"].failed() == "fresh" and sc.recs["delta"].results["timed_calls"]["ok"]
    assert sc.recs["honest"].results["fresh"]["ok"]


def test_a_subject_stale_after_a_dense_change_is_caught_in_the_per_call_rounds():
    """A kernel that updates small changes and otherwise leaves its kept product (right while one
    element changes at a time, stale after a flip) is caught by the timed graphs' own verification:
    their replays share the rounds with the dense graphs, so a replay's first calls follow flips."""

    def lazy(gpu, ctx):
        kept: dict[str, np.ndarray] = {}

        def op() -> float:
            a = np.array(ctx.A.data)
            if "a" not in kept:
                kept["c"] = np.asarray(a, np.float32) @ np.asarray(ctx.B.data, np.float32)
            else:
                rows, cols = np.nonzero(a.view(np.uint16) != kept["a"].view(np.uint16))
                if len(rows) <= 16:
                    for r, j in zip(rows, cols):
                        kept["c"][r] += (np.float32(a[r, j]) - np.float32(kept["a"][r, j])) * \
                            np.asarray(ctx.B.data[j], np.float32)
            kept["a"] = a
            ctx.C.data[...] = kept["c"].astype(np.float16)
            return 0.050

        def call() -> int:
            gpu.stream.launch(op)
            return 0

        return call

    subjects = {"ok": SUBJECTS["honest"], "lazy": ("candidate", lazy)}
    gpu, ctx, sc, seeds = _setup(subjects)
    st.time_offline(gpu, sc, list(subjects), "isolated", 3, random.Random(4), seeds, ck.verify_limit(BOUND), {})
    assert sc.status == {"ok": "ok", "lazy": "wrong"}, sc.recs["lazy"].results
    assert sc.recs["lazy"].failed() == "timed_calls"
    assert "left C wrong" in sc.recs["lazy"].results["timed_calls"]["detail"]


@pytest.mark.parametrize("mode", ["isolated", "chained", "server"])
def test_a_candidate_leaving_work_on_the_gpu_fails_runs_and_is_drained_before_timed_calls(mode):
    """A candidate whose host code leaves a kernel of its own running (here for 50 ms of host
    time) is found by the device-wide probe before the timed calls, called once more alone to
    tell it from the other candidates, and fails ``runs``; the honest candidate and the library
    beside it are not charged."""
    subjects = {"honest": SUBJECTS["honest"],
                "hog": ("candidate", lambda gpu, ctx: gpusim.hog(gpu, ctx, 0.050)),
                "cublas": SUBJECTS["cublas"]}
    gpu, ctx, sc, seeds = _setup(subjects)
    _time(gpu, sc, seeds, subjects, mode, 5)
    assert sc.status == {"honest": "ok", "hog": "wrong", "cublas": "ok"}, sc.recs["hog"].results
    runs = sc.recs["hog"].results["runs"]
    assert not runs["ok"] and "left work running on the GPU outside the caller's stream" in runs["detail"], runs


def test_a_call_in_the_checks_that_leaves_work_fails_runs_at_once():
    gpu = gpusim.SimGpu()
    ctx = gpusim.context(gpu, *SHAPE)
    subj = bl.Subject("hog", gpusim.hog(gpu, ctx, 0.050), kind="candidate")
    lib = bl.Subject("cublas", gpusim.hog(gpu, ctx, 0.050, hog_s=0.0), kind="baseline")
    sc = ShapeChecks(gpu.cp, gpu.stream, ctx, {"hog": subj, "cublas": lib}, {})
    assert sc.run(subj) is None and "hog" not in sc.alive
    assert "stayed busy" in sc.recs["hog"].results["runs"]["detail"]
    assert sc.run(lib) == 0


def _zeroes_a_when_c_is_clean(gpu, ctx):
    """Multiplies (2 ms) on a poisoned C (every checked call) and on inputs it saw last time (the
    estimate of the call's time: so every graph holds one call); on a clean C after a change of A
    (the timed calls) zeroes A and C, which the timed calls' own verification (C[r] x against
    A[r] (B x) on A as it is now) cannot see."""
    last: dict[str, np.ndarray] = {}

    def op() -> float:
        a = np.array(ctx.A.data)
        same = "a" in last and np.array_equal(a.view(np.uint16), last["a"].view(np.uint16))
        last["a"] = a
        if np.isnan(float(ctx.C.data[0, 0])) or same:
            ctx.C.data[...] = (np.asarray(a, np.float32) @ np.asarray(ctx.B.data, np.float32)).astype(np.float16)
            return 2.0
        ctx.A.data[...] = 0
        ctx.C.data[...] = 0
        last["a"] = np.array(ctx.A.data)
        return 0.01

    def call() -> int:
        gpu.stream.launch(op)
        return 0

    return call


@pytest.mark.parametrize("mode", ["isolated", "both"])
def test_a_kernel_writing_its_inputs_on_unpoisoned_calls_fails_the_graph_replay_even_with_one_call(mode):
    """Its estimate (2 ms) makes every per-call graph hold one call (R = 1): a single replay on a
    poisoned C would never show what its timed calls do; the second replay does. (Back to back its
    timed calls repeat their inputs, and it multiplies: nothing to catch there.)"""
    subjects = {"zero": ("candidate", _zeroes_a_when_c_is_clean),
                "cublas": ("baseline", lambda gpu, ctx: gpusim.honest(gpu, ctx, 2.0))}
    gpu, ctx, sc, seeds = _setup(subjects)
    st.time_offline(gpu, sc, list(subjects), mode, 3, random.Random(6), seeds, ck.verify_limit(BOUND), {})
    rec = sc.recs["zero"]
    assert sc.status["zero"] == "wrong" and rec.failed() == "inputs", rec.results
    assert "graph replay" in rec.results["inputs"]["detail"], rec.results["inputs"]
    assert sc.status["cublas"] == "ok", sc.recs["cublas"].results


def test_server_calls_that_write_their_inputs_fail_inputs():
    """In server mode every call is verified against A as it is after the call; the shadow copy of
    A, changed as the calls were given it, shows a call that wrote A (and the libraries pass)."""
    subjects = {"zero": ("candidate", _zeroes_a_when_c_is_clean),
                "cublas": ("baseline", lambda gpu, ctx: gpusim.honest(gpu, ctx, 2.0))}
    gpu, ctx, sc, seeds = _setup(subjects)
    st.time_server(gpu, sc, list(subjects), 1e6, 8, random.Random(7), ck.verify_limit(BOUND))
    rec = sc.recs["zero"]
    assert sc.status == {"zero": "wrong", "cublas": "ok"}, rec.results
    assert rec.failed() == "inputs" and "server calls wrote their inputs" in rec.results["inputs"]["detail"]


def test_back_to_back_a_content_memo_fails_part_two_and_part_three_is_not_reached():
    """Back to back the timed calls repeat their inputs, so a kernel that hashes them and copies
    its cached C times as a hash; part (2), calls after a one-element change, costs it a multiply
    each: failed by its timing, with the numbers recorded, and part (3) never runs for it."""
    subjects = {"memo": ("candidate", lambda gpu, ctx: gpusim.memo(gpu, ctx, gemm_ms=0.050, hash_ms=0.005)),
                "honest": SUBJECTS["honest"], "cublas": SUBJECTS["cublas"]}
    gpu, ctx, sc, seeds = _setup(subjects)
    st.time_offline(gpu, sc, list(subjects), "chained", 3, random.Random(8), seeds, ck.verify_limit(BOUND), {})
    assert sc.status == {"memo": "wrong", "honest": "ok", "cublas": "ok"}
    fresh = sc.recs["memo"].results["fresh"]
    assert "memoized by content" in fresh["detail"] and "dense_ms" not in fresh, fresh
    assert fresh["fresh_ms"] == pytest.approx(0.055, rel=0.05) and fresh["same_ms"] == pytest.approx(0.005)
    assert sc.recs["honest"].results["fresh"]["ok"] and "dense_ms" in sc.recs["honest"].results["fresh"]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["isolated", "chained", "server"])
@pytest.mark.parametrize("secret", [True, False], ids=["secret-salt", "known-salt"])
def test_verified_rows_cannot_be_predicted_by_a_kernel_that_knows_the_counters(monkeypatch, mode, secret):
    """A subject that reads every verifier's counters (more than a kernel can) and recomputes, after
    a change of all of A, only the rows it predicts they verify next: with the salts it cannot know
    (harness.checks.secret_salt) it leaves verified rows stale and fails; with a salt it knows it
    is cheap and right on every verified row, and passes every check. The secret is what stops it."""
    if not secret:
        monkeypatch.setattr(ck, "secret_salt", lambda: 0)
    subjects = {"predictor": ("candidate", lambda gpu, ctx: gpusim.predictor(gpu, ctx, gemm_ms=0.050, diff_ms=0.008)),
                "honest": SUBJECTS["honest"], "cublas": SUBJECTS["cublas"]}
    gpu, ctx, sc, seeds = _setup(subjects, shape=(1024, 48, 96))
    _time(gpu, sc, seeds, subjects, mode, 9)
    rec = sc.recs["predictor"]
    assert sc.status["honest"] == "ok" and sc.status["cublas"] == "ok"
    if secret:
        assert sc.status["predictor"] == "wrong", rec.results
        assert rec.failed() in ("timed_calls", "fresh"), rec.results
        failed = rec.results[rec.failed()]
        assert "row" in failed["detail"] or "wrong" in failed["detail"], failed
    else:
        assert sc.status["predictor"] == "ok", {k: v for k, v in rec.results.items() if not v["ok"]}


@pytest.mark.parametrize("mode", ["isolated", "chained", "server"])
def test_a_descheduled_host_does_not_charge_an_honest_candidate_with_foreign_work(mode):
    """The device probe's synchronise takes 30 ms of host time after each call of an honest
    candidate (the worker descheduled while builds use every core) with nothing running on the
    GPU: the GPU's own clock (an event on the legacy default stream) clears it, while the hog beside
    it, whose kernel does run on, still fails ``runs``."""
    subjects = {"slow-host": ("candidate", lambda gpu, ctx: gpusim.descheduled(gpu, ctx, 0.050)),
                "hog": ("candidate", lambda gpu, ctx: gpusim.hog(gpu, ctx, 0.050)),
                "cublas": SUBJECTS["cublas"]}
    gpu, ctx, sc, seeds = _setup(subjects)
    _time(gpu, sc, seeds, subjects, mode, 10)
    assert sc.status == {"slow-host": "ok", "hog": "wrong", "cublas": "ok"}, sc.recs["slow-host"].results
    assert sc.recs["hog"].failed() == "runs"
