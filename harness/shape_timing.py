"""The timing half of one shape's evaluation, inside the GPU worker, and the checks that read it.

Offline: the back-to-back graphs (harness.timing.make_graph) and the per-call graphs
(:class:`PerCallGraphs`, with each candidate's dense-change twin) replayed in the same interleaved
rounds; then ``graph_replay`` (each timed graph twice more, on poisoned C), ``timed_calls`` (per
call: every timed call was verified by its separator) and ``fresh`` (harness.shape_fresh).
Server: Poisson-spaced calls, each verified (:class:`ServerVerification`), then the dense part of
``fresh``.
Also the cuBLASLt autotune, screened with the headline's method before the autotuned baseline is
checked.

Every function takes the shape's harness.shape_eval.ShapeChecks, whose records the failures
are charged to; the order of GPU work is the order of the calls here.
"""

from __future__ import annotations

import ctypes
import math
import random
import time
from typing import Any, Callable

from .cupy_types import DeviceArray
from . import baselines as bl
from . import checks as ck
from . import timing
from .cuda_errors import Sticky, is_sticky
from .shape_eval import FOREIGN_WORK_MS, GRAPH_REPLAYS, SeedChecks, ShapeChecks, ShapeContext, Subjects, \
    device_busy_ms, foreign_work_detail
from .shape_fresh import dense_checks, fresh_checks
from .gpu import Gpu

SEPARATOR_LABEL = "(separator)"
PER_CALL_PREFIX = "(per call) "
DENSE_PREFIX = "(dense) "
DENSE_SEPARATOR_LABEL = "(separator, dense)"


# --------------------------------------------------------------------------- cuBLASLt autotune


def _lt_version(shim: ctypes.CDLL) -> int | None:
    """cuBLASLt's version: an export pins an autotuned index only for the library that listed it."""
    try:
        return int(shim.l2_lt_version())
    except (AttributeError, TypeError, ValueError):   # a shim built before the entry existed
        return None


def autotune(g: Gpu, shim: ctypes.CDLL, call: Callable[[], int], shape: tuple[int, int, int], acc: str, count: int,
             timing_mode: str, separator: tuple[Callable[[], int], Callable[[], int]],
             budget_s: float, dtype: str = "fp16") -> tuple[int, dict[str, Any]]:
    """Screen cuBLASLt's heuristic algorithms (in heuristic order) with the headline's method,
    keep the fastest in the shim's autotune slot.

    Cap: at most AUTOTUNE_MAX_CANDIDATES; after ``budget_s`` of wall time no new candidate is
    screened once AUTOTUNE_MIN_CANDIDATES have been. Screening graphs last >= 0.2 ms and get 3
    replays; per call (``isolated``) each screened call follows the separator, whose own graph
    is subtracted, as in the timing. The winner is then checked and timed like every subject.
    ``dtype`` picks the shim's plan of that element type (harness.baselines.lt_mode)."""
    m, n, k = shape
    f16 = bl.lt_mode(acc, dtype)
    key = (m, n, k, acc, timing_mode, dtype)
    if key in g.autotune:
        shim.l2_lt_select(m, n, k, f16, 1, g.autotune[key])
        return g.autotune[key], {"cached": True, "available": count, "best_index": g.autotune[key],
                                 "requested": bl.AUTOTUNE_MAX_CANDIDATES, "cublaslt_version": _lt_version(shim)}
    cp, s = g.cp, g.stream
    per_call = timing_mode != "chained"
    est = None
    results: list[tuple[float, int]] = []
    t0 = time.monotonic()
    tried = 0
    for idx in range(min(count, bl.AUTOTUNE_MAX_CANDIDATES)):
        if tried >= bl.AUTOTUNE_MIN_CANDIDATES and time.monotonic() - t0 > budget_s:
            break
        tried += 1
        if shim.l2_lt_select(m, n, k, f16, 1, idx) != 0:
            continue
        try:
            if est is None:
                est = timing.estimate_ms(cp, s, call)
            elif call() != 0:
                continue
            s.synchronize()
            reps = timing.reps_for(est, 0.2, 200)
            if per_call:
                graphs, gb = timing.isolated_graphs(cp, s, {str(idx): call}, {str(idx): separator}, separator, reps,
                                                    base_label="base")
                t = timing.offline(cp, s, [*graphs, *([gb] if gb is not None else [])], replays=3)
                ms = timing.per_call(t, [str(idx)], "base")[str(idx)]["median_ms"]
            else:
                gr = timing.Graph(str(idx), timing.capture(cp, s, call, reps), reps, est)
                ms = timing.offline(cp, s, [gr], replays=3)[str(idx)]["median_ms"]
            results.append((ms, idx))
        except Exception as e:
            if is_sticky(e):
                raise
            continue
    if not results:
        raise RuntimeError("autotune: no cuBLASLt candidate ran")
    best = min(results)[1]
    shim.l2_lt_select(m, n, k, f16, 1, best)
    g.autotune[key] = best
    return best, {"screened": len(results), "tried": tried, "available": count, "best_index": best,
                  "requested": bl.AUTOTUNE_MAX_CANDIDATES, "cublaslt_version": _lt_version(shim),
                  "method": timing.MODE_LABELS["isolated" if per_call else "chained"],
                  "seconds": round(time.monotonic() - t0, 3)}


def autotune_baseline(g: Gpu, shim: ctypes.CDLL, ctx: ShapeContext, subs: Subjects, acc: str, seed: int, timing_mode: str,
                      budget_s: float | None) -> dict[str, Any] | None:
    """Autotune the ``cublaslt_autotune`` subject before it is checked, so the checked algorithm
    is the timed one; returns the screening's record, or None when it failed (the subject is
    then dropped, its error recorded)."""
    cp, s = g.cp, g.stream
    A, B, C = ctx.A, ctx.B, ctx.C
    with s:   # time on random data, never on constants
        ck.fill_random(cp, seed, A.data, B.data, ctx.dtype)
    try:
        budget = bl.AUTOTUNE_SCREEN_BUDGET_S if budget_s is None else budget_s
        # screened per call behind the same separator as the timing (its verifications unread)
        sep = ck.Separator(cp, A.data, B.data, C.data, s, 1, 1 << 30, ctx.dtype)
        _, info = autotune(g, shim, subs.subjects["cublaslt_autotune"].call, ctx.key, acc, subs.lt_count or 0,
                           timing_mode, (sep.step, sep.tail), budget, ctx.dtype)
        return info
    except Exception as e:
        if is_sticky(e):
            raise Sticky(str(e), "cublaslt_autotune") from e
        subs.subjects.pop("cublaslt_autotune", None)
        subs.errors["cublaslt_autotune"] = f"{type(e).__name__}: {e}"[:300]
        return None


# --------------------------------------------------------------------------- per call


class PerCallGraphs:
    """The per-call (isolated) timing of one shape's subjects: the graphs of harness.timing, one
    separator per subject (harness.checks.Separator: it verifies the call before it and changes
    A for the one after) and one for the base graph, and the checks that read them.

    Why one step count for all: every graph then leaves A changed the same way, so the reference
    of the replay check is computed once per shape, not once per subject.

    Each subject of ``dense`` (the candidates) gets a second graph in the same rounds, part (3)
    of ``fresh``: the same steps with a dense change of A after the separator (harness.checks.
    SignFlipper), against a base graph of separator and flip. Inside the rounds, in random order
    with the timed graphs, and built like them: a kernel cannot tell the timed calls from the
    ones it is compared with, except by the dense change itself."""

    def __init__(self, g: Gpu, ctx: ShapeContext, calls: dict[str, Callable[[], int]], replays: int,
                 failed: Callable[[str, Exception], None],
                 dense: frozenset[str] | set[str] = frozenset()) -> None:
        self.g, self.ctx, self.calls = g, ctx, dict(calls)
        cp, s = g.cp, g.stream
        A, B, C = ctx.A, ctx.B, ctx.C
        self.graphs: list[timing.Graph] = []
        self.base: timing.Graph | None = None
        self.dense_graphs: list[timing.Graph] = []
        self.dense_base: timing.Graph | None = None
        self.dense_seps: dict[str, ck.Separator] = {}
        est: dict[str, float] = {}
        for label, call in list(self.calls.items()):
            try:
                est[label] = timing.estimate_ms(cp, s, call)
            except Exception as e:
                failed(label, e)
                self.calls.pop(label)
        if not self.calls:
            return
        self.reps = timing.reps_for(min(est.values()) + 0.003, cap=timing.MAX_ISOLATED_REPS)
        capacity = self.reps * (replays + 3)
        dt = ctx.dtype
        self.seps = {lb: ck.Separator(cp, A.data, B.data, C.data, s, capacity, self.reps, dt) for lb in self.calls}
        self.sep_base = ck.Separator(cp, A.data, B.data, C.data, s, capacity, self.reps, dt)
        dense_labels = [lb for lb in self.calls if lb in dense]
        if dense_labels:
            self.flip = ck.SignFlipper(cp, A.data, s)
            self.dense_seps = {lb: ck.Separator(cp, A.data, B.data, C.data, s, capacity, self.reps, dt)
                               for lb in dense_labels}
            self.dense_sep_base = ck.Separator(cp, A.data, B.data, C.data, s, capacity, self.reps, dt)
        # compiles and loads every kernel now, never inside a stream capture
        for label, call in self.calls.items():
            self.seps[label].step()
            call()
            self.seps[label].tail()
        self.sep_base.step()
        for label, sep in self.dense_seps.items():
            sep.step()
            self.flip.step()
            self.calls[label]()
            sep.tail()
        s.synchronize()
        self._capture(failed)
        for sp in (*self.seps.values(), self.sep_base, *self.dense_seps.values(),
                   *((self.dense_sep_base,) if self.dense_seps else ())):
            sp.reset()
        s.synchronize()

    def _capture(self, failed: Callable[[str, Exception], None]) -> None:
        """One per-call graph per subject (a subject whose capture fails is dropped), then the base."""
        cp, s = self.g.cp, self.g.stream
        for label, call in list(self.calls.items()):
            sep = self.seps[label]
            try:
                # a label of its own: with --timing both the back-to-back graph of the subject is
                # replayed in the same rounds under the subject's own label
                (gr,), _ = timing.isolated_graphs(cp, s, {PER_CALL_PREFIX + label: call},
                                                  {PER_CALL_PREFIX + label: (sep.step, sep.tail)}, None, self.reps)
                gr.subject = label
                self.graphs.append(gr)
            except Exception as e:
                failed(label, e)
                self.calls.pop(label, None)
        _, self.base = timing.isolated_graphs(cp, s, {}, {}, (self.sep_base.step, self.sep_base.tail), self.reps,
                                              base_label=SEPARATOR_LABEL)
        for label, sep in list(self.dense_seps.items()):
            if label not in self.calls:
                self.dense_seps.pop(label)
                continue

            def step(sep: ck.Separator = sep) -> int:
                sep.step()
                return self.flip.step()

            try:
                (gr,), _ = timing.isolated_graphs(cp, s, {DENSE_PREFIX + label: self.calls[label]},
                                                  {DENSE_PREFIX + label: (step, sep.tail)}, None, self.reps)
                gr.subject = label
                self.dense_graphs.append(gr)
            except Exception as e:
                failed(label, e)
                self.dense_seps.pop(label)
        if self.dense_graphs:
            def base_step() -> int:
                self.dense_sep_base.step()
                return self.flip.step()

            _, self.dense_base = timing.isolated_graphs(cp, s, {}, {}, (base_step, self.dense_sep_base.tail),
                                                        self.reps, base_label=DENSE_SEPARATOR_LABEL)

    def all_graphs(self) -> list[timing.Graph]:
        if not self.graphs or self.base is None:
            return []
        dense = [*self.dense_graphs, self.dense_base] if self.dense_graphs and self.dense_base is not None else []
        return [*self.graphs, self.base, *dense]

    def dense_verdicts(self, raw: dict[str, dict[str, Any]], per: dict[str, dict[str, Any]], replays: int,
                       limit: float) -> dict[str, tuple[bool, str, dict[str, Any]]]:
        """Part (3) of ``fresh`` for every subject with a dense graph and a per-call time: every
        call of its dense graph verified, and per call (its base subtracted, as for the timed
        graph) within :func:`harness.checks.dense_verdict` of the timed per-call time."""
        if not self.dense_graphs:
            return {}
        assert self.dense_base is not None   # captured with the dense graphs
        self.g.stream.synchronize()
        dense = timing.per_call(raw, [gr.label for gr in self.dense_graphs], self.dense_base.label)
        expected = self.reps * (replays + 1)
        out = {}
        for gr in self.dense_graphs:
            if gr.subject not in per:
                continue
            one_ms, d = per[gr.subject]["median_ms"], dense[gr.label]
            worst = self.dense_seps[gr.subject].results()
            fields = {"one_ms": one_ms, "dense_ms": d["median_ms"], "flip_ms": d["separator_ms"],
                      "dense_reps": self.reps, "dense_verified_calls": len(worst),
                      "dense_verify_worst": max(worst) if worst else None, "dense_spread": d["spread"]}
            ok, det = ck.verify_verdict(worst, expected, limit)
            if not ok:
                out[gr.subject] = (False, f"after a dense change of A: {det}", fields)
                continue
            ok, det = ck.dense_verdict(one_ms, d["median_ms"])
            out[gr.subject] = (ok, det, fields)
        return out

    def per_call(self, raw: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        assert self.base is not None   # captured with the per-call graphs
        per = timing.per_call(raw, [gr.label for gr in self.graphs], self.base.label)
        return {gr.subject: per[gr.label] for gr in self.graphs}

    def verdicts(self, replays: int, limit: float) -> dict[str, tuple[bool, str, dict[str, Any]]]:
        """Every timed call (the warm-up replay's and the timed ones) verified on sampled rows."""
        self.g.stream.synchronize()
        expected = self.reps * (replays + 1)
        out = {}
        for gr in self.graphs:
            worst = self.seps[gr.subject].results()
            fields = {"verified_calls": len(worst), "verified_rows": ck.SEPARATE_ROWS,
                      "verify_worst": max(worst) if worst else None, "verify_limit": limit, "reps": self.reps}
            ok, det = ck.verify_verdict(worst, expected, limit)
            out[gr.subject] = (ok, det, fields)
        return out

    def _reset(self, a0: DeviceArray, sep: ck.Separator) -> None:
        with self.g.stream:
            self.ctx.A.data[...] = a0
        sep.reset()

    def replay_checks(self, sc: ShapeChecks, a0: DeviceArray, bound: float) -> dict[str, tuple[bool, str]]:
        """Each per-call graph replayed GRAPH_REPLAYS times more from the same start, C poisoned
        before the first: C must be fully written, the guards and inputs untouched, and C right for
        the inputs the graph's last call saw (one reference for all: every graph changes A the
        same way)."""
        cp, s, A = self.g.cp, self.g.stream, self.ctx.A
        inputs = sc.inputs
        assert self.base is not None   # captured with the per-call graphs
        self._reset(a0, self.sep_base)
        for _ in range(GRAPH_REPLAYS):   # as many launches as sc.replay_graph makes of each graph
            self.base.graph.launch(s)
        s.synchronize()
        with s:
            a_final = A.data.copy()
            ref = ck.reference(cp, A.data, self.ctx.B.data, self.ctx.dtype)
            norm = ck.ref_norm(cp, ref)
        saved, inputs["A"] = inputs.get("A"), a_final
        out = {}
        try:
            for gr in self.graphs:
                self._reset(a0, self.seps[gr.subject])
                err = sc.replay_graph(gr.graph, gr.subject, "per-call graph replay", ref, norm)
                out[gr.subject] = (err <= bound, f"after the per-call graph: rel. error {err:.3g} > bound {bound:.3g}"
                                   if err > bound else "")
        finally:
            del ref
            if saved is not None:
                inputs["A"] = saved
            with s:
                A.data[...] = a0
        return out

    def close(self) -> None:
        self.graphs.clear()
        self.base = None
        self.seps = {}
        self.dense_graphs.clear()
        self.dense_base = None
        self.dense_seps = {}


# --------------------------------------------------------------------------- offline


def _chained_graphs(sc: ShapeChecks, labels: list[str]) -> list[timing.Graph]:
    """One back-to-back graph per subject (a subject whose capture fails is charged and left out)."""
    graphs: list[timing.Graph] = []
    for label in labels:
        try:
            graphs.append(timing.make_graph(sc.cp, sc.s, label, sc.subjects[label].call))
        except Exception as e:
            sc.timing_failed(label, e)
    return graphs


def _bound(seeds: SeedChecks) -> float:
    """The accuracy bound the seeds set; NaN (every comparison with it fails) when no seed ran, so
    nothing passes a check that had no bound to hold to."""
    return seeds.bound if seeds.bound is not None else math.nan


def _replay_chained(sc: ShapeChecks, graphs: list[timing.Graph], seeds: SeedChecks) -> None:
    """``graph_replay`` of the back-to-back graphs: each once more on poisoned C and re-verified."""
    bound = _bound(seeds)
    for gr in graphs:
        err = sc.replay_graph(gr.graph, gr.label, "graph replay", seeds.ref,
                              seeds.norm if seeds.norm is not None else math.nan)
        sc.charge(gr.label, "graph_replay", err <= bound,
                  f"after the timed graph: rel. error {err:.3g} > bound {bound:.3g}" if err > bound else "")


def _per_call_checks(sc: ShapeChecks, iso: PerCallGraphs, raw: dict[str, dict[str, Any]], replays: int,
                     limit: float, a0: DeviceArray, bound: float, errors: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The per-call times (a subject whose time is not measurable goes to ``errors``), then
    ``timed_calls`` and ``graph_replay`` of the per-call graphs."""
    per = iso.per_call(raw)
    for label, v in list(per.items()):
        if not (v["median_ms"] > 0):   # the separator's own time was not the same with and without the call
            errors[label] = (f"per-call time not measurable: the step with the call took {v['step_ms'] * 1e3:.2f} us, "
                             f"the separator alone {v['separator_ms'] * 1e3:.2f} us")
            per.pop(label)
    for label, (ok, det, fields) in iso.verdicts(replays, limit).items():
        sc.charge(label, "timed_calls", ok, det, **fields)
    for label, (ok, det) in iso.replay_checks(sc, a0, bound).items():
        sc.charge(label, "graph_replay", ok, det)
    return per


def time_offline(g: Gpu, sc: ShapeChecks, labels: list[str], timing_mode: str, replays: int, rng: random.Random,
                 seeds: SeedChecks, limit: float,
                 errors: dict[str, str]) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """Offline timing of ``labels`` and the checks that read it; returns (the headline times,
    the back-to-back times): the per-call ones unless ``timing_mode`` is chained."""
    cp, s = g.cp, g.stream
    A = sc.ctx.A
    with s:
        a0 = A.data.copy()     # the checks' last inputs: A is restored to them after timing
    graphs: list[timing.Graph] = []
    if timing_mode in ("chained", "both"):
        graphs = _chained_graphs(sc, labels)
    iso = None
    if timing_mode in ("isolated", "both"):
        iso = PerCallGraphs(g, sc.ctx, {lb: sc.subjects[lb].call for lb in labels},
                            replays, sc.timing_failed,
                            dense={lb for lb in labels if sc.subjects[lb].kind == "candidate"})
    sc.idle_before_timing(labels, "before the timed rounds")
    raw = timing.offline(cp, s, graphs + (iso.all_graphs() if iso else []), replays=replays, rng=rng) \
        if graphs or (iso and iso.graphs) else {}
    chained = {gr.label: raw[gr.label] for gr in graphs}
    with s:
        A.data[...] = a0
    _replay_chained(sc, graphs, seeds)
    if iso is not None and iso.graphs:
        timed = _per_call_checks(sc, iso, raw, replays, limit, a0, _bound(seeds), errors)
        dense = iso.dense_verdicts(raw, timed, replays, limit)
        iso.close()
    else:
        timed, dense = chained, {}
    fresh_checks(sc, labels, timing_mode, graphs, timed, chained, _bound(seeds), rng, dense, limit)
    del graphs
    return timed, chained


# --------------------------------------------------------------------------- server


class ServerVerification:
    """What surrounds every timed server call: before it, one element of A changed and, on a
    random half of the calls, C poisoned (untimed, synchronised); after it, the changed row and
    others verified on the GPU. So a kernel that skips work when C holds its last result, or
    computes only when C is poisoned, or memoizes by content, fails its own subject.

    The verification reads A as it is after the call, so a call that wrote A (zeroed it, say, and
    C with it) would verify; ``shadow`` is A as the calls were given it (the same one-element
    changes, made by a second perturbing kernel on a copy), compared with A after the last call
    (:meth:`inputs_kept`)."""

    def __init__(self, g: Gpu, ctx: ShapeContext, labels: list[str], calls_per_subject: int,
                 nan: DeviceArray, candidates: frozenset[str] | set[str] = frozenset(),
                 leave_work: Callable[[list[str]], dict[str, float]] | None = None) -> None:
        cp, s = g.cp, g.stream
        self.cp, self.s, self.C, self.nan = cp, s, ctx.C, nan
        self.calls_per_subject = calls_per_subject
        self.candidates = set(candidates)
        self.last: str | None = None
        self.foreign: dict[str, float] = {}
        self.leave_work = leave_work
        with s:
            self.pert = ck.Perturber(cp, ctx.A.data, s, ctx.dtype)
            self.vers = {lb: ck.Verifier(cp, ctx.A.data, ctx.B.data, ctx.C.data, s, capacity=calls_per_subject + 2,
                                         changed_row=self.pert.row, dtype=ctx.dtype) for lb in labels}
        self.pert.step()
        for v in self.vers.values():
            v.step()
        s.synchronize()
        for v in self.vers.values():
            v.reset()
        self.A = ctx.A
        with s:
            self.shadow = ctx.A.data.copy()
            self.shadow_pert = ck.Perturber(cp, self.shadow, s, ctx.dtype)
            self.shadow_pert.counter[...] = self.pert.counter   # the same changes from here on

    def before(self, label: str, poison: bool) -> None:
        # every call starts on an idle device: work a candidate's call left running on another
        # stream is waited for here, untimed, and charged to that candidate (after the warm-up
        # calls, to the candidates that leave work again when called alone)
        busy = device_busy_ms(self.cp, self.s)
        if busy > FOREIGN_WORK_MS:
            if self.last is not None:
                blamed = {self.last: busy} if self.last in self.candidates else {}
            else:
                found = self.leave_work(sorted(self.candidates)) if self.leave_work else {}
                blamed = found or {lb: busy for lb in self.candidates}
            for lb, ms in blamed.items():
                self.foreign[lb] = max(ms, self.foreign.get(lb, 0.0))
        self.pert.step()
        self.shadow_pert.step()
        if poison:
            with self.s:
                self.C.data.fill(self.nan)

    def after(self, label: str) -> None:
        self.vers[label].step()
        self.last = label

    def inputs_kept(self) -> int:
        """How many elements of A differ from what the calls were given (A is restored to it)."""
        cp = self.cp
        with self.s:
            changed = int(cp.count_nonzero(self.A.data.view(cp.uint16) != self.shadow.view(cp.uint16)))
            if changed:
                self.A.data[...] = self.shadow
        self.s.synchronize()
        return changed

    def verdicts(self, limit: float) -> dict[str, tuple[bool, str, dict[str, Any]]]:
        self.s.synchronize()
        out = {}
        for label, v in self.vers.items():
            worst = v.results()
            ok, det = ck.verify_verdict(worst, self.calls_per_subject, limit)
            if not ok:
                det = "server mode: " + det
            out[label] = (ok, det, {"verified_calls": len(worst), "verify_worst": max(worst) if worst else None,
                                    "verify_limit": limit})
        return out


def time_server(g: Gpu, sc: ShapeChecks, labels: list[str], qps: float, server_calls: int, rng: random.Random,
                limit: float) -> dict[str, dict[str, Any]]:
    """Server-mode timing of ``labels`` with every timed call verified (``timed_calls``) within
    ``limit``, then part (3) of ``fresh`` for the candidates: every server call follows a change of
    one element of A, as every per-call one does."""
    calls = {lb: sc.subjects[lb].call for lb in labels}
    if not calls:
        return {}
    srv = ServerVerification(g, sc.ctx, list(calls), server_calls, sc.nan,
                             candidates={lb for lb in labels if sc.subjects[lb].kind == "candidate"},
                             leave_work=sc.leave_work)
    sc.idle_before_timing(labels, "before the server calls")
    timed = timing.server(g.cp, g.stream, calls, qps=qps, calls_per_subject=server_calls, rng=rng,
                          before=srv.before, after=srv.after)
    for label, busy in srv.foreign.items():
        sc.charge(label, "runs", False, foreign_work_detail(busy, "between server calls"))
    moved = srv.inputs_kept()
    if moved:   # which call wrote A is not known: every candidate (the libraries leave their inputs)
        for label in srv.candidates:
            sc.charge(label, "inputs", False, f"the server calls wrote their inputs: {moved} elements of A "
                                              "differ from what they were given")
    for label, (ok, det, fields) in srv.verdicts(limit).items():
        sc.charge(label, "timed_calls", ok, det, **fields)
    dense_checks(sc, labels, limit, rng)
    return timed
