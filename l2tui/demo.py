"""What l2tui offers on a machine without a GPU, and the words it uses to say so.

A plain ``l2tui`` there replays the bundled demo session; a command that asks for a
live run (``l2tui --shapes ...``, ``l2tui run ...``) stops with :func:`no_gpu_message`,
which names the way to run the loop anyway: ``--recorded FILE`` replays evaluations
recorded on a GPU (the builds still run through nvcc, except for the kernels whose
build the recording holds).  Both live here so the app and ``l2tui run`` say the same.
"""

from __future__ import annotations

import os
from pathlib import Path

from . import paths


def gpu_present() -> bool:
    """NVML / nvidia-smi only, so the UI process never creates a CUDA context.
    ``L2TUI_FAKE_NO_GPU=1`` makes it False, so the no-GPU paths can be tried on a GPU machine."""
    if os.environ.get("L2TUI_FAKE_NO_GPU") == "1":
        return False
    from harness.gpuinfo import gpu_present as _present

    return _present()


def _shown(p: Path) -> str:
    """``p`` relative to the working directory when it lies below it (shorter to copy)."""
    try:
        return os.path.relpath(p) if Path(p).resolve().is_relative_to(Path.cwd().resolve()) else str(p)
    except (OSError, ValueError):
        return str(p)


def recorded_demo_command() -> str | None:
    """The command that replays the bundled demo run from its recording, when both are bundled."""
    rec = paths.demo_recording()
    shapes, settings = paths.DEMO_SHAPES, paths.DEMO_SETTINGS
    if rec is None or not shapes.is_file() or not settings.is_file():
        return None
    return (f"l2tui run --headless --recorded {_shown(rec)} --config {_shown(settings)} --policy search "
            f"--shapes {_shown(shapes)}")


def no_gpu_message() -> str:
    """One line for a live run asked for on a machine without a GPU."""
    cmd = recorded_demo_command()
    example = f", e.g. `{cmd}`" if cmd else " (tools/record_demo.py records them on a GPU machine)"
    return ("no NVIDIA GPU found (NVML / nvidia-smi): run on a GPU machine, or add --recorded FILE to replay "
            f"evaluations recorded on one{example}; kernels FILE lacks are built and marked not_recorded; "
            "plain `l2tui` replays the bundled demo session")


def demo_notice(path: Path) -> str:
    """The notice the app shows when a plain ``l2tui`` opens the demo for want of a GPU."""
    if paths.demo_is_real(path):
        return (f"no NVIDIA GPU found (NVML / nvidia-smi): replaying the bundled demo {path.name}, a real "
                "H200 session of l2tui (on a GPU machine `l2tui` starts a live session)")
    return (f"no NVIDIA GPU found (NVML / nvidia-smi) and no real demo session bundled: replaying {path.name}, "
            "the scripted test session (a toy kernel on two shapes, not the product's results)")
