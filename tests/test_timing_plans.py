"""The timing modes' plans, without a GPU: what each graph captures and in which order, what the
per-call figure subtracts, what surrounds a server call, and how a failing subject is charged
alone. A fake stream records every launch and advances a clock by recorded per-kernel costs."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from harness import timing
from harness.evaluate import Evaluator
from harness.shapes import Shape
from harness.worker import WorkerCrashed, WorkerTimeout

# recorded device costs (ms) of one launch of each kernel
COST = {"sep": 0.0012, "tail": 0.0020, "verify": 0.0020, "A": 0.0050, "B": 0.0130}


class FakeStream:
    def __init__(self) -> None:
        self.clock = 0.0
        self.cap: list[str] | None = None
        self.log: list[str] = []
        self.ptr = 0

    def run(self, op: str) -> int:
        if self.cap is not None:
            self.cap.append(op)
        else:
            self.clock += COST[op.split(":")[0]]
            self.log.append(op)
        return 0

    def begin_capture(self) -> None:
        self.cap = []

    def end_capture(self) -> "FakeGraph":
        g, self.cap = FakeGraph(self.cap or []), None
        return g

    def synchronize(self) -> None:
        pass


class FakeGraph:
    def __init__(self, ops: list[str]) -> None:
        self.ops = ops

    def launch(self, stream: FakeStream) -> None:
        for op in self.ops:
            stream.clock += COST[op.split(":")[0]]
            stream.log.append(op)


class FakeEvent:
    def __init__(self) -> None:
        self.t = 0.0
        self.stream: FakeStream | None = None

    def record(self, stream: FakeStream) -> None:
        self.t, self.stream = stream.clock, stream

    def synchronize(self) -> None:
        pass


def fake_cp() -> SimpleNamespace:
    return SimpleNamespace(cuda=SimpleNamespace(Event=FakeEvent, get_elapsed_time=lambda a, b: b.t - a.t))


@pytest.fixture()
def s() -> FakeStream:
    return FakeStream()


def calls_on(s: FakeStream, *labels: str) -> dict:
    return {lb: (lambda lb=lb: s.run(lb)) for lb in labels}


def _iso(s: FakeStream, reps: int):
    seps = {lb: (lambda lb=lb: s.run(f"sep:{lb}"), lambda lb=lb: s.run(f"tail:{lb}")) for lb in ("A", "B")}
    return timing.isolated_graphs(fake_cp(), s, calls_on(s, "A", "B"), seps,
                                  (lambda: s.run("sep:base"), lambda: s.run("tail:base")), reps=reps,
                                  base_label="(separator)")


def test_per_call_graphs_put_one_unrelated_kernel_before_every_call_and_verify_the_last(s):
    graphs, base = _iso(s, 4)
    assert [g.label for g in graphs] == ["A", "B"] and base.label == "(separator)"
    assert graphs[0].graph.ops == ["sep:A", "A"] * 4 + ["tail:A"]
    assert graphs[1].graph.ops == ["sep:B", "B"] * 4 + ["tail:B"]
    assert base.graph.ops == ["sep:base"] * 4 + ["tail:base"]
    # every graph has the same number of steps: each changes A the same way (one reference after a replay)
    assert {g.reps for g in graphs} == {base.reps} == {4}
    # no two calls of a subject are adjacent: the kernel before each call is its separator
    for g in graphs:
        for i, op in enumerate(g.graph.ops):
            if op in ("A", "B"):
                assert g.graph.ops[i - 1] == f"sep:{op}"


def test_per_call_figure_subtracts_the_base_step_of_the_same_round(s):
    cp = fake_cp()
    graphs, base = _iso(s, 3)
    raw = timing.offline(cp, s, [*graphs, base], replays=7, rng=random.Random(1))
    assert all(len(raw[g.label]["samples_ms"]) == 7 for g in [*graphs, base])
    per = timing.per_call(raw, ["A", "B"], "(separator)")
    assert per["A"]["median_ms"] == pytest.approx(COST["A"])
    assert per["B"]["median_ms"] == pytest.approx(COST["B"])
    assert per["A"]["separator_ms"] == pytest.approx(COST["sep"] + COST["tail"] / 3)
    assert per["A"]["step_ms"] == pytest.approx(COST["sep"] + COST["A"] + COST["tail"] / 3)
    # one warm-up launch per graph, then 7 rounds, each graph once per round in a shuffled order
    assert len(s.log) == (1 + 7) * (3 * 2 + 1 + 3 * 2 + 1 + 3 + 1)


def test_back_to_back_graph_repeats_the_call_and_nothing_else(s):
    cp = fake_cp()
    g = timing.make_graph(cp, s, "A", lambda: s.run("A"), target_ms=0.02)
    assert g.graph.ops == ["A"] * g.reps and g.reps == 4      # ceil(0.02 / 0.005)
    t = timing.offline(cp, s, [g], replays=7)
    assert t["A"]["median_ms"] == pytest.approx(COST["A"])


def test_timing_names_and_labels():
    assert timing.parse_timing(None) == "isolated"
    assert [timing.parse_timing(x) for x in ("isolated", "chained", "both")] == ["isolated", "chained", "both"]
    with pytest.raises(ValueError, match="choose from isolated, chained, both"):
        timing.parse_timing("pipelined")
    assert timing.MODE_LABELS == {"isolated": "per call", "chained": "back to back", "server": "server"}


def test_server_calls_are_each_prepared_and_verified_outside_the_clock(s):
    cp = fake_cp()
    seen: list[tuple] = []

    def before(label: str, poison: bool) -> None:
        seen.append(("before", label, poison))
        s.run("sep")

    def after(label: str) -> None:
        seen.append(("after", label))
        s.run(f"verify:{label}")

    calls = {lb: (lambda lb=lb: (seen.append(("call", lb)), s.run(lb))[1]) for lb in ("A", "B")}
    out = timing.server(cp, s, calls, qps=1e6, calls_per_subject=40, rng=random.Random(3), before=before, after=after)
    timed = [x for x in seen[4:]]                      # the first four are the untimed warm-up calls
    assert seen[:4] == [("call", "A"), ("call", "A"), ("call", "B"), ("call", "B")]
    assert len(timed) == 3 * 80
    for i in range(0, len(timed), 3):
        b, c, a = timed[i:i + 3]
        assert b[0] == "before" and c == ("call", b[1]) and a == ("after", b[1])
    poisoned = [x[2] for x in timed if x[0] == "before"]
    assert 0 < sum(poisoned) < len(poisoned)         # C poisoned on some calls, not on all
    # device time covers the call alone, not what was done before or after it
    assert out["A"]["device_median_ms"] == pytest.approx(COST["A"])
    assert out["A"]["calls"] == out["B"]["calls"] == 40


class ScriptedWorker:
    """Answers evaluate_shape like the worker; raises for requests holding a listed label."""

    def __init__(self, crash: set[str], hang: set[str], together: set[frozenset] = frozenset()) -> None:
        self.crash, self.hang, self.together = crash, hang, together
        self.requests: list[list[str]] = []
        self.starts = 1

    def call(self, op: str, timeout_s: float | None = None, **args):
        labels = [c["label"] for c in args["candidates"]]
        self.requests.append(labels + list(args["baselines"]))
        for lb in labels:
            if lb in self.crash:
                raise WorkerCrashed("evaluate_shape: CUDA context poisoned (an illegal memory access)", label="cublas")
            if lb in self.hang:
                raise WorkerTimeout("evaluate_shape: no answer within 20 s; the GPU worker was killed")
        if any(set(t) <= set(labels) for t in self.together):
            raise WorkerCrashed("evaluate_shape: the GPU worker died (SIGSEGV)")
        subjects = labels + list(args["baselines"])
        return {"status": {x: "ok" for x in subjects}, "times_ms": {x: 1.0 for x in subjects},
                "checks": {x: {"ok": True} for x in subjects}}

    def close(self) -> None:
        pass


def evaluator(worker: ScriptedWorker) -> Evaluator:
    ev = Evaluator(baselines=("cublas",), worker=worker)
    ev._shim = SimpleNamespace(so_path="/nonexistent/shim.so")
    return ev


def cands(*labels: str) -> list[dict]:
    return [{"label": lb, "so_path": f"/x/{lb}.so"} for lb in labels]


def test_a_crash_and_a_hang_are_charged_to_their_own_candidates():
    w = ScriptedWorker(crash={"crash"}, hang={"hang"})
    res = evaluator(w).run_shape(Shape(64, 64, 64), "f32", cands("crash", "good", "hang"), ["cublas"])
    assert res["status"] == {"crash": "crashed", "good": "ok", "hang": "timeout", "cublas": "ok"}
    assert res["times_ms"]["good"] == 1.0 and res["times_ms"]["crash"] is None
    assert "illegal memory access" in res["checks"]["crash"]["detail"]
    assert "no answer within" in res["checks"]["hang"]["detail"]
    assert res["charged_alone"] == ["crash", "hang"]
    # the whole request, then each candidate alone, then the survivors with the baselines
    assert w.requests == [["crash", "good", "hang", "cublas"], ["crash"], ["good"], ["hang"], ["good", "cublas"]]


def test_a_single_candidate_is_the_culprit_without_a_second_try():
    w = ScriptedWorker(crash={"bad"}, hang=set())
    res = evaluator(w).run_shape(Shape(64, 64, 64), "f32", cands("bad"), ["cublas"])
    assert res["status"] == {"bad": "crashed", "cublas": "ok"}
    assert w.requests == [["bad", "cublas"], ["cublas"]]


def test_failing_only_together_charges_the_candidates_and_keeps_the_baselines():
    w = ScriptedWorker(crash=set(), hang=set(), together={frozenset({"x", "y"})})
    res = evaluator(w).run_shape(Shape(64, 64, 64), "f32", cands("x", "y"), ["cublas"])
    assert res["status"]["x"] == res["status"]["y"] == "crashed" and res["status"]["cublas"] == "ok"
    assert "only together" in res["checks"]["x"]["detail"]


def test_baselines_alone_failing_is_raised():
    class Dead(ScriptedWorker):
        def call(self, op, timeout_s=None, **args):
            raise WorkerCrashed("evaluate_shape: the GPU worker died (SIGSEGV)")

    with pytest.raises(WorkerCrashed):
        evaluator(Dead(set(), set())).run_shape(Shape(64, 64, 64), "f32", [], ["cublas"])


def test_graphs_timed_in_one_round_need_labels_of_their_own(s):
    """Both modes in one run replay a subject's back-to-back graph and its per-call graph in the
    same rounds: under one label their samples and step counts would mix."""
    cp = fake_cp()
    g1 = timing.make_graph(cp, s, "A", lambda: s.run("A"), target_ms=0.02)
    g2 = timing.make_graph(cp, s, "A", lambda: s.run("A"), target_ms=0.04)
    with pytest.raises(ValueError, match="graph labels must differ"):
        timing.offline(cp, s, [g1, g2], replays=7)
