"""What an evaluator is: the one seam between the agent (loop, search policy, sweep executors)
and whatever checks and times a kernel.

Three evaluators implement it: :class:`harness.evaluate.Evaluator` (a GPU, through its own
worker process), ``l2tui.agent.recorded.RecordedEvaluator`` (results recorded on a GPU,
replayed where there is none) and the evaluator each Ray GPU actor holds
(``l2tui.executors.ray_executor.GpuActor``: one of the two, one per GPU). Callers ask the
evaluator what it can do through the capability attributes below instead of probing for
methods, so a new evaluator says in one place what it offers.

An evaluator must

* ``evaluate(source, shape, acc, *, flags=(), label="candidate", time_baselines=True)`` ->
  an :class:`EvaluationLike`: build, check and time one kernel on one shape. It **never raises
  for a kernel's fault**: compile errors, wrong results, crashes, hangs and unsupported shapes
  come back with the matching ``status`` (``harness.evaluate.STATUSES``; a recording that lacks
  the kernel answers ``"not_recorded"``). It raises only when the evaluator itself cannot work:
  ``harness.errors.ToolMissing`` (no GPU, no nvcc), ``harness.build.BuildInterrupted`` (the run
  is being stopped), ``harness.errors.HarnessError`` for a broken setup.
* ``close()``: stop what it started (its worker process); idempotent.
* declare ``arch`` (the nvcc architecture it builds for, None: the GPU's own) and ``mode``
  (the timing mode it times in, ``"offline"`` or ``"server"``; None when it cannot choose one,
  as a recording, whose figures were timed elsewhere). A caller may assign ``mode`` when it is
  not None.
* declare its capabilities:

  - ``can_batch``: ``run_shape`` checks and times several candidates and the baselines in one
    worker request (``harness.batch``: the pick, timed by the loop's seed stage or a sweep). When False,
    ``run_shape`` is not called; callers evaluate one kernel at a time.
  - ``replays_recording``: its figures come from a recording of another machine's GPU, so this
    machine's GPU telemetry says nothing about them, and ``recorded_build`` / ``profile`` answer
    from the recording.
  - ``own_profiles``: ``profile(source, shape, acc)`` gives this evaluator's profile of a kernel
    (a recording's, or one a recorder keeps); when False the caller profiles with
    ``harness.profiling.api.profile_kernel`` itself.

Methods a capability guards (``run_shape`` with ``can_batch``; ``recorded_build`` with
``replays_recording``; ``profile`` with ``own_profiles``) are documented on
:class:`BatchEvaluator` and :class:`ReplayEvaluator`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, Sequence, runtime_checkable

if TYPE_CHECKING:
    from .evaluate import Evaluation
    from .gemm_shape import Shape


@runtime_checkable
class EvaluationLike(Protocol):
    """The result of one evaluation: the fields of ``harness.evaluate.Evaluation``."""

    status: str
    times_ms: dict[str, float]
    message: str

    def speedup(self, baseline: str, label: str = "candidate") -> float | None: ...

    def to_dict(self) -> dict[str, Any]: ...


@runtime_checkable
class Evaluator(Protocol):
    """Build, check and time one kernel on one shape; see the module docstring."""

    arch: str | None
    mode: str | None
    can_batch: bool
    replays_recording: bool
    own_profiles: bool

    def evaluate(self, source: str, shape: Shape, acc: str = "f32", *, flags: Sequence[str] = (),
                 label: str = "candidate", time_baselines: bool = True) -> Evaluation: ...

    def close(self) -> None: ...


@runtime_checkable
class BatchEvaluator(Evaluator, Protocol):
    """An evaluator with ``can_batch``: many candidates in one worker request.

    ``run_shape(shape, acc, candidates, baselines)`` takes ``candidates`` as
    ``[{"label", "so_path", "nondeterministic"}, ...]`` (already built) and returns the worker's
    ``evaluate_shape`` answer (``status``/``checks``/``times_ms``/``spread`` keyed by label, and
    the request's own keys). A candidate that crashes or hangs the worker is charged alone; it
    raises ``harness.worker.WorkerError`` only when the baselines alone cannot be evaluated."""

    timing: str | None

    def run_shape(self, shape: Shape, acc: str, candidates: list[dict[str, Any]], baselines: Sequence[str],
                  timeout_s: float | None = None) -> dict[str, Any]: ...


@runtime_checkable
class ReplayEvaluator(Evaluator, Protocol):
    """An evaluator with ``replays_recording`` (and ``own_profiles``).

    ``recorded_build(source, shape, acc, flags)``: the recording's own build of that kernel (its
    ptxas report) when the evaluator replays builds too; None: the caller builds it for real.
    ``profile(source, shape, acc)``: the recorded profile, or None when there is none (never
    raises for a missing one)."""

    def recorded_build(self, source: str, shape: Shape, acc: str = "f32", flags: Sequence[str] = ()) -> dict[str, object] | None: ...

    def profile(self, source: str, shape: Shape, acc: str = "f32") -> object: ...


__all__ = ["BatchEvaluator", "EvaluationLike", "Evaluator", "ReplayEvaluator"]
