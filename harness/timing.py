"""Timing, run inside the GPU worker: offline per call, offline back to back, and server.

Three modes, one method for every subject (candidates and baselines alike):

* **per call** (``isolated``, the headline): every timed call follows one ordinary kernel that
  is not the subject and not PDL-aware (the ``separator``, harness.checks.Separator: it verifies
  rows of the previous call's C and changes one element of A, as a producer writes its
  consumer's input). One CUDA graph per subject holds R steps ``[separator, call]`` and a tail
  that verifies the last call; one base graph holds the same without the calls. Both are
  replayed in the same interleaved rounds and the base's per-step time is subtracted round by
  round, so what is left is what one call costs when the kernel before it is somebody else's --
  the way a user's program calls a GEMM. No call can overlap the previous call of the same
  subject (programmatic dependent launch gains nothing behind an unrelated kernel), and every
  timed call is verified by the separator after it, so a timed call cannot tell itself from a
  verified one.
* **back to back** (``chained``, a pipeline figure): R calls of the same subject captured back to
  back in one graph. Call i+1 may start while call i drains when the kernel is launched with PDL.
* **server**: calls at Poisson-distributed intervals (a target QPS), each timed on the host from
  the call to the completion of the stream (and on the device by events); before each call A is
  changed and, on a random half of the calls, C poisoned; after it, rows of C are verified.

R is chosen so one replay lasts >= 1 ms. Every graph is launched once to warm up, then
``replays`` rounds follow; in each round the graphs run in a fresh random order, each replay
bracketed by CUDA events on the same stream, all rounds queued without host syncs. Per subject
we report the median per call, p10/p90 and spread = (p90 - p10) / median.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from typing import Any, Callable
from .cupy_types import CudaEvent, CudaGraph, CudaStream, CupyModule

TARGET_REPLAY_MS = 1.0
MAX_REPS = 2000
MAX_ISOLATED_REPS = 200     # steps per per-call graph (three nodes each: keeps captures short)
DEFAULT_REPLAYS = 7
#: the offline timing modes ``--timing`` accepts; "both" times each subject both ways in one run
TIMINGS = ("isolated", "chained", "both")
DEFAULT_TIMING = "isolated"
#: what each mode is called wherever a figure is shown
MODE_LABELS = {"isolated": "per call", "chained": "back to back", "server": "server"}


def parse_timing(name: str | None) -> str:
    """``None`` -> the default; an unknown name -> ValueError naming the choices."""
    if name is None:
        return DEFAULT_TIMING
    if name not in TIMINGS:
        raise ValueError(f"unknown timing {name!r}: choose from {', '.join(TIMINGS)}")
    return name


@dataclass
class Graph:
    """An instantiated CUDA graph of ``reps`` steps of one subject (``subject``: whose, when the
    label is not the subject's own)."""

    label: str
    graph: CudaGraph
    reps: int
    est_ms: float
    subject: str = ""


def quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    if not s:
        return math.nan
    pos = (len(s) - 1) * q
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def estimate_ms(cp: CupyModule, stream: CudaStream, call: Callable[[], int], n: int = 3) -> float:
    """Eager per-call estimate (after one warm call), events around n back-to-back calls."""
    call()
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    e0.record(stream)
    for _ in range(n):
        call()
    e1.record(stream)
    e1.synchronize()
    return max(float(cp.cuda.get_elapsed_time(e0, e1)) / n, 1e-4)


def reps_for(est_ms: float, target_ms: float = TARGET_REPLAY_MS, cap: int = MAX_REPS) -> int:
    return int(min(cap, max(1, math.ceil(target_ms / est_ms))))


def capture(cp: CupyModule, stream: CudaStream, call: Callable[[], int], reps: int, tail: Callable[[], int] | None = None) -> CudaGraph:
    """Capture ``reps`` calls (and an optional tail) into a graph; the capture is always ended,
    even if a call raises."""
    stream.begin_capture()
    try:
        for _ in range(reps):
            rc = call()
            if rc:
                raise RuntimeError(f"call returned {rc} during graph capture")
        if tail is not None:
            tail()
    finally:
        graph = stream.end_capture()
    return graph


def _uploaded(graph: CudaGraph, stream: CudaStream) -> CudaGraph:
    if hasattr(graph, "upload"):
        graph.upload(stream)
    return graph


def make_graph(cp: CupyModule, stream: CudaStream, label: str, call: Callable[[], int],
               target_ms: float = TARGET_REPLAY_MS, cap: int = MAX_REPS) -> Graph:
    est = estimate_ms(cp, stream, call)
    reps = reps_for(est, target_ms, cap)
    return Graph(label, _uploaded(capture(cp, stream, call, reps), stream), reps, est)


def fresh_graphs(cp: CupyModule, stream: CudaStream, label: str, call: Callable[[], int], perturb: Callable[[], int],
                 reps: int, verify: Callable[[], int] | None = None,
                 verify_base: Callable[[], int] | None = None) -> tuple[Graph, Graph]:
    """Two graphs of ``reps`` steps: perturb-then-call(-then-verify), and the same without the
    call (perturb, verify_base: their cost, to subtract).

    Why: every timed replay repeats the same inputs, so a kernel that memoizes by content would
    time as its cache hit. Here each call follows a change of A; the per-call difference of the
    two graphs is what one call costs when its inputs are new, and ``verify`` checks each call's
    C right after it (harness.checks.Verifier), so no call can skip its work unseen."""

    def both() -> int:
        perturb()
        rc = call()
        if verify is not None:
            verify()
        return rc

    def base() -> int:
        perturb()
        if verify_base is not None:
            verify_base()
        return 0

    gf = capture(cp, stream, both, reps)
    gp = capture(cp, stream, base, reps)
    for g in (gf, gp):
        _uploaded(g, stream)
    return Graph(f"{label}:fresh", gf, reps, 0.0), Graph(f"{label}:perturb", gp, reps, 0.0)


def isolated_graphs(cp: CupyModule, stream: CudaStream, calls: dict[str, Callable[[], int]],
                    separators: dict[str, tuple[Callable[[], int], Callable[[], int]]],
                    base: tuple[Callable[[], int], Callable[[], int]] | None, reps: int,
                    base_label: str = "separator") -> tuple[list[Graph], Graph | None]:
    """The per-call graphs: ``[separator, call] x reps + tail`` per subject, and (unless ``base``
    is None) the base graph ``[separator] x reps + tail`` whose per-step time :func:`per_call`
    subtracts. ``separators[label]`` is (step, tail) of the subject's own separator (it verifies the
    call before it and changes A for the one after; the tail verifies the last call).

    Every graph has the same number of steps and every separator changes A the same way, so one
    reference serves all subjects after a replay (harness.checks)."""
    out = []
    for label, call in calls.items():
        sep, tail = separators[label]

        def step(call: Callable[[], int] = call, sep: Callable[[], int] = sep) -> int:
            sep()
            return call()

        out.append(Graph(label, _uploaded(capture(cp, stream, step, reps, tail), stream), reps, 0.0))
    if base is None:
        return out, None
    return out, Graph(base_label, _uploaded(capture(cp, stream, base[0], reps, base[1]), stream), reps, 0.0)


def per_call(timed: dict[str, dict[str, Any]], labels: list[str], base_label: str) -> dict[str, dict[str, Any]]:
    """Per-call statistics of the per-call graphs: each round's base step subtracted from the same
    round's subject step (both replayed in the same rounds, so clocks and temperature match)."""
    base = timed[base_label]["samples_ms"]
    out: dict[str, dict[str, Any]] = {}
    for label in labels:
        r = timed[label]
        diffs = [x - b for x, b in zip(r["samples_ms"], base)]
        med = quantile(diffs, 0.5)
        p10, p90 = quantile(diffs, 0.1), quantile(diffs, 0.9)
        out[label] = {
            "median_ms": med, "p10_ms": p10, "p90_ms": p90,
            "spread": (p90 - p10) / med if med > 0 else math.nan,
            "reps": r["reps"], "replays": len(diffs), "step_ms": r["median_ms"],
            "separator_ms": timed[base_label]["median_ms"],
        }
    return out


def offline(cp: CupyModule, stream: CudaStream, graphs: list[Graph], replays: int = DEFAULT_REPLAYS,
            rng: random.Random | None = None, warmup: int = 1,
            primed: frozenset[str] | set[str] = frozenset()) -> dict[str, dict[str, Any]]:
    """Interleaved replays of every graph; per-call median/p10/p90 in ms.

    A graph whose label is in ``primed`` is replayed once, untimed, right before each of its
    timed replays: its timed calls then follow calls on the same inputs even when the graph
    before it in the round changed them (the ``fresh`` check's reference, harness.checks)."""
    rng = rng or random.Random(0)
    labels = [g.label for g in graphs]
    if len(set(labels)) != len(labels):
        raise ValueError(f"graph labels must differ: {labels}")
    for _ in range(warmup):
        for g in graphs:
            g.graph.launch(stream)
    marks: list[tuple[str, CudaEvent, CudaEvent]] = []
    for _ in range(replays):
        order = list(graphs)
        rng.shuffle(order)
        for g in order:
            if g.label in primed:
                g.graph.launch(stream)
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            e0.record(stream)
            g.graph.launch(stream)
            e1.record(stream)
            marks.append((g.label, e0, e1))
    stream.synchronize()
    per: dict[str, list[float]] = {g.label: [] for g in graphs}
    reps = {g.label: g.reps for g in graphs}
    for label, e0, e1 in marks:
        per[label].append(cp.cuda.get_elapsed_time(e0, e1) / reps[label])
    out: dict[str, dict[str, Any]] = {}
    for label, xs in per.items():
        med = quantile(xs, 0.5)
        p10, p90 = quantile(xs, 0.1), quantile(xs, 0.9)
        out[label] = {
            "median_ms": med, "p10_ms": p10, "p90_ms": p90,
            "spread": (p90 - p10) / med if med > 0 else math.nan,
            "reps": reps[label], "replays": len(xs), "samples_ms": xs,
        }
    return out


def server(cp: CupyModule, stream: CudaStream, calls: dict[str, Callable[[], int]], qps: float = 100.0,
           calls_per_subject: int = 20, rng: random.Random | None = None,
           before: Callable[[str, bool], None] | None = None,
           after: Callable[[str], None] | None = None) -> dict[str, dict[str, float]]:
    """Poisson arrivals at ``qps``; host latency (call -> stream complete) and device time per call.

    ``before(label, poison)`` runs untimed before each timed call (it changes A and, when
    ``poison``, fills C with NaN -- on a random half of the calls, so a kernel can neither rely on
    C being poisoned nor on it holding its last result) and is synchronised before the clock
    starts; ``after(label)`` runs untimed after it (it verifies rows of C). The warm-up calls are
    not timed."""
    rng = rng or random.Random(0)
    for call in calls.values():       # warm: module load, handles, workspaces
        call()
        call()
    stream.synchronize()
    order = [label for label in calls for _ in range(calls_per_subject)]
    rng.shuffle(order)
    host: dict[str, list[float]] = {k: [] for k in calls}
    dev: dict[str, list[float]] = {k: [] for k in calls}
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    t_next = time.perf_counter()
    for label in order:
        if before is not None:
            before(label, rng.random() < 0.5)
            stream.synchronize()
        t_next = max(t_next, time.perf_counter()) if before is not None else t_next
        t_next += rng.expovariate(qps)
        while True:
            left = t_next - time.perf_counter()
            if left <= 0:
                break
            if left > 0.002:
                time.sleep(left - 0.001)
        call = calls[label]
        t0 = time.perf_counter()
        e0.record(stream)
        call()
        e1.record(stream)
        stream.synchronize()
        t1 = time.perf_counter()
        host[label].append((t1 - t0) * 1e3)
        dev[label].append(cp.cuda.get_elapsed_time(e0, e1))
        if after is not None:
            after(label)
    out = {}
    for label in calls:
        h = host[label]
        med = quantile(h, 0.5)
        out[label] = {
            "median_ms": med, "p10_ms": quantile(h, 0.1), "p90_ms": quantile(h, 0.9),
            "spread": (quantile(h, 0.9) - quantile(h, 0.1)) / med if med > 0 else math.nan,
            "device_median_ms": quantile(dev[label], 0.5), "calls": len(h), "qps": qps,
        }
    return out
