"""``l2tui.agent.needed_builds``: what a sweep's tracks need, built once each, in the order they need
it, while tracks run; a track is ready once its own builds are done.

The builder here is a function that records what it is asked and can be held on an event, so
the order and the waiting are observed, not timed.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import pytest

from l2tui.agent.needed_builds import NeededBuilds


@dataclass
class Built:
    ok: bool = True
    cached: bool = False
    seconds: float = 1.5


class Builder:
    """Records the sources it builds; a source in ``hold`` waits for its event first."""

    def __init__(self, hold: dict[str, threading.Event] | None = None, fail: set[str] | None = None):
        self.order: list[str] = []
        self.hold = hold or {}
        self.fail = fail or set()
        self._lock = threading.Lock()

    def __call__(self, src: str) -> Built:
        with self._lock:
            self.order.append(src)
        ev = self.hold.get(src)
        if ev is not None:
            assert ev.wait(30), f"{src} was never released"
        return Built(ok=src not in self.fail)


PLANS = {"t1": ["a", "b"], "t2": ["b", "c"], "t3": ["a", "d"]}


def test_each_source_is_built_once_in_the_order_the_tracks_first_need_it():
    b = Builder()
    nb = NeededBuilds(lambda t: PLANS[t], b, width=1)
    nb.start(["t1", "t2", "t3"])
    for t in PLANS:
        nb.wait(t)
        assert nb.ready(t)
    stats = nb.close()
    assert b.order == ["a", "b", "c", "d"]
    assert stats["configs"] == 4 and stats["compiled"] == 4 and stats["not_started"] == 0
    assert stats["nvcc_s"] == pytest.approx(6.0)


def test_a_track_is_ready_once_its_own_builds_are_done_while_another_still_waits():
    slow = threading.Event()
    b = Builder(hold={"slow": slow})
    nb = NeededBuilds(lambda t: {"big": ["slow", "x"], "small": ["y"]}[t], b, width=2)
    nb.start(["big", "small"])
    # the second track in the queue is the one that can run: its build is not held
    assert nb.wait_any(["big", "small"], timeout=20) == 1
    assert not nb.ready("big") and nb.first_ready(["big", "small"]) == 1
    slow.set()
    nb.wait("big")
    assert nb.ready("big") and nb.first_ready(["big", "small"]) == 0
    nb.close()


def test_a_failed_build_settles_its_tracks_and_is_counted():
    b = Builder(fail={"c"})
    nb = NeededBuilds(lambda t: PLANS[t], b, width=2)
    nb.start(["t1", "t2"])
    nb.wait("t2")
    assert nb.ready("t2")   # ready: the track's pick reports the compile error itself
    assert nb.close()["failed"] == 1


def test_no_build_starts_after_the_deadline():
    b = Builder()
    nb = NeededBuilds(lambda t: PLANS[t], b, width=2, deadline=time.monotonic() - 1)
    nb.start(["t1", "t2", "t3"])
    for t in PLANS:
        nb.wait(t)
    stats = nb.close()
    assert b.order == [] and stats["not_started"] == 4 and stats["compiled"] == 0


def test_closing_without_waiting_skips_the_queued_builds():
    first = threading.Event()
    b = Builder(hold={"a": first})
    nb = NeededBuilds(lambda t: PLANS[t], b, width=1)
    nb.start(["t1", "t2", "t3"])
    deadline = time.monotonic() + 20
    while not b.order and time.monotonic() < deadline:
        time.sleep(0.01)
    assert b.order == ["a"]
    closer = threading.Thread(target=lambda: setattr(closer, "stats", nb.close(wait=False)))
    closer.start()
    deadline = time.monotonic() + 60
    while not nb._stop and time.monotonic() < deadline:   # close() has begun: no build may start now
        time.sleep(0.01)
    assert nb._stop
    first.set()          # the running build finishes; the queued ones never start
    closer.join(20)
    assert b.order == ["a"] and closer.stats["compiled"] == 1 and closer.stats["not_started"] >= 1


def test_a_planner_error_is_reported_and_does_not_leave_waiters_hanging():
    def plan(t):
        if t == "t2":
            raise RuntimeError("the cost model broke")
        return PLANS[t]

    nb = NeededBuilds(plan, Builder(), width=1)
    nb.start(["t1", "t2", "t3"])
    nb.wait("t3")          # never planned: returns once planning has ended
    assert isinstance(nb.first_error(), RuntimeError) and not nb.planned("t3")
    nb.close()


def test_progress_hears_of_every_finished_build():
    seen: list[tuple[int, int]] = []
    nb = NeededBuilds(lambda t: PLANS[t], Builder(), width=1, progress=lambda d, t, r: seen.append((d, t)))
    nb.start(["t1", "t2", "t3"])
    nb.close()
    assert [d for d, _ in seen] == [1, 2, 3, 4] and seen[-1] == (4, 4)
