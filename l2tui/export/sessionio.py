"""Read-only view of a recorded session for export and rl-data.

A thin layer over :class:`l2tui.session.Session` that adds what an exporter
must be sure of: the folder is only read (never repaired: a run may still be
appending to it), a kernel's text really hashes to its name (a damaged store
is never shipped as a library), and one-line errors for a folder that is not a
session.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from l2tui import events as ev_schema
from l2tui.errors import SessionError
from l2tui.session import Session, check_real_dir, read_jsonl, read_text_nofollow


@dataclass
class SessionView:
    """What export and rl-data need from one session folder."""

    path: Path
    events: list[dict]
    rewards: list[dict]
    gpu: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)
    versions: dict = field(default_factory=dict)
    session: Session | None = None

    @property
    def records(self) -> list[ev_schema.Event]:
        """The events as typed records (validated when the folder was opened)."""
        if self.session is not None:
            return self.session.records
        return ev_schema.parse_all(self.events, where=str(self.path / "events.jsonl"))

    def get_kernel(self, sha: str) -> str:
        """Source text of kernel ``sha``, verified against its hash."""
        if self.session is None:
            raise SessionError(f"{self.path}: no session open")
        text = self.session.get_kernel(sha)
        if hashlib.sha256(text.encode("utf-8")).hexdigest() != sha:
            raise SessionError(
                f"{self.path}: kernels/{sha[:12]}….cu does not match its hash; the session store is damaged"
            )
        return text


def _rows(path: Path, problems: list[str]) -> list[dict]:
    """JSON lines of a file that may be growing: a partial last line is skipped, never repaired;
    never read through a link, and a line over the size cap is skipped and named in ``problems``."""
    rows, _, _, skipped = read_jsonl(path)
    problems += skipped
    return rows


def _read_only(p: Path) -> Session:
    """A Session over ``p`` without :meth:`Session.open`'s repair step.

    ``Session.open`` trims a torn last line so it can append again; an exporter
    must not write, because the folder may belong to a run that is still
    appending (the TUI's export action runs beside the live loop).
    """
    doc: dict = {}
    tf = p / "session.toml"
    check_real_dir(p)
    check_real_dir(p / "kernels")
    if tf.is_file() or tf.is_symlink():
        from ..config import tomllib

        try:
            doc = tomllib.loads(read_text_nofollow(tf))
        except (ValueError, OSError):
            doc = {}
    problems: list[str] = []
    events = _rows(p / "events.jsonl", problems)
    rewards = _rows(p / "rewards.jsonl", problems)
    records = ev_schema.parse_all(events, where=str(p / "events.jsonl"))  # one line for a malformed field
    first = records[0] if records and isinstance(records[0], ev_schema.SessionStarted) else ev_schema.SessionStarted()
    return Session(p, doc.get("config") or first.config or {}, doc.get("gpu") or first.gpu or {},
                   doc.get("versions") or first.versions or {}, events, rewards, problems, records)


def open_session(path: str | Path) -> SessionView:
    """Open a session folder for reading (never writes to it, even while a run appends)."""
    p = Path(path).expanduser()
    check_real_dir(p)
    if not p.is_dir() or not (p / "events.jsonl").is_file():
        raise SessionError(f"{p} is not a session folder (no events.jsonl); pass a folder under sessions/")
    s = _read_only(p)
    gpu = dict(s.gpu or {})
    if not gpu:
        started = next((r for r in s.records if isinstance(r, ev_schema.SessionStarted)), None)
        gpu = dict((started.gpu if started else None) or {})
    return SessionView(
        path=p.resolve(),
        events=s.events,
        rewards=s.rewards(),
        gpu=gpu,
        config=dict(s.config or {}),
        versions=dict(getattr(s, "versions", None) or {}),
        session=s,
    )
