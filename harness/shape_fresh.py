"""The ``fresh`` check of one shape's candidates, inside the GPU worker (harness.checks names
its three parts): (1) a sparse change of A replayed through the timed graph, (2) back to back, calls
after a one-element change against the timed calls, (3) in every mode, calls after a dense change
of A against calls after a one-element change.

Why a module of its own: the parts build and time graphs of their own after (or, per call, inside)
the timing of harness.shape_timing, and decide from those timings alone; the timing module calls
:func:`fresh_checks` (offline) and :func:`dense_checks` (server) once its own rounds are done.
"""

from __future__ import annotations

import random
from typing import Any, Callable

from .cupy_types import CudaGraph, CudaStream, CupyModule, DeviceArray
from . import checks as ck
from . import timing
from .cuda_errors import Sticky, is_sticky
from .shape_eval import FOREIGN_WORK_MS, ShapeChecks, ShapeContext, device_busy_ms, foreign_work_detail


def _fresh_replay(cp: CupyModule, s: CudaStream, ctx: ShapeContext, gr: CudaGraph, bound: float, rng: random.Random,
                  nan: DeviceArray) -> tuple[str | None, float]:
    """Part (1) of ``fresh``: a few elements of A changed in place, the timed graph replayed on
    poisoned C; returns (why it failed or None, the relative error)."""
    A, B, C = ctx.A, ctx.B, ctx.C
    dtype = ctx.dtype
    with s:
        changed = ck.sparse_change(cp, A.data, rng, dtype=dtype)
        ref = ck.reference(cp, A.data, B.data, dtype)
        norm = ck.ref_norm(cp, ref)
        C.data.fill(nan)
    gr.graph.launch(s)
    s.synchronize()
    with s:
        unwritten = ck.count_unwritten(cp, C.data, dtype)
    err = ck.rel_err(cp, C.data, ref, norm, dtype)
    del ref
    if unwritten or err > bound:
        what = f"{unwritten} elements of C not written" if unwritten else f"rel. error {err:.3g} > bound {bound:.3g}"
        return (f"after {changed} elements of A changed in place, the timed graph's output is stale: {what} "
                "(memoized on a sample of the inputs?)"), err
    return None, err


def _plain_call_detail(change: str, worst: list[float], limit: float) -> str:
    """Why a single untimed call right after a change of A failed its verification: the kernel's
    (the verification is the timed calls' own, which every honest kernel passes)."""
    _, det = ck.verify_verdict(worst, 1, limit)
    return f"a single call right after a {change} change of A: {det}"


def check_fresh(cp: CupyModule, s: CudaStream, ctx: ShapeContext, call: Callable[[], int], gr: CudaGraph, timed_ms: float,
                bound: float, rng: random.Random, nan: DeviceArray, limit: float) -> tuple[bool, str, dict[str, Any]]:
    """The ``fresh`` check of harness.checks for one candidate: (ok, detail, recorded numbers)."""
    A, B, C = ctx.A, ctx.B, ctx.C
    stale, err = _fresh_replay(cp, s, ctx, gr, bound, rng, nan)
    if stale is not None:
        return False, stale, {"sparse_rel_err": err}
    reps = min(gr.reps, ck.FRESH_MAX_REPS)
    steps = reps * (ck.FRESH_REPLAYS + 1)          # the warm-up replay and the timed ones
    with s:
        pert = ck.Perturber(cp, A.data, s, ctx.dtype)
        ver = ck.Verifier(cp, A.data, B.data, C.data, s, capacity=steps + reps, changed_row=pert.row, dtype=ctx.dtype)
        # the subtracted graph verifies too (the same work on a C the call did not write): ignored
        ver_base = ck.Verifier(cp, A.data, B.data, C.data, s, capacity=steps + reps, changed_row=pert.row,
                               dtype=ctx.dtype)
    # compiles and loads the kernels now, never inside a stream capture; the verification of a
    # call made right after a change must pass (else the check itself is broken on this shape)
    pert.step()
    call()
    ver.step()
    s.synchronize()
    first = ver.results()
    if not first or not first[0] <= limit:
        return False, _plain_call_detail("one-element", first, limit), {}
    ver.reset()
    gf, gp = timing.fresh_graphs(cp, s, gr.label, call, pert.step, reps, verify=ver.step, verify_base=ver_base.step)
    busy = device_busy_ms(cp, s)
    if busy > FOREIGN_WORK_MS:
        return False, foreign_work_detail(busy, "before the fresh-input rounds"), {}
    # the timed graph again, in the same rounds (same clocks and temperature as the fresh one);
    # primed, so its timed calls follow calls on unchanged inputs as in the bench's timing
    t = timing.offline(cp, s, [gr, gf, gp], replays=ck.FRESH_REPLAYS, rng=rng, primed={gr.label})
    fresh_ms = t[gf.label]["median_ms"] - t[gp.label]["median_ms"]
    same_ms = t[gr.label]["median_ms"]
    worst = ver.results()
    fields = {"sparse_rel_err": err, "fresh_ms": fresh_ms, "perturb_ms": t[gp.label]["median_ms"],
              "same_ms": same_ms, "timed_ms": timed_ms, "reps": reps, "verified_calls": len(worst),
              "verified_rows": ck.VERIFY_ROWS, "verify_worst": max(worst) if worst else None, "verify_limit": limit}
    if not ver.b_unchanged():
        return False, "B changed while the fresh-input graph ran (B x differs from before it)", fields
    ok, det = ck.verify_verdict(worst, steps, limit)
    if not ok:
        return False, det, fields
    ok, det = ck.fresh_verdict(same_ms, fresh_ms)
    return ok, det, fields


def check_dense(cp: CupyModule, s: CudaStream, ctx: ShapeContext, call: Callable[[], int], label: str, limit: float,
                rng: random.Random) -> tuple[bool, str, dict[str, Any]]:
    """Part (3) of ``fresh`` (every timing mode): calls right after a dense change of A against
    calls right after a one-element change, both graphs timed in the same rounds with their
    perturbing and verifying kernels subtracted, every call of both verified. A is restored after.

    Why: the per-call headline, the server mode and part (2) change one element of A before a
    call, so a kernel that diffs A against a copy and updates only the changed row of a kept
    product is right on every verified call; only a change it cannot update from shows its cost."""
    A = ctx.A
    with s:
        a0 = A.data.copy()
    try:
        return _dense_timed(cp, s, ctx, call, label, limit, rng)
    finally:
        with s:
            A.data[...] = a0
        s.synchronize()


def _dense_timed(cp: CupyModule, s: CudaStream, ctx: ShapeContext, call: Callable[[], int], label: str, limit: float,
                 rng: random.Random) -> tuple[bool, str, dict[str, Any]]:
    A, B, C = ctx.A, ctx.B, ctx.C
    reps = min(timing.reps_for(timing.estimate_ms(cp, s, call)), ck.FRESH_MAX_REPS)
    steps = reps * (ck.FRESH_REPLAYS + 1)          # the warm-up replay and the timed ones
    with s:
        one = ck.Perturber(cp, A.data, s, ctx.dtype)
        flip = ck.SignFlipper(cp, A.data, s)   # the sign bit is bit 15 in fp16 and bf16 alike
        vers = {kind: tuple(ck.Verifier(cp, A.data, B.data, C.data, s, capacity=steps + reps,
                                        changed_row=p.row, dtype=ctx.dtype) for _ in range(2))
                for kind, p in (("one", one), ("dense", flip))}
    # compiles and loads the kernels now, never inside a stream capture; a call right after
    # each kind of change must verify (else the check itself is broken on this shape)
    for kind, p in (("one", one), ("dense", flip)):
        p.step()
        call()
        vers[kind][0].step()
    s.synchronize()
    for kind in vers:
        first = vers[kind][0].results()
        if not first or not first[0] <= limit:
            return False, _plain_call_detail("one-element" if kind == "one" else "dense", first, limit), {}
        vers[kind][0].reset()
    g1, g1p = timing.fresh_graphs(cp, s, f"{label}:one", call, one.step, reps, verify=vers["one"][0].step,
                                  verify_base=vers["one"][1].step)
    gd, gdp = timing.fresh_graphs(cp, s, f"{label}:dense", call, flip.step, reps, verify=vers["dense"][0].step,
                                  verify_base=vers["dense"][1].step)
    busy = device_busy_ms(cp, s)
    if busy > FOREIGN_WORK_MS:
        return False, foreign_work_detail(busy, "before the dense-change rounds"), {}
    t = timing.offline(cp, s, [g1, g1p, gd, gdp], replays=ck.FRESH_REPLAYS, rng=rng)
    one_ms = t[g1.label]["median_ms"] - t[g1p.label]["median_ms"]
    dense_ms = t[gd.label]["median_ms"] - t[gdp.label]["median_ms"]
    worst = {kind: vers[kind][0].results() for kind in vers}
    fields = {"dense_ms": dense_ms, "one_ms": one_ms, "flip_ms": t[gdp.label]["median_ms"], "dense_reps": reps,
              "dense_verified_calls": len(worst["dense"]),
              "dense_verify_worst": max(worst["dense"]) if worst["dense"] else None}
    if not all(v[0].b_unchanged() for v in vers.values()):
        return False, "B changed while the dense-change graphs ran (B x differs from before them)", fields
    for kind in ("dense", "one"):
        ok, det = ck.verify_verdict(worst[kind], steps, limit)
        if not ok:
            return False, f"after a {'dense' if kind == 'dense' else 'one-element'} change of A: {det}", fields
    ok, det = ck.dense_verdict(one_ms, dense_ms)
    return ok, det, fields


def dense_checks(sc: ShapeChecks, labels: list[str], limit: float, rng: random.Random,
                 fields: dict[str, dict[str, Any]] | None = None) -> None:
    """Part (3) of ``fresh`` for every candidate of ``labels`` still ``ok``, charged as ``fresh``
    (with ``fields[label]``, what parts (1) and (2) recorded, when given)."""
    for label in [lb for lb in labels if sc.subjects[lb].kind == "candidate" and sc.status[lb] == "ok"]:
        try:
            ok, det, got = check_dense(sc.cp, sc.s, sc.ctx, sc.subjects[label].call, label, limit, rng)
        except Exception as e:
            if is_sticky(e):
                raise Sticky(f"{label}: {e}", label) from e
            ok, det, got = False, f"dense-change check failed: {type(e).__name__}: {str(e)[:200]}", {}
        sc.charge(label, "fresh", ok, det, **{**(fields or {}).get(label, {}), **got})


def fresh_checks(sc: ShapeChecks, labels: list[str], timing_mode: str, graphs: list[timing.Graph],
                 timed: dict[str, dict[str, Any]], chained: dict[str, dict[str, Any]], bound: float,
                 rng: random.Random, dense: dict[str, tuple[bool, str, dict[str, Any]]] | None,
                 limit: float) -> None:
    """Memoization by content. Per call, every timed call followed a change of A and was
    verified (``timed_calls``); back to back, the timed calls repeat the same inputs, so the
    fresh check compares them with calls that each follow a change; ``limit`` is the timed calls'
    verification limit (harness.checks.verify_limit of the bound and accumulator). Part (3) for
    every candidate that passed the rest: from ``dense`` (the per-call rounds' own dense graphs) where it has the
    candidate, else :func:`check_dense` now."""
    dense = dense or {}
    passed: dict[str, dict[str, Any]] = {}
    for label in [lb for lb in labels if sc.subjects[lb].kind == "candidate" and sc.status[lb] == "ok"]:
        if timing_mode == "both":
            if label in chained and label in timed:
                ok, det = ck.fresh_verdict(chained[label]["median_ms"], timed[label]["median_ms"])
                fields = {"fresh_ms": timed[label]["median_ms"], "same_ms": chained[label]["median_ms"]}
            else:
                continue
        elif timing_mode == "chained":
            gr = next((x for x in graphs if x.label == label), None)
            if gr is None:
                continue
            try:
                ok, det, fields = check_fresh(sc.cp, sc.s, sc.ctx, sc.subjects[label].call, gr,
                                              timed[label]["median_ms"], bound, rng, sc.nan, limit)
            except Exception as e:
                if is_sticky(e):
                    raise Sticky(f"{label}: {e}", label) from e
                ok, det, fields = False, f"fresh-input check failed: {type(e).__name__}: {str(e)[:200]}", {}
        else:
            ok, det, fields = True, "", {}
        if not ok:
            sc.charge(label, "fresh", ok, det, **fields)
        elif label in dense:
            ok, det, got = dense[label]
            sc.charge(label, "fresh", ok, det, **{**fields, **got})
        else:
            passed[label] = fields
    dense_checks(sc, list(passed), limit, rng, passed)
