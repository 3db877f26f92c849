"""The steering commands the agent loop takes between stages (from the app's keys, tests, scripts).

It is its own top-level module because both sides use it: the agent loop runs the commands and
the app, which must start without importing the agent, builds them. A command is a
:class:`LoopCommand`: its name (one of :data:`COMMAND_NAMES`), the track it
targets (None: every track) and its arguments. The app builds them from its key bindings;
``AgentLoop.send`` also takes the equivalent mapping (``{"name": ..., "track": ..., **args}``),
which is how a command is written to the session's ``command`` event.

Arguments by command: ``hint`` ``text``; ``edit`` ``source``; ``accept`` / ``reject`` / ``pin`` /
``unpin`` ``sha``; ``policy`` / ``baseline`` / ``acc`` / ``mode`` / ``dtype`` ``value``;
``reorder`` ``order`` (track ids); ``pause``, ``resume``, ``step``, ``stop``, ``profile``,
``bench_server`` none.

``dtype`` switches the session's element type (``fp16`` / ``bf16``); a session holds one, so the
loop makes the switch only while it holds no kernel, and answers either way with a
``dtype_switch`` event (:func:`dtype_switch_line` says it in words).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

COMMAND_NAMES = ("pause", "resume", "step", "stop", "hint", "edit", "accept", "reject", "pin", "unpin",
                 "policy", "baseline", "acc", "mode", "dtype", "reorder", "profile", "bench_server")

#: the element types a session can hold (``[loop] dtype``)
DTYPES = ("fp16", "bf16")

#: sent only to wake a waiting loop; it is not logged and does nothing
WAKE = "_wake"


@dataclass(frozen=True)
class LoopCommand:
    """One steering command (see the module docstring)."""

    name: str
    track: str | None = None
    args: Mapping[str, object] = field(default_factory=dict)

    @classmethod
    def of(cls, command: "LoopCommand | Mapping[str, object]") -> "LoopCommand":
        """A command from itself or from its mapping form (the keys besides name and track are
        its arguments)."""
        if isinstance(command, LoopCommand):
            return command
        d = dict(command)
        name, track = d.pop("name", None), d.pop("track", None)
        return cls(name, track, d)  # type: ignore[arg-type]  # a malformed name fails in the loop, logged

    def to_dict(self) -> dict[str, object]:
        """The mapping form: ``{"name": ..., "track": ..., **args}``."""
        return {"name": self.name, "track": self.track, **self.args}


def dtype_switch_line(dtype: object, refused: object) -> str:
    """One line for a ``dtype_switch`` event: the type in force, or why the switch was refused
    (the event is session data: its fields are shown as text, never trusted to be strings)."""
    if refused:
        return f"dtype switch refused: {refused}"
    return f"element type now {dtype}: new kernels are built, checked and timed in {dtype}"


__all__ = ["COMMAND_NAMES", "DTYPES", "WAKE", "LoopCommand", "dtype_switch_line"]
