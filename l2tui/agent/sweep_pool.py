"""The sweep's pool of GPU slots: which slot runs which track, and what happens when one is lost.

A free slot takes the first queued track whose builds are done and keeps it to its end (a shape
is never split across GPUs); a slot that is lost gives its track back to the front of the queue
for another slot; the first other error stops every slot. Tracks themselves are driven by
``sweep_track.TrackDriver`` through ``Sweep.run_track``.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import TYPE_CHECKING, Sequence

from harness.shapes import Shape

from .. import events as ev_schema
from .track import track_id

if TYPE_CHECKING:
    from ..executors.base import Slot
    from .sweep import Sweep, TrackResult


class SlotPool:
    """The tracks to run (``todo``) over ``slots``; ``serve_all`` returns when none is left, the
    deadline has passed, an error stopped them, or every slot is lost."""

    def __init__(self, sweep: "Sweep", todo: list[tuple[Shape, str]], slots: Sequence[Slot], total: int,
                 deadline: float | None):
        self.sweep, self.slots, self.total, self.deadline = sweep, slots, total, deadline
        self.todo = len(todo)
        self.skipped = total - len(todo)
        self.queue: collections.deque[tuple[Shape, str]] = collections.deque(todo)
        self.cond = threading.Condition(threading.Lock())
        self.out: list[TrackResult] = []
        self.errors: list[BaseException] = []
        self.live = {id(sl) for sl in slots}
        self.inflight = 0
        self.t0 = time.monotonic()

    def serve_all(self) -> None:
        """Every slot serves tracks (one thread per slot when there are several)."""
        if len(self.slots) <= 1:
            for sl in self.slots:
                self.serve(sl)
            return
        threads = [threading.Thread(target=self.serve, args=(sl,), name=f"sweep-{sl.uuid}", daemon=True)
                   for sl in self.slots]
        for th in threads:
            th.start()
        for th in threads:
            th.join()

    def serve(self, slot: Slot) -> None:
        """One slot's loop: take a ready track, run it, report it; until the pool has nothing for it."""
        while True:
            taken = self._take()
            if taken is None:
                return
            if isinstance(taken, list):   # queued tracks, none of whose builds is done yet
                assert self.sweep.builds is not None   # tracks wait on builds only when builds are tracked
                self.sweep.builds.wait_any(taken, timeout=1.0)
                continue
            if not self._run(slot, *taken):
                return

    def _take(self) -> tuple[Shape, str] | list[str] | None:
        """The next track for a slot; the ids of the queued tracks when none is ready; None: stop.
        A slot waits while others still run tracks (a lost slot's track comes back to the queue)."""

        with self.cond:
            while not self.queue and self.inflight and not self.errors:
                self.cond.wait()
            if self.errors or not self.queue or (self.deadline is not None and time.monotonic() >= self.deadline):
                self.cond.notify_all()
                return None
            i = self.sweep._next_track(self.queue)
            if i is None:
                return [track_id(s, a) for s, a in self.queue]
            shape, acc = self.queue[i]
            del self.queue[i]
            self.inflight += 1
            return shape, acc

    def _run(self, slot: Slot, shape: Shape, acc: str) -> bool:
        """Run one track on ``slot``; whether the slot goes on serving."""
        from l2tui.executors.base import SlotLost

        try:
            r = self.sweep.run_track(shape, acc, slot)
        except SlotLost as e:
            self._lost(slot, shape, acc, e)
            return False
        except BaseException as e:  # noqa: BLE001 - stop the other slots, re-raised by the sweep
            with self.cond:
                self.errors.append(e)
                self.inflight -= 1
                self.cond.notify_all()
            return False
        if self.sweep.cache:
            self.sweep.cache.put(r)
        with self.cond:
            self.out.append(r)
            self._report(r)
            self.inflight -= 1
            self.cond.notify_all()
        return True

    def _lost(self, slot: Slot, shape: Shape, acc: str, e: Exception) -> None:
        """``slot`` went away mid-track: the track goes back to the front of the queue."""

        tid = track_id(shape, acc)
        with self.cond:
            self.queue.appendleft((shape, acc))
            self.live.discard(id(slot))
            self.sweep.requeued.append((tid, slot.uuid))
            left = len(self.live)
            self.inflight -= 1
            self.cond.notify_all()
        self.sweep.session.record(ev_schema.TrackState(track=tid, state="queued", requeued=True, gpu=slot.uuid,
                                  reason=str(e)))
        self.sweep.progress(f"{e}; {tid} goes back to the queue ({left} GPU(s) left)")

    def _report(self, r: "TrackResult") -> None:
        """The progress line of a finished track (with the sweep's elapsed time and ETA)."""
        n = len(self.out)
        el = time.monotonic() - self.t0
        eta = el / n * (self.todo - n)
        sp = f"{r.speedup:.3f}x" if r.speedup else "-"
        on = f" on {r.gpu_uuid}" if len(self.slots) > 1 else ""
        self.sweep.progress(f"[{self.skipped + n}/{self.total}] {r.track}: {r.best_name} {sp} vs "
                            f"{self.sweep.cfg.baseline} ({r.evaluated} evaluated, {r.picked} picked, "
                            f"{r.seconds:.1f}s: nvcc {r.build_s:.1f}s, GPU {r.gpu_s:.1f}s){on}  "
                            f"elapsed {el:.0f}s ETA {eta:.0f}s")
