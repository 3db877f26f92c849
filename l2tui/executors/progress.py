"""The build progress bar: one updating line on stderr, with an ETA from finished builds.

Why an ETA from finished builds only: cache hits finish at once and say nothing about how long
the rest will take; the rate of real nvcc builds (finished builds per second of wall time since
the first one started, which already counts the parallel jobs) does. Before the first real build
finishes the ETA is shown as ``?``.

On a terminal the line is redrawn in place (``\\r``); in a log (not a TTY), or beside other lines
(``redraw=False``: a sweep's tracks print while its builds run), a plain line is written at most
every 30 s and at the end, so the output stays readable.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from harness.build import BuildResult


def _hms(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


class BuildProgress:
    """``progress(done, total, result)`` callback for ``build_many`` (see the module docstring)."""

    def __init__(self, what: str = "build", stream: TextIO | None = None, width: int = 24,
                 every_s: float = 30.0, redraw: bool | None = None) -> None:
        self.what = what
        self.stream = stream or sys.stderr
        self.width = width
        self.every_s = every_s
        self.t0 = time.monotonic()
        self.cached = self.failed = self.built = 0
        self.nvcc_s = 0.0
        self.done = self.total = 0
        self._last = 0.0
        self._lock = threading.Lock()
        # redraw in place on a terminal, unless other lines share it (redraw=False)
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)()) if redraw is None else redraw

    def eta_s(self) -> float | None:
        """Seconds left at the rate of the real builds so far (None before the first one)."""
        if not self.built:
            return None
        rate = self.built / max(time.monotonic() - self.t0, 1e-6)
        return (self.total - self.done) / rate

    def line(self) -> str:
        frac = self.done / self.total if self.total else 1.0
        fill = int(round(frac * self.width))
        eta = self.eta_s()
        parts = [f"{self.done}/{self.total}"]
        if self.cached:
            parts.append(f"{self.cached} cached")
        if self.failed:
            parts.append(f"{self.failed} failed")
        tail = f"{_hms(time.monotonic() - self.t0)} elapsed, ETA {'?' if eta is None else _hms(eta)}"
        if self.done == self.total:
            tail = f"{_hms(time.monotonic() - self.t0)} (nvcc {_hms(self.nvcc_s)} in all)"
        return f"{self.what} [{'#' * fill}{'.' * (self.width - fill)}] {', '.join(parts)}  {tail}"

    def __call__(self, done: int, total: int, res: "BuildResult") -> None:
        with self._lock:
            self.done, self.total = done, total
            if getattr(res, "cached", False):
                self.cached += 1
            else:
                self.built += 1
                self.nvcc_s += float(getattr(res, "seconds", 0.0) or 0.0)
            if not getattr(res, "ok", True):
                self.failed += 1
            now = time.monotonic()
            last = done == total
            if self.tty:
                self.stream.write("\r" + self.line() + ("\n" if last else "\x1b[K"))
            elif last or now - self._last >= self.every_s:
                self.stream.write(self.line() + "\n")
                self._last = now
            self.stream.flush()
