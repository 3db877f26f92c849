"""Replay controller: which events of a recorded session are "now".

Pure Python (no Textual) so the controls are easy to test: the replay feed
widget calls :meth:`ReplayClock.tick` on a timer and forwards what it returns.
Time in a replay is event time (``time`` of the envelope), scaled by the
speed; gaps longer than ``max_gap_s`` are shortened so a replay at ×1 does not
sit still through a long compile or an idle pause.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from .. import events as ev_schema

SPEEDS: tuple[float, ...] = (1, 2, 5, 10, 20, 50, 100)


@dataclass
class Seek:
    """Result of a seek: when ``reset`` the model must be rebuilt from ``events``."""

    reset: bool
    events: list[dict]


class ReplayClock:
    def __init__(self, events: list[dict], *, speed: float = 1.0, max_gap_s: float = 5.0) -> None:
        self.events = events
        self.times = [float(e.get("time", 0.0)) for e in events]
        # monotone "virtual" times with long gaps squeezed
        self.vtimes: list[float] = []
        acc = 0.0
        for i, t in enumerate(self.times):
            if i:
                acc += min(max(0.0, t - self.times[i - 1]), max_gap_s)
            self.vtimes.append(acc)
        self.pos = 0              # number of events already delivered
        self.vnow = 0.0           # virtual time of the play head
        self.playing = False
        self.speed = self._nearest_speed(speed)

    # -- state --------------------------------------------------------------------------------
    @staticmethod
    def _nearest_speed(speed: float) -> float:
        return min(SPEEDS, key=lambda s: abs(s - speed))

    @property
    def total(self) -> int:
        return len(self.events)

    @property
    def at_end(self) -> bool:
        return self.pos >= self.total

    @property
    def t0(self) -> float:
        return self.times[0] if self.times else 0.0

    @property
    def elapsed(self) -> float:
        """Session seconds of the last delivered event."""
        return (self.times[self.pos - 1] - self.t0) if self.pos else 0.0

    @property
    def duration(self) -> float:
        return (self.times[-1] - self.t0) if self.times else 0.0

    def faster(self) -> float:
        i = SPEEDS.index(self.speed)
        self.speed = SPEEDS[min(i + 1, len(SPEEDS) - 1)]
        return self.speed

    def slower(self) -> float:
        i = SPEEDS.index(self.speed)
        self.speed = SPEEDS[max(i - 1, 0)]
        return self.speed

    def toggle(self) -> bool:
        if self.at_end and not self.playing:
            return False
        self.playing = not self.playing
        return self.playing

    # -- moving the head ----------------------------------------------------------------------
    def tick(self, wall_dt: float) -> list[dict]:
        """Advance the head by ``wall_dt`` wall seconds at the current speed."""
        if not self.playing or self.at_end:
            self.playing = self.playing and not self.at_end
            return []
        if self.pos == 0:
            self.vnow = self.vtimes[0]
        self.vnow += wall_dt * self.speed
        end = bisect.bisect_right(self.vtimes, self.vnow, lo=self.pos)
        if end == self.pos and self.pos < self.total and self.vtimes[self.pos] <= self.vnow:
            end = self.pos + 1
        out = self.events[self.pos:end]
        self.pos = end
        if self.at_end:
            self.playing = False
        return out

    def step(self, n: int = 1) -> Seek:
        """Move by ``n`` events (negative: back)."""
        return self.seek_index(self.pos + n)

    def seek_index(self, index: int) -> Seek:
        """Put the head after ``index`` events."""
        index = max(0, min(self.total, index))
        if index >= self.pos:
            out = Seek(False, self.events[self.pos:index])
        else:
            out = Seek(True, self.events[:index])
        self.pos = index
        self.vnow = self.vtimes[index - 1] if index else 0.0
        return out

    def index_for_time(self, seconds: float) -> int:
        """Events up to ``seconds`` of session time since the first event."""
        return bisect.bisect_right(self.times, self.t0 + seconds)

    def index_for_step(self, step: int, track: str | None = None) -> int:
        """Just after the first event that belongs to agent step ``step`` (of ``track`` when given)."""
        for i, ev in enumerate(self.events):
            s = ev.get("step")
            if isinstance(s, int) and s >= step and (track is None or ev.get("track") == track):
                return i + 1
        return self.total

    def next_step_index(self, track: str | None = None, direction: int = 1) -> int:
        """Index just after the start of the next (or previous) stage of ``track`` (any track when None)."""
        rng = range(self.pos, self.total) if direction > 0 else range(self.pos - 2, -1, -1)
        for i in rng:
            ev = self.events[i]
            if ev.get("type") == ev_schema.STAGE and ev.get("status") == "start" and ev.get("stage") in ("generate", "plan", "seed", "code") \
                    and (track is None or ev.get("track") == track):
                return i + 1
        return self.total if direction > 0 else 0

    def parse_target(self, text: str, track: str | None = None) -> int:
        """Seek targets typed by the user: ``12`` or ``step 12`` (agent step), ``90s``,
        ``1:30`` or ``t 90`` (session time), ``#500`` or ``event 500`` (event index)."""
        s = text.strip().lower()
        if m := re.fullmatch(r"(?:#|e|event)\s*(\d+)", s):
            return int(m.group(1)) + 1
        if m := re.fullmatch(r"(\d+):(\d{1,2}(?:\.\d*)?)", s):
            return self.index_for_time(int(m.group(1)) * 60 + float(m.group(2)))
        if m := re.fullmatch(r"(?:t|time)?\s*(\d+(?:\.\d*)?)\s*s", s) or re.fullmatch(r"(?:t|time)\s*(\d+(?:\.\d*)?)", s):
            return self.index_for_time(float(m.group(1)))
        if m := re.fullmatch(r"(?:s|step)?\s*(\d+)", s):
            idx = self.index_for_step(int(m.group(1)), track)
            if idx >= self.total and track is not None:
                idx = self.index_for_step(int(m.group(1)), None)
            return idx
        raise ValueError(f"cannot seek to {text!r}: type a step (12), a time (90s or 1:30) or an event (#500)")
