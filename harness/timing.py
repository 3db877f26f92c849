"""Timing, run inside the GPU worker: offline (CUDA graphs) and server (Poisson arrivals).

Offline: each subject's call is captured R times back to back into one CUDA graph,
R chosen so one replay lasts >= 1 ms (from an eager estimate).  Every graph is
launched once to warm up, then ``replays`` rounds follow; in each round the
subjects run in a fresh random order, each replay bracketed by CUDA events on the
same stream, all rounds queued without host syncs.  Per subject we report the
median per call (replay time / R), p10/p90 and spread = (p90 - p10) / median.
The method is identical for candidates and baselines.

Server: one Poisson arrival process (target QPS) shared by all subjects; each
arrival calls the next subject of a random interleaving.  A call is timed on the
host from the call to the completion of our stream (stream synchronize), with
CUDA events around it for the device time.  Median and p90 per subject.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from typing import Any, Callable

TARGET_REPLAY_MS = 1.0
MAX_REPS = 2000
DEFAULT_REPLAYS = 7


@dataclass
class Graph:
    """An instantiated CUDA graph of ``reps`` back-to-back calls of one subject."""

    label: str
    graph: Any
    reps: int
    est_ms: float


def quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    if not s:
        return math.nan
    pos = (len(s) - 1) * q
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def estimate_ms(cp: Any, stream: Any, call: Callable[[], int], n: int = 3) -> float:
    """Eager per-call estimate (after one warm call), events around n back-to-back calls."""
    call()
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    e0.record(stream)
    for _ in range(n):
        call()
    e1.record(stream)
    e1.synchronize()
    return max(cp.cuda.get_elapsed_time(e0, e1) / n, 1e-4)


def reps_for(est_ms: float, target_ms: float = TARGET_REPLAY_MS, cap: int = MAX_REPS) -> int:
    return int(min(cap, max(1, math.ceil(target_ms / est_ms))))


def capture(cp: Any, stream: Any, call: Callable[[], int], reps: int) -> Any:
    """Capture ``reps`` calls into a graph; the capture is always ended, even if a call raises."""
    graph = None
    stream.begin_capture()
    try:
        for _ in range(reps):
            rc = call()
            if rc:
                raise RuntimeError(f"call returned {rc} during graph capture")
    finally:
        graph = stream.end_capture()
    return graph


def make_graph(cp: Any, stream: Any, label: str, call: Callable[[], int],
               target_ms: float = TARGET_REPLAY_MS, cap: int = MAX_REPS) -> Graph:
    est = estimate_ms(cp, stream, call)
    reps = reps_for(est, target_ms, cap)
    g = capture(cp, stream, call, reps)
    if hasattr(g, "upload"):
        g.upload(stream)
    return Graph(label, g, reps, est)


def fresh_graphs(cp: Any, stream: Any, label: str, call: Callable[[], int], perturb: Callable[[], int],
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
        if hasattr(g, "upload"):
            g.upload(stream)
    return Graph(f"{label}:fresh", gf, reps, 0.0), Graph(f"{label}:perturb", gp, reps, 0.0)


def offline(cp: Any, stream: Any, graphs: list[Graph], replays: int = DEFAULT_REPLAYS,
            rng: random.Random | None = None, warmup: int = 1,
            primed: frozenset[str] | set[str] = frozenset()) -> dict[str, dict[str, float]]:
    """Interleaved replays of every graph; per-call median/p10/p90 in ms.

    A graph whose label is in ``primed`` is replayed once, untimed, right before each of its
    timed replays: its timed calls then follow calls on the same inputs even when the graph
    before it in the round changed them (the ``fresh`` check's reference, harness.checks)."""
    rng = rng or random.Random(0)
    for _ in range(warmup):
        for g in graphs:
            g.graph.launch(stream)
    marks: list[tuple[str, Any, Any]] = []
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
    out = {}
    for label, xs in per.items():
        med = quantile(xs, 0.5)
        p10, p90 = quantile(xs, 0.1), quantile(xs, 0.9)
        out[label] = {
            "median_ms": med, "p10_ms": p10, "p90_ms": p90,
            "spread": (p90 - p10) / med if med > 0 else math.nan,
            "reps": reps[label], "replays": len(xs),
        }
    return out


def server(cp: Any, stream: Any, calls: dict[str, Callable[[], int]], qps: float = 100.0,
           calls_per_subject: int = 20, rng: random.Random | None = None) -> dict[str, dict[str, float]]:
    """Poisson arrivals at ``qps``; host latency (call -> stream complete) and device time per call."""
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
