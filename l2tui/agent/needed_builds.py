"""The builds a sweep's tracks need, compiled in the order they need them, while tracks run.

Why not build the whole catalog first: on a fresh machine a CUTLASS configuration costs 30-60 s of
nvcc and its evaluation well under a second, so a sweep that builds everything before its first
track leaves the GPU idle for the whole catalog build, and builds configurations that no pick of
this sweep times. Here a planner thread computes each track's pick (cheap: the cost model), in
track order, and queues every source it names that is not queued yet; a pool of ``width`` builders
takes the queue first-in first-out, so the first tracks' builds finish first. The sweep runs a
track once everything its pick names is built (``ready``), taking the first ready track in its
queue, so the GPU works on cheap shapes while the expensive configurations are still compiling.

A source is built once: every track that names it waits for the same build. With ``deadline``
no build starts after it (those sources count as ``not_started``; a track started before the
deadline builds what it still lacks itself).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Generic, Hashable, Sequence, TypedDict, TypeVar

#: what names a track (the sweep's track ids)
K = TypeVar("K", bound=Hashable)
#: one build's result (``harness.build.BuildResult`` in the sweep): counted as ``cached``, ``ok``
#: and ``seconds`` where it has them, and handed to ``progress``
R = TypeVar("R")


class _BuildStatsBase(TypedDict):
    configs: int
    wall_s: float
    compiled: int
    cached: int
    nvcc_s: float
    not_started: int


class BuildStats(_BuildStatsBase, total=False):
    """A run's builds as ``sweep.json`` records them under ``catalog`` (a prebuild of the whole
    catalog reports its failures by name instead of a ``failed`` count)."""
    failed: int


def no_builds() -> BuildStats:
    """The stats of a run that built nothing (every track already done, or out of time at once)."""
    return {"configs": 0, "wall_s": 0.0, "compiled": 0, "cached": 0, "failed": 0, "nvcc_s": 0.0, "not_started": 0}


class NeededBuilds(Generic[K, R]):
    """See the module docstring.

    ``plan(track)`` returns the sources a track's pick needs (called once a track, in order, on the
    planner thread); ``build(source)`` compiles one source and returns its build result (or None
    when it was not started); ``progress(done, total, result)`` is told of each finished build,
    ``total`` being the sources queued so far.
    """

    def __init__(self, plan: Callable[[K], Sequence[str]], build: Callable[[str], R | None], *, width: int,
                 deadline: float | None = None, progress: Callable[[int, int, R], None] | None = None) -> None:
        self._plan_of = plan
        self._build = build
        self.width = max(1, int(width))
        self.deadline = deadline
        self._progress = progress
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._needs: dict[K, list[str]] = {}      # track -> its sources, once planned
        self._built: dict[str, threading.Event] = {}     # source -> set once built, failed or skipped
        self._errors: list[BaseException] = []
        self._stop = False
        self._pool: ThreadPoolExecutor | None = None
        self._planner: threading.Thread | None = None
        self._planning_done = threading.Event()
        self._t0 = 0.0
        self._t_end: float | None = None
        self.compiled = self.cached = self.failed = self.not_started = 0
        self.nvcc_s = 0.0
        self._finished = 0

    # ------------------------------------------------------------ running

    def start(self, tracks: Sequence[K]) -> None:
        """Plan ``tracks`` in order on a thread of its own and build as they are planned."""
        self._t0 = time.monotonic()
        self._pool = ThreadPoolExecutor(max_workers=self.width, thread_name_prefix="sweep-build")
        self._planner = threading.Thread(target=self._plan_all, args=(list(tracks),), name="sweep-plan", daemon=True)
        self._planner.start()

    def _plan_all(self, tracks: list[K]) -> None:
        try:
            for t in tracks:
                if self._stop:
                    break
                sources = list(dict.fromkeys(self._plan_of(t)))
                new = []
                with self._changed:
                    for src in sources:
                        if src not in self._built:
                            self._built[src] = threading.Event()
                            new.append(src)
                    self._needs[t] = sources
                    self._changed.notify_all()
                for src in new:
                    assert self._pool is not None
                    self._pool.submit(self._build_one, src)
        except BaseException as e:  # noqa: BLE001 - reported to whoever waits (first_error / wait)
            with self._changed:
                self._errors.append(e)
                self._changed.notify_all()
        finally:
            self._planning_done.set()
            with self._changed:
                self._changed.notify_all()

    def _build_one(self, src: str) -> None:
        res: R | None = None
        try:
            if self._stop or (self.deadline is not None and time.monotonic() >= self.deadline):
                with self._lock:
                    self.not_started += 1
                return
            res = self._build(src)
            with self._lock:
                if res is None:
                    self.not_started += 1
                else:
                    self._finished += 1
                    if getattr(res, "cached", False):
                        self.cached += 1
                    else:
                        self.compiled += 1
                        self.nvcc_s += float(getattr(res, "seconds", 0.0) or 0.0)
                    if not getattr(res, "ok", True):
                        self.failed += 1
                    done, total = self._finished, len(self._built)
                self._t_end = time.monotonic()
            if res is not None and self._progress is not None:
                self._progress(done, total, res)
        except BaseException as e:  # noqa: BLE001 - a track that needs the source builds it and sees the error
            with self._lock:
                self._errors.append(e)
        finally:
            with self._changed:
                self._built[src].set()
                self._changed.notify_all()

    # ------------------------------------------------------------ asking

    def planned(self, track: K) -> bool:
        with self._lock:
            return track in self._needs

    def ready(self, track: K) -> bool:
        """Planned, and every source it needs built (or failed, or skipped at the deadline)."""
        with self._lock:
            return self._first_ready_locked([track]) == 0

    def first_ready(self, tracks: Sequence[K]) -> int | None:
        """The index of the first ready track of ``tracks``, else None."""
        with self._lock:
            return self._first_ready_locked(tracks)

    def wait_any(self, tracks: Sequence[K], timeout: float = 1.0) -> int | None:
        """Wait (at most ``timeout`` s) for one of ``tracks`` to be ready; its index, else None."""
        with self._changed:
            self._changed.wait_for(lambda: self._first_ready_locked(tracks) is not None or bool(self._errors)
                                   or (self._planning_done.is_set() and self._all_built_locked()), timeout)
        return self.first_ready(tracks)

    def _first_ready_locked(self, tracks: Sequence[K]) -> int | None:
        for i, t in enumerate(tracks):
            needs = self._needs.get(t)
            if needs is not None and all(self._built[s].is_set() for s in needs):
                return i
        return None

    def _all_built_locked(self) -> bool:
        return all(e.is_set() for e in self._built.values())

    def wait(self, track: K) -> None:
        """Until ``track`` is planned and its sources are built (or planning ended without it)."""
        with self._changed:
            self._changed.wait_for(lambda: track in self._needs or self._planning_done.is_set())
            needs = list(self._needs.get(track, ()))
        for s in needs:
            self._built[s].wait()

    def first_error(self) -> BaseException | None:
        with self._lock:
            return self._errors[0] if self._errors else None

    # ------------------------------------------------------------ ending

    def stop(self) -> None:
        """Start no more builds (the running ones go on; the caller may kill them); returns at once."""
        self._stop = True

    def close(self, wait: bool = True) -> BuildStats:
        """Stop planning; with ``wait`` let the queued builds run (else they are skipped); the
        stats for ``sweep.json``."""
        if not wait:
            self.stop()
        if self._planner is not None:
            self._planner.join()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        return self.stats()

    def stats(self) -> BuildStats:
        with self._lock:
            end = self._t_end if self._t_end is not None else self._t0
            return {"configs": len(self._built), "wall_s": round(max(0.0, end - self._t0), 3) if self._t0 else 0.0,
                    "compiled": self.compiled, "cached": self.cached, "failed": self.failed,
                    "nvcc_s": round(self.nvcc_s, 3), "not_started": self.not_started}
