"""Read-only view of a recorded session for export and rl-data.

A thin layer over :class:`l2tui.session.Session` that adds what an exporter
must be sure of: a kernel's text really hashes to its name (a damaged store
is never shipped as a library), and one-line errors for a folder that is not a
session.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from l2tui.errors import SessionError
from l2tui.session import Session


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


def open_session(path: str | Path) -> SessionView:
    """Open a session folder for reading."""
    p = Path(path).expanduser()
    if not p.is_dir() or not (p / "events.jsonl").is_file():
        raise SessionError(f"{p} is not a session folder (no events.jsonl); pass a folder under sessions/")
    s = Session.open(p)
    gpu = dict(s.gpu or {})
    if not gpu:
        for ev in s.iter_events({"session_started"}):
            gpu = dict(ev.get("gpu") or {})
            break
    return SessionView(
        path=p.resolve(),
        events=s.events,
        rewards=s.rewards(),
        gpu=gpu,
        config=dict(s.config or {}),
        versions=dict(getattr(s, "versions", None) or {}),
        session=s,
    )
