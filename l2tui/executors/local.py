"""The default executor: nvcc on this machine's cores, one GPU slot on this machine's GPU.

Builds go through ``harness.build.build_many`` (one nvcc per core unless ``jobs`` says
otherwise, identical sources once, the content-addressed cache); the one slot wraps the
evaluator the caller made (a real ``harness.evaluate.Evaluator`` with its own worker process,
or recorded evaluations).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from .base import Progress

if TYPE_CHECKING:
    from harness.build import BuildResult
    from harness.evaluate import Evaluation
    from harness.evaluator_protocol import Evaluator
    from harness.gemm_shape import Shape


def gpu_identity(evaluator: object) -> dict:
    """The GPU an evaluator times on: its worker's ``gpu_info``, or a recording's GPU."""
    info: dict = {}
    fn = getattr(evaluator, "gpu_info", None)
    if fn is not None:
        info = dict(fn() or {})
    elif isinstance(meta := getattr(evaluator, "meta", None), dict):
        info = dict(meta.get("gpu") or {})
    return info


class EvaluatorSlot:
    """A :class:`~l2tui.executors.base.Slot` over one evaluator in this process."""

    def __init__(self, evaluator: "Evaluator", *, uuid: str | None = None, name: str | None = None) -> None:
        self.evaluator = evaluator
        self.uuid = uuid or "local"
        self.name = name or "local GPU"

    def evaluate(self, source: str, shape: "Shape", acc: str = "f32", *, flags: Sequence[str] = (),
                 time_baselines: bool = True) -> "Evaluation":
        return self.evaluator.evaluate(source, shape, acc, flags=tuple(flags), time_baselines=time_baselines)

    def evaluate_many(self, items: Sequence[tuple[str, str, Sequence[str]]], shape: "Shape", acc: str = "f32", *,
                      baselines: Sequence[str] = ()) -> dict[str, "Evaluation"]:
        from .batch import evaluate_many

        return evaluate_many(self.evaluator, items, shape, acc, baselines=baselines)

    def close(self) -> None:
        self.evaluator.close()


class LocalExecutor:
    """See the module docstring; ``evaluator`` may be None for build-only use."""

    name = "local"

    def __init__(self, evaluator: "Evaluator | None" = None, *, jobs: int | None = None, gpu: dict | None = None) -> None:
        self.jobs = jobs
        self._slots: list[EvaluatorSlot] = []
        if evaluator is not None:
            gpu = gpu if gpu is not None else gpu_identity(evaluator)
            self._slots.append(EvaluatorSlot(evaluator, uuid=gpu.get("uuid"), name=gpu.get("name")))

    @property
    def build_width(self) -> int:
        """Builds at once: ``--jobs``, else one per core."""
        from harness.build import default_jobs

        return self.jobs or default_jobs()

    def build_many(self, sources: Sequence[str], *, arch: str | None = None, flags: Sequence[str] = (),
                   progress: Progress | None = None, deadline: float | None = None) -> list["BuildResult | None"]:
        from harness.build import build_many

        return build_many(list(sources), arch=arch, flags=flags, jobs=self.jobs, progress=progress,
                          deadline=deadline)

    def slots(self) -> list[EvaluatorSlot]:
        return list(self._slots)

    def close(self) -> None:
        for s in self._slots:
            try:
                s.close()
            except Exception:  # noqa: BLE001 - closing must not hide the sweep's own outcome
                pass
