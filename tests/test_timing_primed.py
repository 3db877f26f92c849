"""harness.timing.offline's ``primed`` graphs, on a fake stream that records what was enqueued.

Why: the `fresh` check's reference must time the candidate's graph on unchanged inputs even when
the graph before it in a round (perturb-then-call) changed A; so each timed replay of a primed
graph follows an untimed replay of itself. No GPU needed to check the order."""

from __future__ import annotations

import random
from types import SimpleNamespace

from harness import timing


class FakeStream:
    def __init__(self) -> None:
        self.log: list[str] = []
        self.clock = 0.0

    def synchronize(self) -> None:
        pass


class FakeEvent:
    def record(self, stream: FakeStream) -> None:
        self.t = stream.clock
        stream.log.append("event")


class FakeGraph:
    def __init__(self, name: str, ms: float) -> None:
        self.name, self.ms = name, ms

    def launch(self, stream: FakeStream) -> None:
        stream.clock += self.ms
        stream.log.append(self.name)


def fake_cp() -> SimpleNamespace:
    cuda = SimpleNamespace(Event=FakeEvent, get_elapsed_time=lambda e0, e1: e1.t - e0.t)
    return SimpleNamespace(cuda=cuda)


def test_primed_graph_is_replayed_untimed_right_before_each_timed_replay():
    s = FakeStream()
    graphs = [timing.Graph("gr", FakeGraph("gr", 1.0), 10, 0.1), timing.Graph("gf", FakeGraph("gf", 3.0), 10, 0.0),
              timing.Graph("gp", FakeGraph("gp", 0.5), 10, 0.0)]
    out = timing.offline(fake_cp(), s, graphs, replays=5, rng=random.Random(3), primed={"gr"})
    rounds = s.log[len(graphs):]           # after the warm-up round
    untimed, i = [], 0
    while i < len(rounds):                 # "event X event" is a timed replay; anything else is not
        if rounds[i] == "event":
            assert rounds[i + 2] == "event"
            if rounds[i + 1] == "gr":      # a timed replay of gr comes right after an untimed one
                assert untimed and untimed[-1] == (i - 1, "gr")
            i += 3
        else:
            untimed.append((i, rounds[i]))
            i += 1
    assert [u[1] for u in untimed] == ["gr"] * 5
    assert rounds.count("gr") == 2 * 5 and rounds.count("gf") == 5 and rounds.count("gp") == 5
    # the untimed replay is outside the events: per call 1.0 / 10, not 2.0 / 10
    assert out["gr"]["median_ms"] == 0.1 and out["gf"]["median_ms"] == 0.3
    assert out["gr"]["replays"] == 5


def test_without_primed_nothing_changes():
    s = FakeStream()
    graphs = [timing.Graph("a", FakeGraph("a", 1.0), 1, 1.0), timing.Graph("b", FakeGraph("b", 2.0), 1, 2.0)]
    timing.offline(fake_cp(), s, graphs, replays=3, rng=random.Random(0))
    assert s.log.count("a") == 4 and s.log.count("b") == 4  # warm-up + 3 rounds
