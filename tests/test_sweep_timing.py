"""tools/sweep_gpu.py's interleaved timing, driven through a simulated CUDA clock.

The orchestration (capture every subject first, a warm-up round left out, rounds in a fresh
random order, median per call, a failed capture reported as None) is plain Python; the GPU
itself is covered by the pick runs recorded in results/h200/runs/.
"""

from __future__ import annotations

import contextlib
import importlib.util
import random
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


class SimCuda:
    """A virtual clock: a launch advances it by its cost, or is recorded while a graph captures."""

    def __init__(self) -> None:
        self.now = 0.0
        self.capturing = None
        self.replayed: list[str] = []

    def launch(self, name: str, cost_ms: float, fail_capture: bool = False):
        def run() -> int:
            if self.capturing is not None:
                if fail_capture:
                    raise RuntimeError("operation not permitted when stream is capturing")
                self.capturing.calls.append((name, cost_ms))
            else:
                self.now += cost_ms
            return 0
        return run

    def module(self):
        sim = self

        class Event:
            def __init__(self, enable_timing: bool = True) -> None:
                self.t = None

            def record(self, stream=None) -> None:
                self.t = sim.now

            def elapsed_time(self, end) -> float:
                return end.t - self.t

            def synchronize(self) -> None:
                pass

        class Stream:
            def synchronize(self) -> None:
                pass

        class CUDAGraph:
            def __init__(self) -> None:
                self.calls: list = []

            def replay(self) -> None:
                sim.replayed.append(self.calls[0][0])
                for _, cost in self.calls:
                    sim.now += cost

        @contextlib.contextmanager
        def graph(g, stream=None):
            sim.capturing = g
            try:
                yield
            finally:
                sim.capturing = None

        cuda = types.SimpleNamespace(Stream=Stream, Event=Event, CUDAGraph=CUDAGraph, graph=graph,
                                     stream=lambda s: contextlib.nullcontext())
        return types.SimpleNamespace(cuda=cuda)


@pytest.fixture()
def sweep():
    spec = importlib.util.spec_from_file_location("sweep_gpu", ROOT / "tools" / "sweep_gpu.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sim = SimCuda()
    mod.torch = sim.module()
    return mod, sim


def test_every_subject_gets_its_per_call_time_and_a_failed_capture_is_none(sweep):
    mod, sim = sweep
    launches = {"a": sim.launch("a", 0.002), "b": sim.launch("b", 0.010), "bad": sim.launch("bad", 0.001, True)}
    out = mod.time_interleaved(launches, target_ms=0.3, reps=5, rng=random.Random(1))
    assert out["a"] == pytest.approx(0.002) and out["b"] == pytest.approx(0.010)
    assert out["bad"] is None


def test_rounds_interleave_subjects_and_the_warm_up_round_is_not_timed(sweep):
    mod, sim = sweep
    launches = {n: sim.launch(n, 0.001 * (i + 1)) for i, n in enumerate("pqrs")}
    beats: list[str] = []
    mod.time_interleaved(launches, target_ms=0.3, reps=4, rng=random.Random(7), beat=beats.append)
    rounds = [sim.replayed[i:i + 4] for i in range(0, len(sim.replayed), 4)]
    assert len(rounds) == 5                                   # warm-up + 4 timed rounds
    assert all(sorted(r) == list("pqrs") for r in rounds)     # each subject once per round
    assert len({tuple(r) for r in rounds}) > 1                # in a fresh order
    assert any(b.endswith("@round 0") for b in beats) and any(b.endswith("@capture") for b in beats)
    # the watchdog records the last beat as the hang; a resumed pick skips the part before '@'
    assert {b.split("@", 1)[0] for b in beats} == set("pqrs")


def test_a_drift_during_the_shape_lands_on_every_subject(sweep):
    """The GPU slows down half-way through the shape: sequential timing blames whoever came last,
    interleaved rounds slow everyone alike, so two equal kernels still time equal."""
    mod, sim = sweep
    slow = {"on": False}

    def launch(name):
        base = sim.launch(name, 0.002)

        def run():
            if sim.capturing is None and slow["on"]:
                sim.now += 0.002
            return base()
        return run

    orig = sim.module().cuda.CUDAGraph

    class DriftGraph(orig):
        def replay(self):
            super().replay()
            if len(sim.replayed) >= 6:
                slow["on"] = True
                sim.now += 0.2 * len(self.calls) * 0.002

    mod.torch.cuda.CUDAGraph = DriftGraph
    out = mod.time_interleaved({"x": launch("x"), "y": launch("y")}, target_ms=0.3, reps=6, rng=random.Random(3))
    assert out["x"] == pytest.approx(out["y"], rel=0.05)


def test_hot_shapes_are_timed_in_long_bursts_others_as_before(sweep):
    """--hot-target-ms applies to shapes the model prices over --hot-above-us; off by default."""
    import argparse

    mod, sim = sweep
    args = argparse.Namespace(target_ms=0.3, reps=5, hot_target_ms=0.0, hot_above_us=200.0, hot_reps=3)
    assert mod.burst_for(5000.0, args) == (0.3, 5)          # off by default: as before
    args.hot_target_ms = 20.0
    assert mod.burst_for(5000.0, args) == (20.0, 3)
    assert mod.burst_for(150.0, args) == (0.3, 5)           # under the threshold
    # a 20 ms burst of a 2 ms kernel: each timed replay is a graph of 10 back-to-back calls
    launches = {"k": sim.launch("k", 2.0)}
    t0 = sim.now
    out = mod.time_interleaved(launches, target_ms=20.0, reps=3, rng=random.Random(0))
    assert out["k"] == pytest.approx(2.0)
    assert sim.now - t0 >= (1 + 3) * 20.0 - 1e-9            # a warm-up replay and three timed ones
