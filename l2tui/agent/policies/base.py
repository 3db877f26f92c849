"""The policy protocol: who plays the agent's roles (planner, coder, debugger, compiler).

The loop (``l2tui.agent.loop``) owns the state machine, the evaluator and the
session; a policy only turns a :class:`TrackContext` into :class:`Proposal` s.
Keeping policies free of I/O other than their own (an LLM endpoint, a search
RNG) is what lets the same loop be driven by a model, by a built-in search or
by the engineer's hand, and lets the session replay any of them.

Contract: docs/INTERFACES.md, "Policies".  Fields beyond the contract are
optional extras with defaults, so policies written against the contract keep
working.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Callable, Protocol, runtime_checkable

if TYPE_CHECKING:
    from harness.shapes import Shape
    from ...events import StepEvent
    from harness.known import KnownKernel

    from ..track import KernelEval
    from .pick import PickRequest

# Origins a candidate may have (the ``origin`` of a ``candidate`` event).
ORIGINS = ("seed", "patch", "debug", "human", "rewrite")

# Failure kinds the loop hands to ``Policy.debug`` (the evaluator's statuses,
# plus the agent-side ones).
FAILURE_KINDS = (
    "compile_error", "wrong", "crashed", "timeout", "unsupported",
    "no_patch", "patch_failed",
)


def _zero_usage() -> dict:
    return {"prompt_tokens": 0, "completion_tokens": 0}


@dataclass
class Proposal:
    """One candidate a policy wants evaluated.

    Exactly one of ``source`` (a whole file: seed, rewrite, human edit) or
    ``patch`` (search/replace blocks, see ``l2tui.agent.patches``) should be
    set.  Both ``None`` means the policy had nothing usable (e.g. the endpoint
    failed or the reply held no patch): the loop records a ``no_patch`` step,
    with ``error`` as the reason.
    """

    source: str | None = None
    patch: str | None = None
    plan: str = ""
    flags: list[str] = field(default_factory=list)
    family: str | None = None
    messages: list[dict] = field(default_factory=list)   # exact messages sent (all roles of the step)
    completion: str = ""                                  # the model's reply text (all roles of the step)
    usage: dict = field(default_factory=_zero_usage)      # {"prompt_tokens", "completion_tokens"}
    origin: str = "patch"                                 # seed / patch / debug / human / rewrite
    # extras (not in the contract's positional list; keyword only in practice)
    role: str = "coder"                                   # role that produced the code
    model: str | None = None                              # model name, or None for non-LLM policies
    error: str | None = None                              # one line: why there is no code
    known_timed: bool = False                             # the policy timed ctx.known beside its choice
    # kernels to time together before seeding (the search policy's pick): the loop times them and
    # ``pick.decide`` gives the seed; a proposal with a pick has no source of its own
    pick: PickRequest | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Failure:
    """Why the last candidate failed, handed to ``Policy.debug``.

    ``kind`` is one of :data:`FAILURE_KINDS`.  ``errors`` are structured compile
    errors (``CompileError.to_dict()``), ``check`` the evaluator's check dict.
    ``message`` is a one-line summary; ``log`` a trimmed compiler log.
    """

    kind: str
    message: str
    source: str                       # the failing kernel
    sha: str | None = None
    parent_source: str | None = None  # the last good kernel the failing one was derived from
    errors: list[dict] = field(default_factory=list)
    check: dict | None = None
    log: str = ""
    round: int = 1                    # 1-based debug round
    feedback: str | None = None       # why the previous debug attempt was rejected, if it was


@dataclass
class Attempt:
    """One tried idea and its outcome: the history the planner reads."""

    step: int
    plan: str
    origin: str
    kind: str                          # ok / compile_error / wrong / ... / no_patch / patch_failed
    sha: str | None = None
    speedup: float | None = None
    reward: float | None = None
    note: str = ""                     # one line: what happened
    accepted: bool = False             # became the new best


@dataclass
class TrackContext:
    """Everything a policy may read for one step of one track.

    ``profile`` stays ``None`` until delayed profiling has triggered for the
    track (the loop enforces this, so a policy never sees NCU metrics early).
    """

    track: str
    shape: Shape
    acc: str
    baseline: str
    step: int
    source: str | None = None          # current best kernel (None before the seed)
    sha: str | None = None
    evaluation: KernelEval | None = None   # what the loop keeps of the best's evaluation, or None
    times_ms: dict = field(default_factory=dict)
    speedup: float | None = None       # best's speedup over ``baseline``
    roofline_ms: float | None = None
    ptxas: dict | None = None
    errors: list[dict] = field(default_factory=list)
    history: list[Attempt] = field(default_factory=list)
    hint: str | None = None
    profile: dict | None = None        # {"verdict": str, "metrics": {name: {value, unit}}} once enabled
    profiling_enabled: bool = False
    seed_source: str | None = None     # a configured seed kernel, if any
    family: str | None = None
    flags: list[str] = field(default_factory=list)
    allowed_flags: list[str] = field(default_factory=list)
    feedback: str | None = None        # why the previous proposal failed to apply / was rejected
    mode: str = "offline"
    arch: str | None = None
    options: dict = field(default_factory=dict)   # policy-specific config ([search] table, ...)
    emit: "Callable[[StepEvent], None] | None" = None   # track and step are filled in by the loop
    # the best known kernels for the shape (harness.known.KnownKernel), timed beside the seed
    known: "list[KnownKernel]" = field(default_factory=list)
    dtype: str = "fp16"                # element type of A, B and C: "fp16" or "bf16" ([loop] dtype)
    # the loop can check and time many kernels in one request (its evaluator's ``can_batch``: a
    # GPU, not a recording), so a seed may propose a pick (``Proposal.pick``)
    can_batch: bool = False

    def send(self, event: "StepEvent") -> None:
        """Emit an event (e.g. ``llm_delta``) through the loop, if it gave a sink; the loop sets
        its ``track`` and ``step``."""
        if self.emit is not None:
            self.emit(event)


@runtime_checkable
class Policy(Protocol):
    """Plays the planner, coder, debugger and compiler roles for the loop."""

    name: str  # "llm" | "search" | "human"

    def seed(self, ctx: TrackContext) -> Proposal:
        """The first kernel of a track (a whole source)."""
        ...

    def propose(self, ctx: TrackContext) -> list[Proposal]:
        """One refinement step (plan + code): one or more proposals."""
        ...

    def debug(self, ctx: TrackContext, failure: Failure) -> Proposal:
        """A small patch that fixes ``failure`` without removing optimizations."""
        ...
