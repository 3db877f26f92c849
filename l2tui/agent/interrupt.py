"""A step stopped from outside (Ctrl-C, SIGTERM, the run ending), told apart from a kernel's fault."""

from __future__ import annotations


class StepInterrupted(Exception):
    """A compile or evaluation stopped from outside (Ctrl-C, SIGTERM, the run ending).

    Not the kernel's fault: the step leaves no ``compile_error`` (or any) reward, the
    loop stops at once, and ``--resume`` starts the step afresh.
    """


def interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` is the harness saying a build or evaluation was stopped from outside."""
    try:
        from harness.build import BuildInterrupted
    except ImportError:  # pragma: no cover - an older harness without it
        return False
    return isinstance(exc, BuildInterrupted)
