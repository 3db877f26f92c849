"""One track of the agent loop: its state between steps (the best so far, the history, budgets,
steering), which the loop's scheduling, steering commands and resume all read and write."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generator

from .policies.base import Attempt, Policy

if TYPE_CHECKING:
    from harness.evaluate import Evaluation
    from harness.shapes import Shape

#: a track's steps as the loop runs them: each ``yield`` hands control back to the scheduler
#: at a stage boundary
Gen = Generator[None, None, None]


def track_id(shape: Shape, acc: str) -> str:
    """A track's name, ``MxNxK-acc``: the key of the session's events, the app's and the sweep's."""
    return f"{shape.m}x{shape.n}x{shape.k}-{acc}"


def _finite_ms(value: object) -> float | None:
    """A time or roofline read from an event: a finite, non-negative number, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


def _times(raw: object) -> dict[str, float | None]:
    """The ``times_ms`` of an event: the labels whose time is a number, or null (a library that
    could not be timed, as the worker reports it); anything else is left out."""
    if not isinstance(raw, Mapping):
        return {}
    return {str(k): None if v is None else _finite_ms(v) for k, v in raw.items()
            if v is None or _finite_ms(v) is not None}


@dataclass(frozen=True)
class KernelEval:
    """What the loop keeps of one kernel's evaluation on its track: what the next step's context,
    a baseline change, an accept or reject and the known-kernel record read of it.

    It is made in two places only: :meth:`of` where the loop receives the worker's
    :class:`~harness.evaluate.Evaluation`, and :meth:`from_events` where resume reads the kernel's
    ``compiled`` / ``checked`` / ``timed`` events back; it becomes a dict only in an event or a
    prompt. Frozen, so a kept evaluation cannot drift from what was recorded of it."""

    status: str                                   # the evaluation's status; "" when no check was recorded
    times_ms: Mapping[str, float | None] = field(default_factory=dict)   # label -> ms (``candidate``, baselines)
    roofline_ms: float | None = None
    ptxas: Mapping[str, object] | None = None     # the build's ptxas resources (``PtxasReport`` dict form)
    timing: str | None = None                     # how the times were taken (``harness.timing``), when said

    @classmethod
    def of(cls, ev: Evaluation) -> KernelEval:
        """The kept part of an evaluation the loop has just received."""
        ptxas = ev.build.ptxas.to_dict() if ev.build is not None and ev.build.ptxas is not None else None
        timing = ev.extra.get("timing")
        return cls(status=ev.status, times_ms=dict[str, float | None](ev.times_ms), roofline_ms=ev.roofline_ms, ptxas=ptxas,
                   timing=timing if isinstance(timing, str) else None)

    @classmethod
    def from_events(cls, compiled: Mapping[str, object] | None, checked: Mapping[str, object] | None,
                    timed: Mapping[str, object] | None) -> KernelEval | None:
        """The kept part of a kernel's evaluation from its events (read as data: a field of the
        wrong type is left out); None when no event of the three was recorded."""
        if compiled is None and checked is None and timed is None:
            return None
        status = (checked or {}).get("status")
        ptxas = (compiled or {}).get("ptxas")
        timing = (timed or {}).get("timing")
        return cls(status=status if isinstance(status, str) else "", times_ms=_times((timed or {}).get("times_ms")),
                   roofline_ms=_finite_ms((timed or {}).get("roofline_ms")),
                   ptxas=dict(ptxas) if isinstance(ptxas, Mapping) else None,
                   timing=timing if isinstance(timing, str) else None)


@dataclass(frozen=True)
class KnownCandidate:
    """A kernel the track has timed: its kept evaluation, its speedup over the track's baseline
    when it was timed, and the compiler flags it was built with (what an accept restores)."""

    evaluation: KernelEval
    speedup: float | None
    flags: tuple[str, ...] = ()


@dataclass
class Track:
    id: str
    shape: Shape
    acc: str
    baseline: str
    state: str = "queued"
    step: int = 0                     # last step number used (0 = seed)
    steps_done: int = 0               # refinement steps completed
    best_sha: str | None = None
    best_source: str | None = None
    best_eval: KernelEval | None = None
    best_speedup: float | None = None
    best_stack: list[str] = field(default_factory=list)
    seed_lines: int = 0
    family: str | None = None
    flags: list[str] = field(default_factory=list)
    history: list[Attempt] = field(default_factory=list)
    hint: str | None = None
    feedback: str | None = None
    profiling_enabled: bool = False
    profile: dict | None = None
    profiled_sha: str | None = None
    profile_error_shown: bool = False
    stable: int = 0
    last_structure: str | None = None
    tokens: int = 0
    wall_prior: float = 0.0
    run_started: float | None = None
    step_once: bool = False
    pending_edits: list[str] = field(default_factory=list)
    policy: Policy | None = None
    gen: Gen | None = None
    done_reason: str | None = None
    known: dict[str, KnownCandidate] = field(default_factory=dict)   # sha -> the kernel as timed on this track

    def wall_s(self) -> float:
        return self.wall_prior + (time.monotonic() - self.run_started if self.run_started else 0.0)
