"""Policies propose, the loop's seed stage evaluates (issue 54): the search policy's pick is a
request the loop builds and times in one batch with the baseline (``l2tui.agent.seed_timing``),
and its timings go back to the policy, which chooses the seed."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Sequence

import pytest

from harness.evaluate import Evaluation
from harness.known import GpuKey, KnownKernel
from harness.shapes import Shape
from l2tui.agent.policies.base import TrackContext
from l2tui.agent.policies.search import SearchPolicy

REPO = Path(__file__).resolve().parent.parent
SEARCH = REPO / "l2tui" / "agent" / "policies" / "search.py"
PICK = REPO / "l2tui" / "agent" / "policies" / "pick.py"
SHAPE = Shape(4096, 4096, 4096)


def _ctx(**kw: object) -> TrackContext:
    base: dict = dict(track="t", shape=SHAPE, acc="f32", baseline="cublas", step=0, arch="sm_90a")
    base.update(kw)
    return TrackContext(**base)


def _ok(ms: float) -> Evaluation:
    return Evaluation("ok", None, {"rel_err": 0.0}, {"candidate": ms, "cublas": 0.5}, message="ok")


def _names_used(path: Path) -> set[str]:
    """Every module imported and every name or attribute read in ``path``."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            names.add(node.module or "")
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
    return names


@pytest.mark.parametrize("path", [SEARCH, PICK], ids=["search", "pick"])
def test_the_search_policy_and_the_pick_never_build_or_time(path):
    """They read evaluations (the ``Evaluation`` type) but import no builder or timer and call none."""
    used = _names_used(path)
    forbidden = {"harness.build", "harness.batch", "l2tui.executors.batch", "executors.batch",
                 "build", "build_many", "evaluate", "evaluate_many", "run_shape", "bind_evaluator", "_evaluator"}
    assert not used & forbidden, f"{path.name} builds or times: {sorted(used & forbidden)}"


def test_with_batch_timing_the_seed_is_a_pick_request_and_the_fastest_that_passed_wins():
    known = KnownKernel(SHAPE, "f32", GpuKey("NVIDIA H200", 132, 13), "// a known kernel\n", "mine", "local",
                        1.0, "cublas", 0.3, {})
    pol = SearchPolicy()
    ctx = _ctx(can_batch=True, known=[known])
    prop = pol.seed(ctx)
    request = prop.pick
    assert request is not None and prop.source is None and prop.origin == "seed"
    labels = [it.label for it in request.items]
    assert labels[-1] == "known-0" and request.items[-1].note == "known: mine (local)"
    assert request.chosen == len(labels) - 1 and request.detail() == f"{request.chosen} catalog configurations, 1 known kernels"
    assert [lb for lb, _, _ in request.batch()] == labels
    assert sum(len(v) for v in request.builds().values()) == len(labels)
    # the second catalog configuration is fastest, the first fails its check, the known kernel is slower
    second = request.items[1]
    evs = {it.label: _ok(0.4) for it in request.items}
    evs[labels[0]] = Evaluation("wrong", None, message="wrong")
    evs[second.label] = _ok(0.02)
    seed = request.decide(evs)
    assert seed.source == second.source and seed.known_timed and seed.pick is None
    assert seed.plan.startswith(f"Pick: {second.label} was the fastest of {request.chosen} catalog configurations "
                                f"and 1 known kernels checked and timed together on this GPU (20.0 us per call).")
    text = seed.messages[-1]["content"]
    assert "The pick's measurements (per call):" in text
    assert f"  {labels[0]}: wrong" in text and "  known: mine (local): 400.0 us per call" in text
    assert seed.completion.endswith(f"```cuda\n{second.source}```\n")


def test_a_pick_where_nothing_passed_seeds_from_the_cost_model():
    pol = SearchPolicy()
    request = pol.seed(_ctx(can_batch=True)).pick
    assert request is not None
    seed = request.decide({it.label: Evaluation("crashed", None, message="crashed") for it in request.items})
    model = SearchPolicy().seed(_ctx())
    assert seed.source == model.source and seed.plan == model.plan and not seed.known_timed


def test_without_batch_timing_the_seed_is_the_cost_models():
    prop = SearchPolicy().seed(_ctx())
    assert prop.pick is None and prop.source and "predicted" in prop.messages[-1]["content"]
    assert SearchPolicy(pick_top=0).seed(_ctx(can_batch=True)).pick is None


class BatchRecorder:
    """An evaluator that times many kernels in one request (``can_batch``), with times a test
    chooses per source, recording each request; the builds before it are nvcc's."""

    arch = "sm_80"
    mode = "offline"
    timing = "per_call"
    can_batch = True
    replays_recording = False
    own_profiles = False

    def __init__(self, times: dict[str, float]):
        self.times = times                       # so_path -> ms, filled in by the test
        self.requests: list[tuple[list[str], list[str]]] = []

    def run_shape(self, shape: Shape, acc: str, candidates: list[dict], baselines: Sequence[str],
                  timeout_s: float | None = None) -> dict:
        self.requests.append(([c["label"] for c in candidates], list(baselines)))
        times = {c["label"]: self.times[c["so_path"]] for c in candidates}
        return {"status": {lb: "ok" for lb in times}, "checks": {lb: {"rel_err": 0.0} for lb in times},
                "times_ms": {**times, **{b: 0.5 for b in baselines}}, "seconds": 0.1}

    def evaluate(self, source: str, shape: Shape, acc: str = "f32", *, flags: Sequence[str] = (),
                 label: str = "candidate", time_baselines: bool = True) -> Evaluation:
        return Evaluation("ok", None, {"rel_err": 0.0}, {"candidate": 0.03, "cublas": 0.5}, message="ok",
                          extra={"mode": "offline", "timing": "per_call"})

    def close(self) -> None:
        pass


@pytest.mark.compile
def test_the_loop_times_the_pick_in_one_batch_with_the_baseline(tmp_path, agent_cache):
    from harness.build import build
    from l2tui.agent.loop import AgentLoop, LoopConfig
    from l2tui.session import Session

    shape = Shape(256, 256, 256)
    pol = SearchPolicy(families=["sm80_mma"], pick_top=2, pick_kinds=False, budget=0)
    request = SearchPolicy(families=["sm80_mma"], pick_top=2, pick_kinds=False).seed(
        TrackContext(track="t", shape=shape, acc="f32", baseline="cublas", step=0, arch="sm_80", can_batch=True)).pick
    assert request is not None and request.chosen == 2
    first, second = request.items
    paths = [str(build(it.source, arch="sm_80").so_path) for it in request.items]
    ev = BatchRecorder({paths[0]: 0.05, paths[1]: 0.02})
    session = Session.create(tmp_path / "s", config={}, gpu={}, versions={})
    loop = AgentLoop(session, LoopConfig(max_steps=1, arch="sm_80", baseline="cublas"), policy=pol, evaluator=ev)
    loop.add_track(shape, "f32")
    loop.subscribe(lambda e: loop.request_stop() if e["type"] == "best" else None)
    loop.run()
    assert ev.requests == [([first.label, second.label], ["cublas"])]      # one request, with the baseline
    stages = [(e["stage"], e["status"], e.get("detail")) for e in session.events if e["type"] == "stage"
              and e["stage"] in ("seed", "pick")]
    assert stages[:4] == [("seed", "start", "search"), ("pick", "start", "2 catalog configurations, 0 known kernels"),
                          ("pick", "end", None), ("seed", "end", None)]
    seed = next(e for e in session.events if e["type"] == "candidate" and e.get("origin") == "seed")
    assert session.get_kernel(seed["sha"]) == second.source
    plan = next(e["text"] for e in session.events if e["type"] == "plan")
    assert plan.startswith(f"Pick: {second.label} was the fastest of 2 catalog configurations and 0 known kernels")
    row = next(r for r in session.rewards() if r["origin"] == "seed")
    assert "The pick's measurements (per call):" in row["messages"][-1]["content"]
