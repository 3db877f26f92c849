"""Agent log: events and streamed model text, for every track or only the focused one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from rich.text import Text
from textual.widgets import RichLog

from ..state import LogEntry, SessionModel

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ..options import WidgetOptions

MAX_PER_FLUSH = 60
#: lines the log keeps; a rebuild (a new filter) refills at most this many
MAX_LINES = 2000
KIND_STYLE = {
    "error": "red", "best": "bold green", "llm": "grey62", "plan": "magenta", "hint": "italic magenta",
    "command": "bold cyan", "decision": "cyan", "reward": "grey70", "session": "bold", "profile": "magenta",
}


class AgentLog(RichLog):
    DEFAULT_CSS = """
    AgentLog { height: 9; border-top: solid $primary-darken-2; }
    """

    def __init__(self, model: SessionModel, **kw: Unpack[WidgetOptions]) -> None:
        super().__init__(max_lines=MAX_LINES, wrap=False, markup=False, highlight=False, **kw)
        self.model = model
        self.only_track: str | None = None
        self.filter_on = False

    def _line(self, e: LogEntry) -> Text:
        t = Text()
        t.append(f"{self.model.elapsed(e.time):7.1f}s ", style="grey50")
        if e.track:
            t.append(f"{e.track:<22} ", style="cyan")
        else:
            t.append(" " * 23)
        t.append(e.text, style=KIND_STYLE.get(e.kind, ""))
        return t

    def _wanted(self, e: LogEntry) -> bool:
        return not self.filter_on or e.track is None or e.track == self.only_track

    def add(self, entries: Iterable[LogEntry]) -> None:
        """Write a batch as one renderable (one RichLog write per flush, not per line);
        under a flood only the newest MAX_PER_FLUSH lines are drawn (all stay in the model)."""
        wanted = [e for e in entries if self._wanted(e)]
        if not wanted:
            return
        out = Text()
        if len(wanted) > MAX_PER_FLUSH:
            out.append(f"          … {len(wanted) - MAX_PER_FLUSH} lines skipped in this burst (l filters by track)\n",
                       style="grey50 italic")
            wanted = wanted[-MAX_PER_FLUSH:]
        for i, e in enumerate(wanted):
            if i:
                out.append("\n")
            out.append_text(self._line(e))
        self.write(out)

    def rebuild(self) -> None:
        self.clear()
        entries = [e for e in self.model.log if self._wanted(e)][-MAX_LINES:]
        self.add(entries)

    def set_filter(self, on: bool, track: str | None) -> None:
        changed = on != self.filter_on or (on and track != self.only_track)
        self.filter_on, self.only_track = on, track
        self.border_title = f"log: {track}" if on else "log: all tracks"
        if changed:
            self.rebuild()
