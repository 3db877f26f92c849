"""Opening a session folder for the UI.

:func:`open_session` opens a folder with :class:`l2tui.session.Session`;
:class:`EventLogReader` is a read-only view of the same on-disk format over the
same bounded, link-refusing readers.  Either way the UI only uses ``events``,
``get_kernel``, ``path``, ``config`` and ``gpu``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from .. import events as ev_schema
from ..errors import SessionError
from ..session import Session, read_jsonl, read_text_nofollow


class SessionLike(Protocol):
    path: Path

    @property
    def events(self) -> list[dict]: ...

    def get_kernel(self, sha: str) -> str: ...


class EventLogReader:
    """Read-only view of a session folder: events.jsonl (torn last line ignored) and kernels/.

    The files are read as the session layer reads them (:func:`l2tui.session.read_jsonl`): never
    through a link, a line over the cap skipped and named, so a handed-over session folder is data
    to the UI and never a way to read or hold a file elsewhere."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        rows, _, torn, problems = read_jsonl(self.path / "events.jsonl")
        self.problems: list[str] = list(problems) + (["torn last line ignored"] if torn else [])
        self._events: list[dict] = rows
        records = ev_schema.parse_all(self._events, where=str(self.path / "events.jsonl"))
        first = records[0] if records else None
        started = first if isinstance(first, ev_schema.SessionStarted) else ev_schema.SessionStarted()
        self.config: dict[str, object] = dict(started.config or {})
        self.gpu: dict[str, object] = dict(started.gpu or {})

    @property
    def events(self) -> list[dict]:
        return self._events

    def get_kernel(self, sha: str) -> str:
        return read_text_nofollow(self.path / "kernels" / f"{sha}.cu")


def open_session(path: str | Path) -> SessionLike:
    """Open an existing session for reading; one-line error when it is not one."""
    p = Path(path).expanduser()
    if not (p / "events.jsonl").is_file():
        raise SessionError(f"{p} is not a session (no events.jsonl): pass a folder made by `l2tui` or `l2tui run`")
    return Session.open(p)


def read_kernel(session: SessionLike | None, sha: str | None) -> str | None:
    """Kernel source by sha, or None when the session lacks it (reported, never raised)."""
    if session is None or not sha:
        return None
    try:
        return session.get_kernel(sha)
    except (OSError, KeyError, ValueError):
        return None
