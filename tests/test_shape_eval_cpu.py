"""The GPU-free pieces of one shape's evaluation, on the CPU: the answer's assembly
(harness.shape_result) and the check bookkeeping every subject goes through
(harness.shape_eval.ShapeChecks), with numpy standing in for cupy.

Why: evaluate_shape itself needs a GPU (tests/test_checks_gpu.py, test_timing_gpu.py,
test_bench_gpu.py); these pieces decide what a result says about each subject, and a CPU run
catches a slip in them before a GPU run does."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from harness import baselines as bl
from harness import checks as ck
from harness.checks import CheckRecord
from harness.shape_eval import ShapeChecks
from harness.shape_result import cublas_variant, shape_result


def _result(**over):
    kw = dict(m=64, n=32, k=16, acc="f32", mode="offline", timing_mode="isolated",
              kinds={"cand": "candidate", "cublas_nn": "baseline", "cublas_tn": "baseline"},
              baselines=["cublas", "torch"], status={"cand": "ok", "cublas_nn": "ok", "cublas_tn": "ok"},
              summaries={lb: {"ok": True, "failed": None, "checks": {"runs": {"ok": True}}}
                         for lb in ("cand", "cublas_nn", "cublas_tn")},
              timed={"cand": {"median_ms": 1.0, "spread": 0.01, "p90_ms": 1.1, "reps": 10, "separator_ms": 0.2},
                     "cublas_nn": {"median_ms": 2.0, "spread": 0.02, "p90_ms": 2.2, "reps": 10},
                     "cublas_tn": {"median_ms": 1.5, "spread": 0.03, "p90_ms": 1.6, "reps": 10}},
              chained={}, absent={"torch": "torch not importable (ImportError)"}, errors={}, bounds=[2e-4, 1e-4],
              e32s=[1e-4, 5e-5], e16s=[], autotune=None, clocks_before={}, clocks_after={}, roofline_ms=0.5,
              seconds=1.25, phases={"setup": 0.1})
    kw.update(over)
    return shape_result(**kw)


def test_cublas_is_the_faster_layout_and_both_stay_in_the_detail():
    r = _result()
    assert r["times_ms"] == {"cand": 1.0, "cublas": 1.5}
    assert r["cublas_variant"] == "tn" and r["detail_times_ms"] == {"cublas_nn": 2.0, "cublas_tn": 1.5}
    assert r["spread"] == {"cand": 0.01, "cublas": 0.03} and r["p90_ms"]["cublas"] == 1.6
    assert r["status"] == {"cand": "ok", "cublas": "ok", "torch": "absent"}
    assert r["bound"] == 1e-4 and r["separator_ms"] == 0.2 and r["device_ms"] == {}


def test_only_candidates_keep_the_per_check_detail():
    r = _result()
    assert "checks" in r["checks"]["cand"] and "checks" not in r["checks"]["cublas"]


def test_untimed_cublas_reports_the_nn_status_and_no_time():
    status = {"cand": "ok", "cublas_nn": "unsupported", "cublas_tn": "unsupported"}
    r = _result(status=status, timed={})
    assert r["cublas_variant"] is None and r["times_ms"] == {"cand": None, "cublas": None}
    assert r["status"]["cublas"] == "unsupported"


def test_a_failed_setup_or_unmeasurable_time_is_an_error_status():
    r = _result(errors={"cand": "per-call time not measurable"})
    assert r["status"]["cand"] == "error" and r["errors"] == {"cand": "per-call time not measurable"}


@pytest.mark.parametrize("times, variant", [
    ({"cublas_nn": 1.0, "cublas_tn": 1.0}, "nn"),     # a tie goes to the layout as given
    ({"cublas_nn": None, "cublas_tn": 2.0}, "tn"),
    ({"cublas_nn": 3.0}, "nn"),
    ({"cand": 1.0}, None),
])
def test_cublas_variant(times, variant):
    assert cublas_variant(times)[1] == variant


def test_both_timings_fill_the_chained_columns_in_offline_mode_only():
    chained = {"cand": {"median_ms": 0.9, "spread": 0.05}}
    r = _result(timing_mode="both", chained=chained)
    assert r["times_ms_chained"] == {"cand": 0.9, "cublas": None} and r["spread_chained"]["cand"] == 0.05
    s = _result(mode="server", timing_mode="both", chained=chained)
    assert s["timing"] == "server" and s["times_ms_chained"] == {} and s["reps"] == {}


# --------------------------------------------------------------------------- bookkeeping


class _Stream:
    """Stands in for the worker's cupy stream: a context manager that synchronises at once."""

    ptr = 0

    def __enter__(self) -> "_Stream":
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def synchronize(self) -> None:
        pass


class _Event:
    def record(self, stream: object) -> None:
        pass


class _Cupy:
    """numpy as cupy, with a device-wide synchronise that finds the device idle (and the events
    of the probe's GPU clock, never read when the host's says idle)."""

    cuda = SimpleNamespace(runtime=SimpleNamespace(deviceSynchronize=lambda: None), Event=_Event,
                           Stream=SimpleNamespace(null=None), get_elapsed_time=lambda e0, e1: 0.0)

    def __getattr__(self, name: str):
        return getattr(np, name)


def _checks(subjects: dict[str, bl.Subject], m: int = 4, n: int = 3, k: int = 2):
    buf = lambda shape: SimpleNamespace(data=np.zeros(shape, np.float16))  # noqa: E731
    ctx = SimpleNamespace(key=(m, n, k), dtype="fp16", A=buf((m, k)), B=buf((k, n)), Bt=buf((n, k)),
                          C=buf((m, n)), guards=0)
    ctx.reset_guards = lambda: setattr(ctx, "guards", 0)
    ctx.bad_guards = lambda: ctx.guards
    ctx.A.data[...] = np.arange(m * k).reshape(m, k)
    ctx.B.data[...] = 1
    return ShapeChecks(_Cupy(), _Stream(), ctx, subjects, {}), ctx


def _subject(label: str, body) -> bl.Subject:
    return bl.Subject(label, body, kind="candidate")


def test_unwritten_rows_written_inputs_and_overwritten_guards_are_charged_to_the_subject():
    holder: dict[str, object] = {}

    def skips_last_row() -> int:
        ctx = holder["ctx"]
        ctx.C.data[:-1] = 1
        ctx.A.data[0, 0] = 99       # marks its input
        ctx.guards = 5              # and writes past C
        return 0

    sc, ctx = _checks({"bad": _subject("bad", skips_last_row)})
    holder["ctx"] = ctx
    a_before = ctx.A.data.copy()
    sc.keep_inputs()
    assert sc.run(sc.subjects["bad"]) == 0
    sc.written_guards("bad", "seed 1")
    res = sc.recs["bad"].results
    assert res["written"] == {"ok": False, "detail": "3 of 12 elements of C not written (seed 1)"}
    assert res["guards"]["detail"] == "5 guard bytes around A/B/C overwritten (seed 1)"
    assert res["inputs"]["detail"] == "the call wrote its inputs: 1 elements of A changed (seed 1)"
    assert np.array_equal(ctx.A.data, a_before) and ctx.guards == 0   # restored for the next subject
    sc.set_statuses()
    assert sc.status == {"bad": "wrong"} and sc.recs["bad"].failed() == "written"


def test_a_call_that_writes_the_column_major_copy_of_b_is_charged_and_the_copy_restored():
    """The copy is an input too (cuBLAS TN and column-major foreign kernels read it, harness.foreign):
    a subject that writes it fails ``inputs`` and the next subject reads it as it was."""
    holder: dict[str, object] = {}

    def writes_bt() -> int:
        ctx = holder["ctx"]
        ctx.C.data[...] = 1
        ctx.Bt.data[1, 0] = 7
        return 0

    sc, ctx = _checks({"bad": _subject("bad", writes_bt)})
    holder["ctx"] = ctx
    ctx.Bt.data[...] = ctx.B.data.T
    bt_before = ctx.Bt.data.copy()
    sc.keep_inputs()
    sc.run(sc.subjects["bad"])
    sc.written_guards("bad", "seed 1")
    assert sc.recs["bad"].results["inputs"]["detail"] == "the call wrote its inputs: 1 elements of Bt changed (seed 1)"
    assert np.array_equal(ctx.Bt.data, bt_before)


def test_a_refused_shape_is_unsupported_and_never_timed():
    sc, _ = _checks({"no": _subject("no", lambda: 7)})
    assert sc.run(sc.subjects["no"]) is None
    assert sc.recs["no"].results["runs"]["detail"] == "l2_hgemm returned 7 (unsupported shape)"
    sc.set_statuses()
    assert sc.status == {"no": "unsupported"} and not sc.timeable("no")


def test_an_unchanged_output_after_new_inputs_is_stale_and_a_late_failure_makes_ok_wrong():
    holder: dict[str, object] = {}

    def constant() -> int:
        holder["ctx"].C.data[...] = 2
        return 0

    sc, ctx = _checks({"c": _subject("c", constant)})
    holder["ctx"] = ctx
    sc.run(sc.subjects["c"])
    sc.remember("c")
    sc.run(sc.subjects["c"])
    sc.check_stale("c", "seed 2")
    assert sc.recs["c"].results["stale"]["detail"] == (
        "output unchanged after new inputs were written into the same buffers (seed 2)")
    ok_sc, _ = _checks({"c": _subject("c", constant)})
    ok_sc.recs["c"] = CheckRecord()
    ok_sc.set_statuses()
    assert ok_sc.status["c"] == "ok" and ok_sc.timeable("c")
    ok_sc.charge("c", "graph_replay", False, "after the timed graph: rel. error 1 > bound 0.1")
    assert ok_sc.status["c"] == "wrong" and ok_sc.recs["c"].failed() == "graph_replay"


@pytest.mark.parametrize("mode", ["isolated", "both", "chained"])
def test_every_timing_mode_runs_the_dense_part_of_fresh_after_the_others_pass(monkeypatch, mode):
    """Part (3) of `fresh` runs for every candidate still ok in every mode, after parts (1)/(2)
    (back to back) or the per-call/back-to-back comparison (both) passed, and its failure is
    charged as `fresh` with what the earlier parts recorded; a baseline never gets it; a candidate
    that failed an earlier part is not checked again."""
    from harness import shape_fresh as sf

    calls: list[str] = []

    def fake_dense(cp, s, ctx, call, label, limit, rng):
        calls.append(label)
        return (label == "honest"), ("" if label == "honest" else "updates its last product"), {"dense_ms": 9.0}

    def fake_fresh(cp, s, ctx, call, gr, timed_ms, bound, rng, nan, limit):
        return (gr.label != "memo"), ("" if gr.label != "memo" else "memoized by content"), {"fresh_ms": 1.0}

    monkeypatch.setattr(sf, "check_dense", fake_dense)
    monkeypatch.setattr(sf, "check_fresh", fake_fresh)
    subjects = {lb: _subject(lb, lambda: 0) for lb in ("honest", "delta", "memo")}
    subjects["cublas"] = bl.Subject("cublas", lambda: 0, kind="baseline")
    sc, _ = _checks(subjects)
    for lb in subjects:
        sc.recs[lb] = CheckRecord()
    sc.set_statuses()
    labels = list(subjects)
    timed = {lb: {"median_ms": 1.0 if lb != "memo" else 5.0} for lb in labels}
    chained = {lb: {"median_ms": 1.0} for lb in labels} if mode != "isolated" else {}
    graphs = [SimpleNamespace(label=lb) for lb in labels] if mode == "chained" else []
    # per call (isolated, both) part (3) comes from the timing rounds' own dense graphs where a
    # candidate has one; check_dense runs only for the others
    rounds = {"delta": (False, "updates its last product", {"dense_ms": 9.0})} if mode != "chained" else None
    sf.fresh_checks(sc, labels, mode, graphs, timed, chained, 1e-3, None, rounds, ck.verify_limit(1e-3))
    memo_caught = mode != "isolated"     # per call only, memo's 5x is no earlier part's business
    assert calls == ["honest"] + (["delta"] if rounds is None else []) + ([] if memo_caught else ["memo"])
    assert sc.status["honest"] == "ok" and sc.recs["honest"].results["fresh"]["ok"]
    assert sc.status["delta"] == "wrong" and sc.recs["delta"].failed() == "fresh"
    assert sc.recs["delta"].results["fresh"]["dense_ms"] == 9.0
    if mode != "isolated":   # the earlier part's numbers stay beside part (3)'s
        assert "fresh_ms" in sc.recs["delta"].results["fresh"]
    assert sc.status["cublas"] == "ok" and "fresh" not in sc.recs["cublas"].results
    if memo_caught:
        assert sc.status["memo"] == "wrong" and sc.recs["memo"].results["fresh"]["ok"] is False
