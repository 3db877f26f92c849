"""Helpers for the TUI tests: fixture sessions and a command-recording loop.

``RecordingLoop`` implements the AgentLoop surface the UI uses
(``subscribe`` / ``send`` / ``run`` / ``request_stop``, docs/INTERFACES.md):
it records every command, logs it as a ``command`` event into a real Session
and answers pause/resume with ``track_state`` events, the way the real loop
does.  It exists so steering keys can be tested without nvcc; the live-loop
test (test_tui_live.py) drives the real AgentLoop.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

from l2tui.session import Session
from l2tui.steering import LoopCommand
from l2tui.tui.app import L2App, UIContext
from l2tui.tui.sessionio import open_session
from l2tui.tui.loophandle import LoopHandle

FIXTURES = Path(__file__).parent / "fixtures" / "sessions"
GRID = FIXTURES / "tui_grid"
LIST = FIXTURES / "tui_list"
SIZE = (160, 48)


def copy_session(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


class RecordingLoop:
    """Records commands; logs them to the session and emits their obvious state changes."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.commands: list[dict] = []
        self._subs = []
        self._stop = threading.Event()
        self.received = threading.Event()

    def subscribe(self, fn) -> None:  # noqa: ANN001
        self._subs.append(fn)

    def _emit(self, type: str, **payload) -> None:
        ev = self.session.append(type, **payload)
        for fn in self._subs:
            fn(ev)

    def send(self, command) -> None:  # noqa: ANN001 - a LoopCommand or its mapping form, as AgentLoop.send
        command = LoopCommand.of(command).to_dict()
        self.commands.append(dict(command))
        args = {k: v for k, v in command.items() if k not in ("name", "track")}
        self._emit("command", name=command["name"], track=command.get("track"), args=args)
        if command["name"] in ("pause", "resume"):
            self._emit("track_state", track=command["track"], state="paused" if command["name"] == "pause" else "queued")
        if command["name"] == "hint":
            self._emit("hint", track=command.get("track"), text=command.get("text", ""))
        if command["name"] in ("accept", "reject", "pin", "unpin"):
            self._emit("decision", track=command["track"], sha=command["sha"], action=command["name"], by="user")
        self.received.set()

    def run(self) -> None:
        self._stop.wait()

    def request_stop(self) -> None:
        self._stop.set()


def live_app(tmp_path: Path, *, keys: dict | None = None, src: Path = GRID,
             telemetry_hz: float = 0.0) -> tuple[L2App, RecordingLoop]:
    """The main (live) screen on a copy of a fixture session, steering a RecordingLoop."""
    path = copy_session(src, tmp_path / "session")
    sess = Session.open(path)
    loop = RecordingLoop(sess)
    ctx = UIContext(session=sess, events=list(sess.events), replay=False, handle=LoopHandle(loop),
                    keys=keys or {}, baseline=None, title="l2tui test", telemetry_hz=telemetry_hz)
    return L2App(ctx), loop


def replay_app(src: Path = GRID, *, start: int | None = None, autoplay: bool = False, keys: dict | None = None,
               speed: float = 10) -> L2App:
    sess = open_session(src)
    ctx = UIContext(session=sess, events=list(sess.events), replay=True, autoplay=autoplay, start=start,
                    speed=speed, keys=keys or {}, title="l2tui replay test")
    return L2App(ctx)


def plain(widget) -> str:  # noqa: ANN001
    """The text a Static currently shows (its Rich renderable printed without styles)."""
    import io

    from rich.console import Console

    console = Console(width=200, file=io.StringIO(), color_system=None)
    console.print(widget.content)
    return console.file.getvalue()
