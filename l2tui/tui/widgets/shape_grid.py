"""The shape grid: M×N cells for one K (or every K at once), coloured by speedup.

Rendered as one Rich ``Text`` (no per-cell widgets), so the full 1,000-shape
grid redraws in well under a frame.  Shapes that do not form a grid go to
:class:`TrackList` instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness.shapes import GRID_DIMS
from rich.style import Style
from rich.text import Text
from textual.message import Message
from textual.widget import Widget

from .. import keymap
from ..state import SessionModel, Track, fmt_speedup
from .colors import STATE_MARK, dim_label, speedup_style

if TYPE_CHECKING:
    from textual.geometry import Size
    from typing_extensions import Unpack

    from ..options import WidgetOptions

CELL = 6


def forms_grid(tracks: list[Track]) -> bool:
    """Whether the shapes fit an axis-aligned grid small enough to draw as cells."""
    if not tracks:
        return True
    ms = {t.shape[0] for t in tracks}
    ns = {t.shape[1] for t in tracks}
    ks = {t.shape[2] for t in tracks}
    if all(d in GRID_DIMS for t in tracks for d in t.shape):
        return True
    return len(ms) <= 12 and len(ns) <= 12 and len(ks) <= 12 and len(tracks) >= 0.25 * len(ms) * len(ns) * len(ks)


class ShapeGrid(Widget, can_focus=True):
    """M rows × N columns for the selected K; ``compact`` shows all K as small heat maps."""

    BINDINGS = keymap.bindings(keymap.GRID)

    DEFAULT_CSS = """
    ShapeGrid { height: auto; width: 1fr; padding: 0 1; }
    """

    @dataclass
    class Focused(Message):
        """The cursor landed on a cell; ``track`` is None for an untried shape."""

        grid: "ShapeGrid"
        track: str | None
        shape: tuple[int, int, int]

    def __init__(self, model: SessionModel, **kw: Unpack[WidgetOptions]) -> None:
        super().__init__(**kw)
        self.model = model
        self.compact = False
        self.acc = "f32"
        self.baseline: str | None = None
        self.ms: list[int] = list(GRID_DIMS)
        self.ns: list[int] = list(GRID_DIMS)
        self.ks: list[int] = list(GRID_DIMS)
        self.row = 0
        self.col = 0
        self.kidx = 0
        self._index: dict[tuple[int, int, int], Track] = {}

    # -- data ---------------------------------------------------------------------------------
    def rebuild_axes(self) -> None:
        """Recompute axes after tracks were added (keeps the cursor on the same shape)."""
        old = self.current_shape()
        tracks = [t for t in self.model.tracks.values() if t.acc == self.acc] or list(self.model.tracks.values())
        self._index = {t.shape: t for t in tracks}
        dims_in_grid = all(d in GRID_DIMS for t in tracks for d in t.shape)
        if dims_in_grid:
            self.ms, self.ns, self.ks = list(GRID_DIMS), list(GRID_DIMS), list(GRID_DIMS)
        else:
            self.ms = sorted({t.shape[0] for t in tracks}) or [0]
            self.ns = sorted({t.shape[1] for t in tracks}) or [0]
            self.ks = sorted({t.shape[2] for t in tracks}) or [0]
        if old and old in self._index or (old and old[0] in self.ms and old[1] in self.ns and old[2] in self.ks):
            self._goto(old)
        self.row = min(self.row, len(self.ms) - 1)
        self.col = min(self.col, len(self.ns) - 1)
        self.kidx = min(self.kidx, len(self.ks) - 1)
        self.refresh(layout=True)

    def _goto(self, shape: tuple[int, int, int]) -> None:
        m, n, k = shape
        if m in self.ms and n in self.ns and k in self.ks:
            self.row, self.col, self.kidx = self.ms.index(m), self.ns.index(n), self.ks.index(k)

    def goto_track(self, track: Track) -> None:
        if track.acc != self.acc:
            self.acc = track.acc
            self.rebuild_axes()
        self._goto(track.shape)
        self.refresh()

    def current_shape(self) -> tuple[int, int, int] | None:
        try:
            return (self.ms[self.row], self.ns[self.col], self.ks[self.kidx])
        except IndexError:
            return None

    def current_track(self) -> Track | None:
        shape = self.current_shape()
        return self._index.get(shape) if shape else None

    @property
    def k(self) -> int:
        return self.ks[self.kidx]

    def set_k(self, k: int) -> None:
        if k in self.ks:
            self.kidx = self.ks.index(k)
            self._announce()

    def shift_k(self, delta: int) -> int:
        self.kidx = (self.kidx + delta) % len(self.ks)
        self._announce()
        return self.k

    # -- actions ------------------------------------------------------------------------------
    def action_move(self, drow: int, dcol: int) -> None:
        self.row = max(0, min(len(self.ms) - 1, self.row + drow))
        self.col = max(0, min(len(self.ns) - 1, self.col + dcol))
        self._announce()

    def action_select(self) -> None:
        self._announce()

    def _announce(self) -> None:
        self.refresh(layout=True)
        shape = self.current_shape()
        if shape:
            tr = self._index.get(shape)
            self.post_message(self.Focused(self, tr.id if tr else None, shape))

    # -- drawing ------------------------------------------------------------------------------
    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        if self.compact:
            rows = -(-len(self.ks) // self._per_row(width))
            return rows * (len(self.ms) + 1) + 1
        return len(self.ms) + 2

    def _cell(self, tr: Track | None) -> tuple[str, Style]:
        if tr is None:
            return "  ·  ", Style(color="grey35")
        sp = tr.speedup_vs(self.baseline)
        mark = STATE_MARK.get(tr.state, "")
        if sp is None:
            text = {"running": "  ▶  ", "failed": "  ✗  ", "paused": "  ‖  ", "stopped": "  ■  "}.get(tr.state, "  ○  ")
            color = {"failed": "red", "running": "yellow", "paused": "yellow"}.get(tr.state, "grey62")
            return text, Style(color=color)
        label = fmt_speedup(sp) if sp < 10 else f"{sp:.0f}×"
        if mark in ("▶", "‖", "✗", "■"):
            label = (label[:4] + mark)
        return f"{label:>5}", speedup_style(sp)

    def render(self) -> Text:
        return self._render_compact() if self.compact else self._render_k()

    def _render_k(self) -> Text:
        k = self.k
        out = Text()
        out.append(f"K = {k}", style="bold")
        out.append(f"  {self.acc}  ({self.kidx + 1}/{len(self.ks)}, [ ] switch K)", style="grey62")
        out.append("\n  M\\N ", style="bold grey70")
        for n in self.ns:
            out.append(f"{dim_label(n):>{CELL - 1}} ", style="bold grey70")
        out.append("\n")
        for r, m in enumerate(self.ms):
            out.append(f"{dim_label(m):>5} ", style="bold grey70")
            for c, n in enumerate(self.ns):
                text, style = self._cell(self._index.get((m, n, k)))
                if r == self.row and c == self.col and self.has_focus:
                    style = style + Style(reverse=True, bold=True)
                elif r == self.row and c == self.col:
                    style = style + Style(underline=True, bold=True)
                out.append(text, style=style)
                out.append(" ")
            if r < len(self.ms) - 1:
                out.append("\n")
        return out

    def _per_row(self, width: int) -> int:
        return max(1, (width - 5) // (len(self.ns) + 1))

    def _render_compact(self) -> Text:
        bw = len(self.ns) + 1
        per_row = self._per_row(self.size.width)
        out = Text()
        for start in range(0, len(self.ks), per_row):
            ks = self.ks[start:start + per_row]
            out.append("     ")
            for k in ks:
                sel = self.ks.index(k) == self.kidx
                out.append(f"K={dim_label(k):<{bw - 3}}", style="bold reverse" if sel else "bold grey70")
                out.append(" ")
            out.append("\n")
            for r, m in enumerate(self.ms):
                out.append(f"{dim_label(m):>4} ", style="grey70")
                for k in ks:
                    kk = self.ks.index(k)
                    for c, n in enumerate(self.ns):
                        tr = self._index.get((m, n, k))
                        ch, st = self._tiny(tr)
                        if kk == self.kidx and r == self.row and c == self.col:
                            st = st + Style(reverse=True, bold=True)
                        out.append(ch, style=st)
                    out.append(" ")
                out.append("\n")
        out.append("█ faster/slower than baseline  ▶ running  · queued  ✗ failed", style="grey50")
        return out

    def _tiny(self, tr: Track | None) -> tuple[str, Style]:
        if tr is None:
            return " ", Style(bgcolor="grey11")
        sp = tr.speedup_vs(self.baseline)
        if sp is not None:
            st = speedup_style(sp)
            return ("▶" if tr.state == "running" else " "), st
        ch = {"running": "▶", "failed": "✗", "paused": "‖", "stopped": "■"}.get(tr.state, "·")
        color = {"failed": "red", "running": "yellow"}.get(tr.state, "grey62")
        return ch, Style(color=color, bgcolor="grey15")
