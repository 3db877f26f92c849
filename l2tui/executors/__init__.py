"""Where a sweep's work runs: ``local`` (this machine, the default) or ``ray`` (a Ray cluster).

The interface every executor implements is documented in :mod:`l2tui.executors.base`;
``docs/sweep.md`` says how to use each from the command line. Ray is imported only by
:mod:`l2tui.executors.ray_executor`, so the default install never needs it.
"""

from __future__ import annotations

from .base import Executor, ExecutorError, Slot, SlotLost

EXECUTORS = ("local", "ray")

__all__ = ["EXECUTORS", "Executor", "ExecutorError", "Slot", "SlotLost"]
