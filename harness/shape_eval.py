"""The correctness half of one shape's evaluation, inside the GPU worker: the shape's guarded
buffers, the subjects (candidates and baselines) that write them, the bookkeeping every check
shares and one function per check of the ``runs`` ... ``deterministic`` list of harness.checks.

harness.worker_main.evaluate_shape runs these in order, then harness.shape_timing times the
subjects that passed and harness.shape_result assembles the answer. Nothing here imports cupy:
``cp`` comes from the worker's harness.gpu.Gpu.
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from .cupy_types import CudaGraph, CudaStream, CupyModule, DeviceArray
from . import baselines as bl
from . import checks as ck
from .build import ENTRY_POINTS
from .cuda_errors import Sticky, is_sticky
from .gpu import Gpu


# --------------------------------------------------------------------------- buffers


#: launches of a timed graph in its ``graph_replay`` check. Two: C is poisoned before the first
#: only, so the calls of the second follow an unpoisoned C as every timed call does. With one, a
#: graph of one call (R = 1, calls of a millisecond or more) would run only on a poisoned C, and a
#: kernel that behaves when C is poisoned (and writes its inputs, or accumulates in fp16,
#: otherwise) would never be replayed as it runs when timed
GRAPH_REPLAYS = 2

#: how long the GPU may stay busy once the caller's stream has finished before a candidate's call
#: counts as having left work of its own running (an idle device answers in microseconds)
FOREIGN_WORK_MS = 20.0


def device_busy_ms(cp: CupyModule, s: CudaStream) -> float:
    """Milliseconds the device stays busy after ``s`` has finished (a device-wide synchronise).

    Why: a candidate's host code can launch a kernel on a stream other than the caller's (the
    legacy default one needs no name) that keeps running, to load the GPU while the libraries are
    timed in the rounds that follow; no check of C sees it. Whatever runs at the start of the
    timed rounds has to be running at this probe too, and makes it wait; one that never ends
    makes it hang, and the worker's timeout charges the candidate.

    The host's clock says how long the synchronise took; past FOREIGN_WORK_MS that may be the host
    itself (a worker descheduled while builds use every core), so the answer is then the GPU's
    own: how long after ``s`` was done an event on the legacy default stream completed (the only
    streams a candidate reaches without a name, the legacy and the per-thread default stream,
    are both behind it; the source policy refuses creating streams)."""
    s.synchronize()
    ours, legacy = cp.cuda.Event(), cp.cuda.Event()
    ours.record(s)
    legacy.record(cp.cuda.Stream.null)
    t0 = time.perf_counter()
    cp.cuda.runtime.deviceSynchronize()
    host_ms = (time.perf_counter() - t0) * 1e3
    if host_ms <= FOREIGN_WORK_MS:
        return host_ms
    return max(0.0, float(cp.cuda.get_elapsed_time(ours, legacy)))


def foreign_work_detail(busy_ms: float, where: str) -> str:
    return (f"left work running on the GPU outside the caller's stream: the device stayed busy {busy_ms:.0f} ms "
            f"after the stream had finished ({where}); a GEMM call enqueues all its work on `stream`")


class ShapeContext:
    """Guarded buffers of one shape in one element type, allocated once and reused by every
    subject and request. ``dtype`` ("fp16" or "bf16") says what their 16-bit elements are: bf16
    lives in uint16 buffers (harness.checks.storage_dtype), so every check reads it through
    harness.checks' codec, never as fp16."""

    def __init__(self, g: Gpu, m: int, n: int, k: int, dtype: str = "fp16") -> None:
        cp = g.cp
        self.key = (m, n, k)
        self.dtype = dtype
        elem = ck.storage_dtype(cp, dtype)
        with g.stream:
            self.A = ck.GuardedBuffer(cp, (m, k), elem)
            self.B = ck.GuardedBuffer(cp, (k, n), elem)
            self.Bt = ck.GuardedBuffer(cp, (n, k), elem)   # column-major copy of B for cuBLAS TN
            self.C = ck.GuardedBuffer(cp, (m, n), elem)
        self.buffers = (self.A, self.B, self.Bt, self.C)

    def bad_guards(self) -> int:
        total = self.A.bad_guard_bytes()
        for b in self.buffers[1:]:
            total = total + b.bad_guard_bytes()
        return int(total)

    def reset_guards(self) -> None:
        for b in self.buffers:
            b.reset_guards()

    def close(self) -> None:
        """Nothing to release: the shim keeps its cuBLASLt plans (a bounded table) itself."""


def shape_ctx(g: Gpu, m: int, n: int, k: int, dtype: str = "fp16") -> ShapeContext:
    """The worker's buffers for this shape and element type: the last request's when it was the
    same (no reallocation between the evaluations of one shape), else fresh ones after freeing
    the old."""
    if isinstance(g.ctx, ShapeContext) and g.ctx.key == (m, n, k) and g.ctx.dtype == dtype:
        return g.ctx
    if g.ctx is not None:
        g.stream.synchronize()
        g.ctx.close()
        g.ctx = None
        g.cp.get_default_memory_pool().free_all_blocks()
    ctx = ShapeContext(g, m, n, k, dtype)
    g.ctx = ctx
    return ctx


# --------------------------------------------------------------------------- subjects


@dataclass
class Subjects:
    """What was asked for on this shape: the subjects that can run, and why the others cannot.

    ``absent`` (a baseline this machine lacks) and ``errors`` (one that failed to set up) become
    statuses of their own in the result; ``refused`` holds the candidates whose library does not
    export the entry point of the request's element type (one line each: they are never called
    and come back ``unsupported``); ``lt_count`` is how many cuBLASLt algorithms the shim
    planned (None when no cuBLASLt baseline was asked for); ``autotune_pending`` says the
    cuBLASLt autotune subject still has to screen them before it is checked."""

    subjects: dict[str, bl.Subject] = field(default_factory=dict)
    absent: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    lt_count: int | None = None
    autotune_pending: bool = False


def lt_plan(shim: ctypes.CDLL, m: int, n: int, k: int, acc: str, dtype: str = "fp16") -> int:
    """cuBLASLt's heuristic algorithms for this shape, accumulator and element type, planned in
    the shim; returns how many."""
    count = int(shim.l2_lt_plan(m, n, k, bl.lt_mode(acc, dtype), bl.AUTOTUNE_MAX_CANDIDATES))
    if count <= 0:
        raise RuntimeError(f"cuBLASLt heuristic returned no algorithm (shim status {count})")
    return count


def entry_refusal(lib: ctypes.CDLL, dtype: str) -> str | None:
    """Why a candidate library cannot be called in ``dtype`` (one line), or None when it exports
    that element type's entry point (harness.build.ENTRY_POINTS).

    Why: an fp16 kernel handed bf16 bits (or the reverse) reads every input as another number and
    writes plausible garbage; it is refused by name, before any call."""
    want = ENTRY_POINTS[dtype]
    if hasattr(lib, want):
        return None
    has = [f"{name} ({dt})" for dt, name in ENTRY_POINTS.items() if dt != dtype and hasattr(lib, name)]
    if has:
        return (f"the library exports {has[0]}, not {want}: it takes another element type than this "
                f"{dtype} evaluation")
    return f"the library exports no {want}: it cannot be called in {dtype}"


def _never_called() -> int:
    """The call of a refused candidate: never made (ShapeChecks.refuse takes it off ``alive``)."""
    raise RuntimeError("a refused candidate was called")


def candidate_subjects(g: Gpu, ctx: ShapeContext, candidates: list[dict[str, Any]], out: Subjects) -> None:
    """One subject per candidate library, called through its entry point for ``ctx.dtype``; a
    library without it goes to ``out.refused`` (and gets a subject that is never called)."""
    m, n, k = ctx.key
    A, B, C = ctx.A, ctx.B, ctx.C
    sp = int(g.stream.ptr)
    for c in candidates:
        label = c["label"]
        lib = g.lib(c["so_path"])
        why = entry_refusal(lib, ctx.dtype)
        if why is not None:
            out.refused[label] = why
            out.subjects[label] = bl.Subject(label, _never_called, kind="candidate")
            continue
        fn = bl.ctypes_fn(lib, ENTRY_POINTS[ctx.dtype])
        b_ptr = ctx.Bt.ptr if c.get("b_layout") == "col" else B.ptr   # harness.foreign: the column-major copy
        out.subjects[label] = bl.abi_subject(label, fn, A.ptr, b_ptr, C.ptr, m, n, k, sp, kind="candidate",
                                             nondeterministic=bool(c.get("nondeterministic")))


def _baseline(g: Gpu, shim: ctypes.CDLL, ctx: ShapeContext, acc: str, name: str, light: bool, out: Subjects) -> None:
    """The subject(s) of one baseline in the accumulator and element type of the request (the
    shim's entry points by harness.baselines.shim_entry; torch on bfloat16 views for bf16)."""
    m, n, k = ctx.key
    A, B, Bt, C = ctx.A, ctx.B, ctx.Bt, ctx.C
    sp = int(g.stream.ptr)
    dtype = ctx.dtype
    subjects = out.subjects

    def entry(base: str) -> Callable[..., int]:
        return bl.ctypes_fn(shim, bl.shim_entry(base, acc, dtype))

    if name == "cublas":
        subjects["cublas_nn"] = bl.abi_subject("cublas_nn", entry("l2_hgemm"), A.ptr, B.ptr, C.ptr, m, n, k, sp,
                                               light=light)
        subjects["cublas_tn"] = bl.abi_subject("cublas_tn", entry("l2_hgemm_tn"), A.ptr, Bt.ptr, C.ptr, m, n, k, sp,
                                               light=light)
    elif name in ("cublaslt_heuristic", "cublaslt_autotune"):
        if out.lt_count is None:
            out.lt_count = lt_plan(shim, m, n, k, acc, dtype)
        base = "l2_hgemm_lt_heur" if name == "cublaslt_heuristic" else "l2_hgemm_lt_auto"
        subjects[name] = bl.abi_subject(name, entry(base), A.ptr, B.ptr, C.ptr, m, n, k, sp, light=light)
        if name == "cublaslt_autotune":
            out.autotune_pending = True
    elif name == "torch":
        if acc == "f16":
            out.absent[name] = "torch.matmul has no fp16-accumulate mode"
            return
        why = bl.torch_available()
        if why:
            out.absent[name] = why
            return
        import torch

        torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
        subjects[name] = bl.torch_subject(name, A.data, B.data, C.data, sp, dtype=dtype, light=light)
    else:
        out.absent[name] = "unknown baseline"


def build_subjects(g: Gpu, shim: ctypes.CDLL, ctx: ShapeContext, acc: str, candidates: list[dict[str, Any]],
                   baselines: list[str], light: bool) -> Subjects:
    """One subject per candidate library and per baseline, all on the same guarded buffers and
    stream (in the element type ``ctx.dtype``), so every one of them is checked and timed by the
    same code."""
    out = Subjects()
    candidate_subjects(g, ctx, candidates, out)
    for name in baselines:
        try:
            _baseline(g, shim, ctx, acc, name, light, out)
        except Exception as e:
            if is_sticky(e):
                raise Sticky(str(e), name) from e
            out.errors[name] = f"{type(e).__name__}: {e}"[:300]
    return out


# --------------------------------------------------------------------------- bookkeeping


class ShapeChecks:
    """The check records of every subject on one shape, and the steps every check shares: run a
    subject on poisoned C, look at what it wrote and overwrote, charge a failure to it.

    ``alive`` loses a subject when a call of it raises or returns non-zero (it is neither checked
    further nor timed); ``status`` is filled by :meth:`set_statuses` once the checks before the
    timing are done, and a later failure (``charge``) turns an ``ok`` into ``wrong``."""

    def __init__(self, cp: CupyModule, s: CudaStream, ctx: ShapeContext, subjects: dict[str, bl.Subject],
                 status: dict[str, str]) -> None:
        self.cp, self.s, self.ctx = cp, s, ctx
        self.m, self.n, self.k = ctx.key
        self.subjects = subjects
        self.status = status
        self.recs = {label: ck.CheckRecord() for label in subjects}
        self.alive = dict(subjects)
        self.dtype: str = ctx.dtype
        self.ref_bias: float | None = None   # cuBLAS's rounding bias on the current inputs (bf16 only)
        self.nan = ck.nan_value(cp, self.dtype)
        self.inputs: dict[str, Any] = {}   # copies of A and B as last filled: a call must leave them as they are
        self.prev: dict[str, Any] = {}     # each subject's last C, for the stale check

    def refuse(self, label: str, why: str) -> None:
        """A candidate that cannot be called in this element type: ``runs`` fails with ``why``,
        its status is ``unsupported``, and it is never called, checked or timed."""
        rec = self.recs[label]
        rec.put("runs", False, why)
        rec.unsupported = True
        self.alive.pop(label, None)

    def run(self, subj: bl.Subject) -> int | None:
        """One call of ``subj`` on poisoned C; 0 when it ran, None (and ``runs`` failed) when not."""
        s, recs = self.s, self.recs
        self.ctx.reset_guards()   # whatever an earlier call did to them was charged to it (or to nobody), not to this one
        with s:
            self.ctx.C.data.fill(self.nan)
        try:
            rc = subj.call()
            s.synchronize()
            busy = device_busy_ms(self.cp, s) if subj.kind == "candidate" else 0.0
        except Exception as e:
            if is_sticky(e):
                raise Sticky(f"{subj.label}: {e}", subj.label) from e
            recs[subj.label].put("runs", False, f"raised {type(e).__name__}: {str(e)[:200]}")
            self.alive.pop(subj.label, None)
            return None
        if busy > FOREIGN_WORK_MS:
            recs[subj.label].put("runs", False, foreign_work_detail(busy, "after one of its calls"))
            self.alive.pop(subj.label, None)
            return None
        if rc:
            recs[subj.label].put("runs", False, f"{ENTRY_POINTS[self.dtype]} returned {rc} (unsupported shape)")
            recs[subj.label].unsupported = True
            self.alive.pop(subj.label, None)
            return None
        recs[subj.label].put("runs", True)
        return 0

    def keep_inputs(self) -> None:
        with self.s:
            self.inputs["A"], self.inputs["B"] = self.ctx.A.data.copy(), self.ctx.B.data.copy()
            self.inputs["Bt"] = self.ctx.Bt.data.copy()   # read by cuBLAS TN and column-major candidates

    def written_guards(self, label: str, tag: str, name_w: str = "written", name_g: str = "guards") -> None:
        """The ``written``, ``guards`` and ``inputs`` checks of the call just made (under other
        names for a graph replay); inputs the call changed are restored for the next subject."""
        cp, s, ctx, inputs = self.cp, self.s, self.ctx, self.inputs
        A, B, Bt, C = ctx.A, ctx.B, ctx.Bt, ctx.C
        rec = self.recs[label]
        with s:
            unwritten = ck.count_unwritten(cp, C.data, self.dtype)
            bad = ctx.bad_guards()
            changed = {nm: int(cp.count_nonzero(buf.data.view(cp.uint16) != inputs[nm].view(cp.uint16)))
                       for nm, buf in (("A", A), ("B", B), ("Bt", Bt)) if nm in inputs}
            for nm, buf in (("A", A), ("B", B), ("Bt", Bt)):
                if changed.get(nm):
                    buf.data[...] = inputs[nm]   # restore, so the next subject sees the same inputs
        if bad:
            ctx.reset_guards()
        m, n = self.m, self.n
        rec.put(name_w, unwritten == 0, f"{unwritten} of {m * n} elements of C not written ({tag})" if unwritten else "")
        rec.put(name_g, bad == 0, f"{bad} guard bytes around A/B/C overwritten ({tag})" if bad else "")
        moved = ", ".join(f"{v} elements of {nm}" for nm, v in changed.items() if v)
        rec.put("inputs", not moved, f"the call wrote its inputs: {moved} changed ({tag})" if moved else "")

    def check_stale(self, label: str, tag: str) -> None:
        """The ``stale`` check: new inputs in the same buffers must change the subject's output."""
        p = self.prev.get(label)
        if p is None:
            return
        with self.s:
            same = bool(self.cp.array_equal(self.ctx.C.data, p))
        self.recs[label].put("stale", not same,
                             f"output unchanged after new inputs were written into the same buffers ({tag})" if same else "")

    def remember(self, label: str) -> None:
        with self.s:
            self.prev[label] = self.ctx.C.data.copy()

    def set_statuses(self) -> None:
        """Each subject's status after the checks before the timing."""
        for label, rec in self.recs.items():
            st = "unsupported" if rec.unsupported else ("ok" if rec.failed() is None else "wrong")
            self.status[label] = st

    def timeable(self, label: str) -> bool:
        """Timed: every baseline that still runs, and the candidates that passed every check."""
        subj = self.subjects[label]
        if label not in self.alive:
            return False
        return self.status[label] == "ok" if subj.kind == "candidate" else True

    def idle_before_timing(self, labels: list[str], where: str) -> None:
        """The device probe of :func:`device_busy_ms` once more right before timed calls (after
        every untimed call and graph capture of ``labels``; what it waits for cannot run into
        them). If the device was busy, each candidate of ``labels`` is called once more alone and
        probed: those that leave work again fail ``runs``; if none does, all of them fail it
        (an honest call leaves nothing)."""
        busy = device_busy_ms(self.cp, self.s)
        if busy <= FOREIGN_WORK_MS:
            return
        candidates = [lb for lb in labels if self.subjects[lb].kind == "candidate"]
        caught = self.leave_work(candidates)
        for label in caught or candidates:
            self.charge(label, "runs", False, foreign_work_detail(caught.get(label, busy), where))

    def leave_work(self, labels: list[str]) -> dict[str, float]:
        """Each of ``labels`` called once more alone and the device probed after it: the ones
        that leave work running off the stream, with how long the device stayed busy."""
        caught: dict[str, float] = {}
        for label in labels:
            try:
                self.subjects[label].call()
                again = device_busy_ms(self.cp, self.s)
            except Exception as e:
                if is_sticky(e):
                    raise Sticky(f"{label}: {e}", label) from e
                continue
            if again > FOREIGN_WORK_MS:
                caught[label] = again
        return caught

    def charge(self, label: str, name: str, ok: bool, det: str, **fields: Any) -> None:
        """Record a check made during or after the timing; a failure makes an ``ok`` subject ``wrong``."""
        self.recs[label].put(name, ok, det, **fields)
        if not ok and self.status.get(label) == "ok":
            self.status[label] = "wrong"

    def timing_failed(self, label: str, e: Exception) -> None:
        """A subject whose timing graph could not be captured: ``graph_replay`` fails, it is ``wrong``."""
        if is_sticky(e):
            raise Sticky(f"{label}: {e}", label) from e
        try:
            self.cp.cuda.runtime.getLastError()
        except Exception:
            pass
        self.recs[label].put("graph_replay", False, f"CUDA graph capture failed: {type(e).__name__}: {str(e)[:200]}")
        self.status[label] = "wrong"

    def replay_graph(self, graph: CudaGraph, label: str, tag: str, ref: DeviceArray, norm: float) -> float:
        """GRAPH_REPLAYS more launches of a timed graph, alone, C poisoned before the first, with
        what they wrote and overwrote charged to ``graph_replay``; returns C's relative error
        against ``ref`` (the reference for the inputs after that many launches)."""
        s = self.s
        self.ctx.reset_guards()   # whatever the interleaved rounds did is charged to nobody: each replay alone
        with s:
            self.ctx.C.data.fill(self.nan)
        try:
            for _ in range(GRAPH_REPLAYS):
                graph.launch(s)
            s.synchronize()
        except Exception as e:
            if is_sticky(e):
                raise Sticky(f"{label}: {e}", label) from e
            raise
        self.written_guards(label, tag, "graph_replay", "graph_replay")
        return ck.rel_err(self.cp, self.ctx.C.data, ref, norm, self.dtype)


# --------------------------------------------------------------------------- the checks


@dataclass
class SeedChecks:
    """What the random-input checks leave for the timing and the result: the last seed's
    reference (the graph replays are checked against it), its norm and bound, and every
    seed's bound and cuBLAS shim errors (``e16s`` only with fp16 accumulation)."""

    ref: DeviceArray = None
    norm: float | None = None
    bound: float | None = None
    bounds: list[float] = field(default_factory=list)
    e32s: list[float] = field(default_factory=list)
    e16s: list[float] = field(default_factory=list)


def check_exact(sc: ShapeChecks, seed: int) -> None:
    """The ``exact`` check on 0/1 inputs (every subject but the light ones): bit for bit."""
    cp, s, ctx = sc.cp, sc.s, sc.ctx
    A, B, Bt, C = ctx.A, ctx.B, ctx.Bt, ctx.C
    with s:
        ck.fill_binary(cp, seed + 7919, A.data, B.data, sc.dtype)
        Bt.data[...] = B.data.T
    sc.keep_inputs()
    with s:
        expect = ck.from_float32(cp, ck.reference(cp, A.data, B.data, sc.dtype), sc.dtype)
    for label, subj in list(sc.alive.items()):
        if subj.light:
            continue
        if sc.run(subj) is None:
            continue
        sc.written_guards(label, "0/1 inputs")
        with s:
            bad = int(cp.count_nonzero(C.data != expect))
        sc.recs[label].put("exact", bad == 0,
                           f"{bad} of {sc.m * sc.n} elements differ from the exact result on 0/1 inputs" if bad else "")
        sc.remember(label)
    del expect


def shim_errors(sc: ShapeChecks, fn32: Callable[..., int], fn16: Callable[..., int], acc: str, sp: int,
                ref: DeviceArray, norm: float) -> tuple[float, float | None]:
    """The cuBLAS shim's own relative errors on the current inputs (fp32 accumulation, and fp16
    when ``acc`` is f16; ``fn32`` is the shim's GEMM in the shape's element type): they set the
    accuracy bound (harness.checks.bound_for)."""
    cp, s, C = sc.cp, sc.s, sc.ctx.C
    A, B = sc.ctx.A, sc.ctx.B
    m, n, k = sc.m, sc.n, sc.k
    with s:
        C.data.fill(sc.nan)
    if fn32(A.ptr, B.ptr, C.ptr, m, n, k, sp) != 0:
        raise RuntimeError("cuBLAS shim failed on this shape")
    s.synchronize()
    e32 = ck.rel_err(cp, C.data, ref, norm, sc.dtype)
    sc.ref_bias = ck.rounding_bias(cp, C.data, ref, sc.dtype) if sc.dtype == "bf16" else None
    e16 = None
    if acc == "f16":
        with s:
            C.data.fill(sc.nan)
        fn16(A.ptr, B.ptr, C.ptr, m, n, k, sp)
        s.synchronize()
        e16 = ck.rel_err(cp, C.data, ref, norm)
    return e32, e16


def check_accuracy(sc: ShapeChecks, label: str, tag: str, ref: DeviceArray, norm: float, bound: float) -> None:
    """The ``accuracy`` check of the call just made; the record keeps the worst error."""
    err = ck.rel_err(sc.cp, sc.ctx.C.data, ref, norm, sc.dtype)
    rec = sc.recs[label]
    if err > rec.rel_err or rec.bound == 0:
        rec.rel_err, rec.bound = err, bound
    if err > bound:
        rec.put("accuracy", False, f"rel. error {err:.3g} > bound {bound:.3g} ({tag})", rel_err=err, bound=bound)
        return
    rounded, why = (ck.rounding_verdict(ck.rounding_bias(sc.cp, sc.ctx.C.data, ref, sc.dtype), sc.ref_bias)
                    if sc.dtype == "bf16" else (True, ""))
    rec.put("accuracy", rounded, f"{why} ({tag})" if why else "", rel_err=err, bound=bound)


def check_deterministic(sc: ShapeChecks, label: str, subj: bl.Subject, tag: str, ref: DeviceArray, norm: float,
                        bound: float) -> None:
    """The ``deterministic`` check: a second run on the same inputs agrees bit for bit (within
    the bound for a source marked nondeterministic). C holds the first run's output."""
    cp, s, C = sc.cp, sc.s, sc.ctx.C
    with s:
        first = C.data.copy()
    if sc.run(subj) is not None:
        sc.written_guards(label, f"{tag}, second run")
        if subj.nondeterministic:
            e2 = ck.rel_err(cp, C.data, ref, norm, sc.dtype)
            ok = e2 <= bound
            det = "" if ok else f"second run: rel. error {e2:.3g} > bound {bound:.3g}"
        else:
            with s:
                diff = int(cp.count_nonzero(C.data != first))
            ok = diff == 0
            det = "" if ok else f"{diff} elements differ between two runs on the same inputs (a race?)"
        sc.recs[label].put("deterministic", ok, det)
    del first


def check_seeds(sc: ShapeChecks, seeds: tuple[int, ...], fn32: Callable[..., int], fn16: Callable[..., int],
                acc: str, sp: int) -> SeedChecks:
    """Random inputs, one seed after the other in the same buffers: ``written``, ``guards``,
    ``inputs``, ``stale`` and ``accuracy`` for every live subject (light ones on the last seed
    only), ``deterministic`` for candidates on the first seed."""
    cp, s, ctx = sc.cp, sc.s, sc.ctx
    A, B, Bt = ctx.A, ctx.B, ctx.Bt
    out = SeedChecks()
    ref = norm = bound = None
    for i, sd in enumerate(seeds):
        last = i == len(seeds) - 1
        with s:
            ck.fill_random(cp, sd, A.data, B.data, sc.dtype)
            Bt.data[...] = B.data.T
            ref = None   # the last seed's reference is freed before the next one is computed
            ref = ck.reference(cp, A.data, B.data, sc.dtype)
            norm = ck.ref_norm(cp, ref)
        sc.keep_inputs()
        # the cuBLAS shim's own error on these inputs sets the bound
        e32, e16 = shim_errors(sc, fn32, fn16, acc, sp, ref, norm)
        if acc == "f16" and e16 is not None:
            out.e16s.append(e16)
        out.e32s.append(e32)
        bound = ck.bound_for(acc, e32, e16, sc.dtype)
        out.bounds.append(bound)
        for label, subj in list(sc.alive.items()):
            if subj.light and not last:
                continue
            if sc.run(subj) is None:
                continue
            tag = f"seed {sd}"
            sc.written_guards(label, tag)
            sc.check_stale(label, tag)
            check_accuracy(sc, label, tag, ref, norm, bound)
            if subj.kind == "candidate" and i == 0:
                check_deterministic(sc, label, subj, tag, ref, norm, bound)
            sc.remember(label)
    sc.prev.clear()
    out.ref, out.norm, out.bound = ref, norm, bound
    return out


def check_correctness(sc: ShapeChecks, seeds: tuple[int, ...], fn32: Callable[..., int], fn16: Callable[..., int],
                      acc: str, sp: int) -> SeedChecks:
    """Every check before the timing, then each subject's status from them."""
    # baselines-only with light checks: one seed is all anyone looks at
    if all(subj.light for subj in sc.alive.values()):
        seeds = tuple(seeds)[-1:]
    if not all(subj.light for subj in sc.alive.values()):
        check_exact(sc, seeds[0])
    out = check_seeds(sc, seeds, fn32, fn16, acc, sp)
    sc.set_statuses()
    return out
