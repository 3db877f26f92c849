"""Opening a session folder for the UI.

The real :class:`l2tui.session.Session` is preferred; where it cannot be
imported a small read-only reader of the same on-disk format stands in, so
replay works on its own.  Either way the UI only uses
``events``, ``get_kernel``, ``path``, ``config`` and ``gpu``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

from .. import events as ev_schema
from ..errors import SessionError


class SessionLike(Protocol):
    path: Path

    @property
    def events(self) -> list[dict]: ...

    def get_kernel(self, sha: str) -> str: ...


class EventLogReader:
    """Read-only view of a session folder: events.jsonl (torn last line ignored) and kernels/."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.problems: list[str] = []
        self._events: list[dict] = []
        lines = (self.path / "events.jsonl").read_text(encoding="utf-8", errors="replace").split("\n")
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                ev = json.loads(line)
            except json.JSONDecodeError:
                if i >= len(lines) - 2:  # torn last line: the writer died mid-line
                    self.problems.append("torn last line ignored")
                    continue
                raise SessionError(f"{self.path}/events.jsonl line {i + 1} is not JSON: repair or remove it") from None
            if isinstance(ev, dict):
                self._events.append(ev)
        records = ev_schema.parse_all(self._events, where=str(self.path / "events.jsonl"))
        first = records[0] if records else None
        started = first if isinstance(first, ev_schema.SessionStarted) else ev_schema.SessionStarted()
        self.config: dict[str, Any] = dict(started.config or {})
        self.gpu: dict[str, Any] = dict(started.gpu or {})

    @property
    def events(self) -> list[dict]:
        return self._events

    def get_kernel(self, sha: str) -> str:
        return (self.path / "kernels" / f"{sha}.cu").read_text(encoding="utf-8")


def open_session(path: str | Path) -> SessionLike:
    """Open an existing session for reading; one-line error when it is not one."""
    p = Path(path).expanduser()
    if not (p / "events.jsonl").is_file():
        raise SessionError(f"{p} is not a session (no events.jsonl): pass a folder made by `l2tui` or `l2tui run`")
    try:
        from ..session import Session  # type: ignore[attr-defined]
    except ImportError:
        return EventLogReader(p)
    return Session.open(p)


def read_kernel(session: SessionLike | None, sha: str | None) -> str | None:
    """Kernel source by sha, or None when the session lacks it (reported, never raised)."""
    if session is None or not sha:
        return None
    try:
        return session.get_kernel(sha)
    except (OSError, KeyError, ValueError):
        return None
