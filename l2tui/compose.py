"""The composition root: config -> evaluator (GPU or recorded) -> session -> agent loop.

``l2tui run --headless`` (:mod:`l2tui.commands.run`), the app (:mod:`l2tui.tui.launch`) and
``l2tui sweep`` (:mod:`l2tui.commands.sweep`) each check their own command line, then build
their parts here, so an evaluator, a session or a loop is made the same way whichever
entry point asks for it. Every import is inside a function: the app builds its loop in a
worker thread, after its first frame, and its start-up must not pay for the agent, openai or
the harness's GPU worker.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Sequence, TypedDict

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from harness.evaluate import Evaluator as GpuEvaluator
    from harness.evaluator_protocol import Evaluator
    from harness.gemm_shape import Shape
    from harness.gpuinfo import GpuInfo

    from .config import Config

    from .agent.loop import AgentLoop
    from .agent.policies.base import Policy
    from .agent.recorded import RecordedEvaluator
    from .session import Session


# ------------------------------------------------------------------ evaluators


class GpuOptions(TypedDict, total=False):
    """The ``harness.evaluate.Evaluator`` settings a caller may give (its defaults elsewhere)."""

    mode: str
    timeout_s: float
    timing: str | None
    dtype: str


def recorded_evaluator(path: str | Path, *, arch: str | None = None, build: bool | str = True,
                       dtype: str | None = None) -> "RecordedEvaluator":
    """GPU evaluations recorded in ``path``, replayed (one line for an unreadable file, or for a
    recording of another element type than ``dtype`` when given).

    ``build``: True builds every kernel with nvcc; ``"unrecorded"`` keeps the recording's build
    of a recorded kernel (the loop's ``--recorded``); False builds nothing (reading the meta)."""
    from .agent.recorded import RecordedEvaluator

    return RecordedEvaluator(path, arch=arch, build=build, dtype=dtype)


def recorded_shapes(records: Mapping[str, object]) -> set[str]:
    """The ``MxNxK:acc`` pairs a recording holds results for (its keys are ``sha:MxNxK:acc``)."""
    out: set[str] = set()
    for key in records:
        parts = key.split(":") if isinstance(key, str) else []
        if len(parts) == 3:
            out.add(f"{parts[1]}:{parts[2]}")
    return out


def _volume(shape: str) -> int:
    """M*N*K of an ``MxNxK`` text (0 for anything else), to list a recording's smallest shapes first."""
    dims = shape.split("x")
    import math

    return math.prod(int(d) for d in dims) if len(dims) == 3 and all(d.isdigit() for d in dims) else 0


def require_recorded_shapes(records: Mapping[str, object], shapes: Sequence[object], acc: str, path: str) -> None:
    """Refuse, in one line, shapes the recording has nothing for.

    Replaying a recording can only give results it holds: a shape without any would seed from
    the reference kernel, come back ``not_recorded`` at every step and end with no best, so
    the run is refused before a session is created. ``l2tui run``, ``l2tui sweep`` and the app
    all refuse through here."""
    from .errors import UserError

    held = recorded_shapes(records)
    missing = [str(s) for s in shapes if f"{s}:{acc}" not in held]
    if not missing:
        return
    sizes = sorted({h.split(":")[0] for h in held if h.endswith(f":{acc}")}, key=_volume)
    listed = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
    having = (f"it has {len(sizes)} shape(s) ({', '.join(sizes[:3])}{', ...' if len(sizes) > 3 else ''})"
              if sizes else "it has none")
    raise UserError(f"the recording {path} has no evaluations for {listed} ({acc}): {having}; "
                    f"pick a recorded shape or record this one on a GPU (tools/record_evaluations.py)")


def recorded_gpu(meta: Mapping[str, object], path: str | Path, *, provisional: bool = False) -> dict:
    """The session's ``gpu`` entry for a replay: the recording's GPU, and where it came from."""
    recorded = meta.get("gpu")
    gpu: dict[str, object] = dict(recorded) if isinstance(recorded, Mapping) else {}
    gpu["replayed_from"] = str(path)
    if provisional:
        gpu["provisional"] = True
    return gpu


def gpu_evaluator(*, arch: str | None, baselines: Sequence[str], **options: Unpack[GpuOptions]) -> "GpuEvaluator":
    """A GPU evaluator (its own worker process); ``options`` are ``harness.evaluate.Evaluator``'s
    (mode, timeout_s, timing, ...), its defaults where not given."""
    from .errors import UserError

    try:
        from harness.evaluate import Evaluator
    except ImportError as e:
        raise UserError(f"GPU evaluation is not available ({e}); reinstall l2tui with the gpu extra") from None
    return Evaluator(arch=arch, baselines=tuple(baselines), **options)


def config_gpu_evaluator(cfg: Config) -> "GpuEvaluator":
    """The GPU evaluator ``[harness]`` describes (arch, baselines, mode, timeout_s, timing), in
    the run's element type (``[loop] dtype``): its kernels and baselines take that type."""
    h = cfg.harness
    return gpu_evaluator(arch=h.get("arch") or None, baselines=h["baselines"], mode=h["mode"],
                         timeout_s=h["timeout_s"], timing=h.get("timing"), dtype=str(cfg.loop.get("dtype") or "fp16"))


def loop_evaluator(cfg: Config, recorded: str | Path | None) -> "Evaluator":
    """The agent loop's evaluator: the recording in ``recorded`` (its builds kept), else the GPU."""
    if recorded:
        return recorded_evaluator(recorded, arch=cfg.harness.get("arch") or None, build="unrecorded",
                                  dtype=str(cfg.loop.get("dtype") or "fp16"))
    return config_gpu_evaluator(cfg)


def require_local_gpu() -> GpuInfo:
    """This machine's GPU (``harness.gpuinfo.GpuInfo``), or ``ToolMissing`` with the one line that
    names ``--recorded``."""
    from harness.errors import ToolMissing
    from harness.gpuinfo import require_gpu

    from .demo import gpu_present, no_gpu_message

    if not gpu_present():
        raise ToolMissing(no_gpu_message())
    return require_gpu()


# ------------------------------------------------------------------ sessions


def open_session(path: str | Path, *, writer: str) -> "Session":
    """A session to continue, held by ``<writer> --resume`` (one writer at a time)."""
    from .session import Session

    return Session.open(path, writer=f"{writer} --resume")


def create_session(path: str | Path, *, writer: str, config: dict, gpu: dict,
                   versions: dict | None = None) -> "Session":
    """A new session, held by ``writer``."""
    from .session import Session

    return Session.create(path, config=config, gpu=gpu, versions=dict(versions or {}), writer=writer)


# ------------------------------------------------------------------ the loop


def policies(name: str, cfg: Config, gpu: dict | None = None) -> tuple["Policy", Callable[[str], "Policy"]]:
    """The named policy and the factory the loop switches policies with (the app's ``policy``
    command); made before any session, so a bad ``[llm]`` fails with nothing created."""
    from .agent.policies import make_policy

    gpu = gpu if gpu is not None else {}

    def factory(other: str) -> "Policy":
        return make_policy(other, cfg, gpu=gpu)

    return make_policy(name, cfg, gpu=gpu), factory


def agent_loop(session: "Session", cfg: Config, *, policy: "Policy", policy_factory: Callable[[str], "Policy"],
               evaluator: "Evaluator", shapes: Sequence[Shape] = (), acc: str | None = None) -> "AgentLoop":
    """The agent loop over ``evaluator``, one track per shape in ``shapes`` (none on a resume:
    the session's own tracks come back)."""
    from .agent.loop import make_loop

    loop = make_loop(session, cfg, policy=policy, evaluator=evaluator, policy_factory=policy_factory)
    for s in shapes:
        loop.add_track(s, acc)
    return loop


__all__ = ["agent_loop", "config_gpu_evaluator", "create_session", "gpu_evaluator", "loop_evaluator",
           "open_session", "policies", "recorded_evaluator", "recorded_gpu", "require_local_gpu"]
