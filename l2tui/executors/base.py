"""What an executor is: where a sweep's builds run and which GPUs evaluate its tracks.

A sweep needs two kinds of work done: nvcc builds (CPU, parallel, content-addressed) and
evaluations (checks and timing on one GPU, through that GPU's own ``harness.worker.GpuWorker``).
An executor provides both behind this small interface, so the sweep driver (policy, session,
results file) is the same whether everything runs on this machine (``local``) or on a Ray
cluster (``ray``).

An executor must

* ``build_many(sources, arch=..., flags=..., progress=..., deadline=None)`` -> one
  ``harness.build.BuildResult`` per source, in order, each in the driver's build cache when it
  returns (``ok`` results have a ``so_path`` there). Compile failures are results, never
  exceptions (as ``harness.build``). ``progress(done, total, result)`` is called as builds finish
  (any thread). With ``deadline`` (a ``time.monotonic()`` value: a sweep's ``--max-seconds``) no
  build starts after it; the running ones finish and each source not started is None;
* ``build_width`` -> how many builds it runs at once (this machine's ``--jobs`` or cores, the
  cluster's CPUs): a sweep keeps that many ``build_many`` calls in flight while its tracks run;
* ``slots()`` -> the GPU slots, one per GPU, each a :class:`Slot`. A slot runs one call at a
  time; the driver gives each slot one track at a time and never splits a track across slots.
* ``close()`` -> stop every worker and actor it started (idempotent).

A slot must

* ``evaluate(source, shape, acc, flags=(), time_baselines=True)`` -> an Evaluation (object with
  the fields of ``harness.evaluate.Evaluation``), the same as ``Evaluator.evaluate``;
* ``evaluate_many(items, shape, acc, baselines=())`` -> ``{label: Evaluation}`` for
  ``items = [(label, source, flags), ...]``, checked and timed together in one request where the
  evaluator can (``l2tui.executors.batch``);
* have ``uuid`` (the GPU's UUID: which device timed a result) and ``name`` (its model);
* raise :class:`SlotLost` from either call when the slot itself is gone (its actor or process
  died, its node left the cluster): the driver then retires the slot and gives the track,
  from its start, to another one. A kernel that crashes or hangs the GPU worker is *not* a lost
  slot: the worker restarts and the Evaluation says ``crashed`` / ``timeout``.

Errors a user can fix (no cluster at that address, no GPU in the cluster) are
``l2tui.errors.UserError`` with one line that says what to do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Protocol, Sequence, runtime_checkable

from ..errors import UserError

if TYPE_CHECKING:
    from harness.build import BuildResult
    from harness.evaluate import Evaluation
    from harness.gemm_shape import Shape

#: ``progress(done, total, result)`` as each build finishes
Progress = Callable[[int, int, "BuildResult"], None]


class ExecutorError(UserError):
    """An executor cannot start or lost all its GPUs (one line, what to do)."""


class SlotLost(Exception):
    """A GPU slot is gone (its actor died or its node left); the track goes to another slot."""


@runtime_checkable
class Slot(Protocol):
    uuid: str
    name: str

    def evaluate(self, source: str, shape: Shape, acc: str = "f32", *, flags: Sequence[str] = (),
                 time_baselines: bool = True) -> Evaluation: ...

    def evaluate_many(self, items: Sequence[tuple[str, str, Sequence[str]]], shape: Shape, acc: str = "f32", *,
                      baselines: Sequence[str] = ()) -> dict[str, Evaluation]: ...


@runtime_checkable
class Executor(Protocol):
    name: str

    @property
    def build_width(self) -> int: ...

    def build_many(self, sources: Sequence[str], *, arch: str | None = None, flags: Sequence[str] = (),
                   progress: Progress | None = None, deadline: float | None = None) -> list[BuildResult | None]: ...

    def slots(self) -> Sequence[Slot]: ...

    def close(self) -> None: ...
