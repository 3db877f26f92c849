"""Event feeds: where the main screen's events come from.

Both feeds post one :class:`EventFeed.Batch` per flush, never one message per
event: the live feed buffers events the loop thread hands it and flushes on a
timer (15 Hz), the replay feed releases recorded events as its clock advances.
The loop runs in a thread worker of the ``agent-loop`` group; it reports back
by message and never touches a widget.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from textual import on
from textual.message import Message
from textual.widget import Widget
from textual.worker import Worker, WorkerState

from ... import events as ev_schema
from ..loophandle import LoopHandle, SteeredLoop
from ..replay import ReplayClock, Seek

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ..options import WidgetOptions

FLUSH_HZ = 15


class EventFeed(Widget):
    """Invisible widget that owns a source of events."""

    DEFAULT_CSS = "EventFeed { display: none; }"

    @dataclass
    class Batch(Message):
        """Events to fold into the model; with ``reset`` the model is rebuilt from them."""

        events: list[dict]
        reset: bool = False


class LiveFeed(EventFeed):
    """Events of a running AgentLoop (``subscribe``/``run`` per docs/INTERFACES.md)."""

    @dataclass
    class LoopFinished(Message):
        """The loop's run() returned (``error`` is None) or raised (one line)."""

        error: str | None

    def __init__(self, handle: LoopHandle, factory: Callable[[], SteeredLoop] | None = None,
                 initial: list[dict] | None = None, flush_hz: float = FLUSH_HZ, telemetry_hz: float = 0.0,
                 **kw: Unpack[WidgetOptions]) -> None:
        super().__init__(**kw)
        self.flush_hz = flush_hz
        self.telemetry_hz = telemetry_hz
        self._sampler_stop = threading.Event()
        self.telemetry_worker: Worker[str | None] | None = None
        self.handle = handle
        self.factory = factory
        self.initial = initial or []
        self._buffer: deque[dict] = deque()
        self.received = 0
        self.batches = 0

    def push(self, event: dict) -> None:
        """Called from the loop thread: only appends (deque.append is atomic)."""
        self._buffer.append(event)

    def on_mount(self) -> None:
        if self.initial:
            self.post_message(self.Batch(list(self.initial), reset=True))
        self.set_interval(1 / self.flush_hz, self.flush, name="live-flush")
        self.run_worker(self._run_loop, thread=True, group="agent-loop", name="agent-loop",
                        exclusive=True, exit_on_error=False)
        if self.telemetry_hz > 0:
            self.telemetry_worker = self.run_worker(self._sample_telemetry, thread=True, group="telemetry", name="telemetry",
                            exclusive=True, exit_on_error=False)

    def on_unmount(self) -> None:
        """The app is closing: stop the loop (its thread would keep the process alive) and the sampler."""
        self._sampler_stop.set()
        self.handle.request_stop()

    def _sample_telemetry(self) -> str | None:
        """NVML readings (no CUDA context) for the telemetry bar, as UI-only ``telemetry`` events
        (no seq: they are not in the session).  Returns why not when there is no NVML/GPU."""
        from harness.profiling.telemetry import TelemetrySampler

        def on_sample(s: dict) -> None:
            self.push({"type": ev_schema.TELEMETRY, **{k: v for k, v in s.items() if k != "throttle"}})

        sampler = TelemetrySampler(hz=self.telemetry_hz, on_sample=on_sample)
        if not sampler.available:
            return sampler.reason
        sampler.start()
        try:
            self._sampler_stop.wait()
        finally:
            sampler.stop()
        return None

    def flush(self) -> None:
        if not self._buffer:
            return
        events: list[dict] = []
        pop = self._buffer.popleft
        try:
            while True:
                events.append(pop())
        except IndexError:
            pass
        self.received += len(events)
        self.batches += 1
        self.post_message(self.Batch(events))

    def _run_loop(self) -> bool:
        """Runs in the worker thread; False when there is no loop to run (a read-only view)."""
        loop = self.handle.loop
        if loop is None and self.factory is not None:
            loop = self.factory()
        if loop is None:
            return False
        # events the loop wrote while it was built (track_added...) come first; the
        # model skips any it already has by seq.  Nothing runs between this and subscribe.
        for ev in list(getattr(getattr(loop, "session", None), "events", []) or []):
            self.push(ev)
        loop.subscribe(self.push)
        self.handle.attach(loop)
        try:
            loop.run()
        finally:
            if self.factory is not None:
                loop.evaluator.close()  # we built it: end its GPU worker process with the loop
        return True

    @on(Worker.StateChanged)
    def _worker_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group != "agent-loop":
            return
        if event.state == WorkerState.SUCCESS:
            self.flush()
            if not event.worker.result:
                return
            self.post_message(self.LoopFinished(None))
        elif event.state == WorkerState.ERROR:
            self.flush()
            err = event.worker.error
            self.post_message(self.LoopFinished(f"{type(err).__name__}: {err}".splitlines()[0]))


class ReplayFeed(EventFeed):
    """Recorded events released by a :class:`ReplayClock` (never touches a GPU)."""

    @dataclass
    class Position(Message):
        """Play state or position changed (for the replay bar)."""

        playing: bool
        speed: float
        pos: int
        total: int
        elapsed: float
        duration: float

    def __init__(self, events: list[dict], *, speed: float = 1.0, start: int | None = None,
                 autoplay: bool = True, **kw: Unpack[WidgetOptions]) -> None:
        super().__init__(**kw)
        self.clock = ReplayClock(events, speed=speed)
        self.start = start
        self.autoplay = autoplay
        self._last = time.monotonic()

    def on_mount(self) -> None:
        if self.start is not None:
            self._deliver(self.clock.seek_index(self.start))
        self.clock.playing = self.autoplay and not self.clock.at_end
        self._announce()
        self._last = time.monotonic()
        self.set_interval(1 / FLUSH_HZ, self._tick, name="replay-tick")

    def _tick(self) -> None:
        now = time.monotonic()
        dt, self._last = now - self._last, now
        if not self.clock.playing:
            return
        events = self.clock.tick(dt)
        if events:
            self.post_message(self.Batch(events))
        self._announce()

    def _deliver(self, seek: Seek) -> None:
        if seek.events or seek.reset:
            self.post_message(self.Batch(seek.events, reset=seek.reset))
        self._announce()

    def _announce(self) -> None:
        c = self.clock
        self.post_message(self.Position(c.playing, c.speed, c.pos, c.total, c.elapsed, c.duration))

    # -- controls (called by the screen's actions) --------------------------------------------
    def toggle(self) -> bool:
        """Play / pause; at the end, play again from the first event."""
        self._last = time.monotonic()
        if self.clock.at_end and not self.clock.playing:
            self._deliver(self.clock.seek_index(0))
        playing = self.clock.toggle()
        self._announce()
        return playing

    def pause(self) -> None:
        self.clock.playing = False
        self._announce()

    def faster(self) -> float:
        s = self.clock.faster()
        self._announce()
        return s

    def slower(self) -> float:
        s = self.clock.slower()
        self._announce()
        return s

    def step(self, n: int) -> None:
        self.clock.playing = False
        self._deliver(self.clock.step(n))

    def seek(self, index: int) -> None:
        self._deliver(self.clock.seek_index(index))
