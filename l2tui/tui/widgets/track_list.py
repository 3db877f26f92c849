"""List view of tracks, for custom shape lists that do not form a grid."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.text import Text
from textual import on
from textual.message import Message
from textual.widgets import DataTable

from .. import keymap
from ..state import SessionModel, Track, fmt_speedup
from .colors import speedup_style

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ..options import WidgetOptions

COLUMNS = ("shape", "role", "acc", "state", "step", "stage", "best", "baseline")
#: the columns of a session whose shapes have no roles (a grid's, a hand-written list)
PLAIN_COLUMNS = tuple(c for c in COLUMNS if c != "role")


class TrackList(DataTable):
    """One row per track, in queue order; highlighting a row focuses that track. A model's shapes
    are named by their GEMM role (``role``: qkv, o, gate_up, down, lm_head), which the grid cannot
    show."""

    DEFAULT_CSS = """
    TrackList { height: 1fr; }
    """
    # Home/End go to the first/last track (a DataTable's own Home/End scroll sideways, which a
    # row cursor never needs)
    BINDINGS = keymap.bindings(keymap.LIST)

    @dataclass
    class Focused(Message):
        track_list: "TrackList"
        track: str

    def __init__(self, model: SessionModel, **kw: Unpack[WidgetOptions]) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kw)
        self.model = model
        self.baseline: str | None = None

    def on_mount(self) -> None:
        self._set_columns()

    def _columns(self) -> tuple[str, ...]:
        return COLUMNS if self.model.roles else PLAIN_COLUMNS

    def _set_columns(self) -> None:
        """The role column only where the session knows roles, so a grid's list stays narrow."""
        want = self._columns()
        if tuple(str(k.value) for k in self.columns) != want:
            self.clear(columns=True)
            for col in want:
                self.add_column(col, key=col)

    def _cells(self, tr: Track) -> list:
        sp = tr.speedup_vs(self.baseline)
        cells = {"shape": tr.label, "role": Text(self.model.roles.get(tr.label, "")), "acc": tr.acc,
                 "state": tr.state, "step": str(tr.step), "stage": tr.stage,
                 "best": Text(fmt_speedup(sp), style=speedup_style(sp)), "baseline": self.baseline or tr.baseline}
        return [cells[c] for c in self._columns()]

    def sync(self, changed: set[str], added: bool) -> None:
        """Add rows for new tracks, update rows of changed ones (nothing while hidden:
        :meth:`resync` runs when the list is shown)."""
        if not self.display:
            return
        if added:
            self._set_columns()
            for tid, tr in self.model.tracks.items():
                if tid not in self.rows:
                    self.add_row(*self._cells(tr), key=tid)
        for tid in changed:
            known = self.model.tracks.get(tid)
            if known is None or tid not in self.rows:
                continue
            for col, val in zip(self._columns(), self._cells(known)):
                self.update_cell(tid, col, val)

    def resync(self) -> None:
        self.clear()
        if not self.display:
            return
        self.sync(set(), True)

    def action_first(self) -> None:
        if self.row_count:
            self.move_cursor(row=0)

    def action_last(self) -> None:
        if self.row_count:
            self.move_cursor(row=self.row_count - 1)

    def focus_track(self, tid: str) -> None:
        if tid in self.rows:
            self.move_cursor(row=self.get_row_index(tid))

    @on(DataTable.RowHighlighted)
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        if event.row_key is not None and event.row_key.value:
            self.post_message(self.Focused(self, str(event.row_key.value)))
