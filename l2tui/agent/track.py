"""One track of the agent loop: its state between steps (the best so far, the history, budgets,
steering), which the loop's scheduling, steering commands and resume all read and write."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from .policies.base import Attempt


def track_id(shape: Any, acc: str) -> str:
    """A track's name, ``MxNxK-acc``: the key of the session's events, the app's and the sweep's."""
    return f"{shape.m}x{shape.n}x{shape.k}-{acc}"


@dataclass
class Track:
    id: str
    shape: Any
    acc: str
    baseline: str
    state: str = "queued"
    step: int = 0                     # last step number used (0 = seed)
    steps_done: int = 0               # refinement steps completed
    best_sha: str | None = None
    best_source: str | None = None
    best_eval: dict | None = None
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
    policy: Any = None
    gen: Any = None
    done_reason: str | None = None
    known: dict = field(default_factory=dict)   # sha -> {"eval": dict, "speedup": float|None}

    def wall_s(self) -> float:
        return self.wall_prior + (time.monotonic() - self.run_started if self.run_started else 0.0)
