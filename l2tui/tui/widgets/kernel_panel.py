"""The focused candidate's CUDA source (Pygments highlighting) and its diff to the parent."""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING

from rich.console import Group, RenderableType
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widget import Widget
from textual.widgets import Static, TabbedContent, TabPane

from ..state import Candidate, Track

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ..options import WidgetOptions

SIDE_BY_SIDE_MIN = 150


def unified_text(diff: str) -> Text:
    """A unified diff with + / - / @@ lines coloured."""
    out = Text()
    for line in diff.splitlines():
        if line.startswith(("+++", "---")):
            style = "bold"
        elif line.startswith("+"):
            style = "green"
        elif line.startswith("-"):
            style = "red"
        elif line.startswith("@@"):
            style = "cyan"
        else:
            style = ""
        out.append(line + "\n", style=style)
    return out


def side_by_side(old: str, new: str, width: int) -> Table:
    """Old and new sources next to each other, changed lines coloured."""
    table = Table.grid(padding=(0, 1), expand=True)
    table.add_column(ratio=1, overflow="ellipsis", no_wrap=True)
    table.add_column(ratio=1, overflow="ellipsis", no_wrap=True)
    a, b = old.splitlines(), new.splitlines()
    sm = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal":
            # keep 2 lines of context around changes
            block = list(zip(a[i1:i2], b[j1:j2]))
            if len(block) > 5:
                for x, y in block[:2]:
                    table.add_row(Text(x, style="grey62"), Text(y, style="grey62"))
                table.add_row(Text(f"⋯ {len(block) - 4} unchanged lines", style="cyan"), Text(""))
                block = block[-2:]
            for x, y in block:
                table.add_row(Text(x, style="grey62"), Text(y, style="grey62"))
        else:
            left, right = a[i1:i2], b[j1:j2]
            for i in range(max(len(left), len(right))):
                table.add_row(Text(left[i] if i < len(left) else "", style="red"),
                              Text(right[i] if i < len(right) else "", style="green"))
    return table


class KernelPanel(Widget):
    """Tabs: Source and Diff.  ``show`` is called whenever the focused candidate changes."""

    DEFAULT_CSS = """
    KernelPanel { height: 1fr; }
    KernelPanel TabbedContent { height: 1fr; }
    KernelPanel TabPane { padding: 0; }
    KernelPanel VerticalScroll { height: 1fr; }
    KernelPanel .kp-title { height: 1; padding: 0 1; background: $boost; }
    """

    def __init__(self, **kw: Unpack[WidgetOptions]) -> None:
        super().__init__(**kw)
        self.source: str | None = None
        self.parent_source: str | None = None
        self.candidate: Candidate | None = None
        self.track: Track | None = None
        self._key: tuple | None = None

    def compose(self) -> ComposeResult:
        yield Static("no candidate yet", classes="kp-title", id="kp-title")
        with TabbedContent(id="kp-tabs"):
            with TabPane("Source", id="tab-source"):
                with VerticalScroll(id="kp-source-scroll"):
                    yield Static("", id="kp-source")
            with TabPane("Diff", id="tab-diff"):
                with VerticalScroll(id="kp-diff-scroll"):
                    yield Static("", id="kp-diff")

    def show(self, track: Track | None, candidate: Candidate | None, source: str | None,
             parent_source: str | None, *, force: bool = False) -> None:
        key = (track.id if track else None, candidate.sha if candidate else None, candidate.decision if candidate else None,
               track.best_sha if track else None, tuple(sorted(track.pinned)) if track else ())
        if key == self._key and not force:
            return
        self._key = key
        self.track, self.candidate, self.source, self.parent_source = track, candidate, source, parent_source
        self.query_one("#kp-title", Static).update(self._title())
        src_widget = self.query_one("#kp-source", Static)
        if source is None:
            src_widget.update(Text("(kernel source not in this session)" if candidate else "(no candidate yet)", style="grey50"))
        else:
            src_widget.update(Syntax(source, "cuda", line_numbers=True, word_wrap=False, theme="monokai",
                                     background_color="default"))
        self._render_diff()

    def on_resize(self) -> None:
        if self.candidate is not None:
            self._render_diff()

    def _render_diff(self) -> None:
        c = self.candidate
        body: RenderableType
        if c is None:
            body = Text("")
        elif self.size.width >= SIDE_BY_SIDE_MIN and self.source is not None and self.parent_source is not None:
            body = Group(Text(f"{(c.parent or '')[:10]} → {c.sha[:10]}", style="bold"),
                         side_by_side(self.parent_source, self.source, self.size.width))
        elif c.diff:
            body = unified_text(c.diff)
        elif self.source is not None and self.parent_source is not None:
            body = unified_text("".join(difflib.unified_diff(
                self.parent_source.splitlines(True), self.source.splitlines(True),
                fromfile=f"{(c.parent or '')[:10]}.cu", tofile=f"{c.sha[:10]}.cu")))
        else:
            body = Text(f"no parent: {c.origin or 'seed'} kernel", style="grey50")
        self.query_one("#kp-diff", Static).update(body)

    def _title(self) -> Text:
        c, tr = self.candidate, self.track
        if c is None or tr is None:
            return Text("no candidate yet", style="grey50")
        t = Text()
        t.append(f"{tr.label}-{tr.acc} ", style="bold")
        t.append(f"#{c.num} {c.sha[:12]} ", style="cyan")
        t.append(f"step {c.step} ", style="grey70")
        t.append(f"{c.origin or '?'} / {c.policy or '?'}")
        if c.family:
            t.append(f" / {c.family}", style="grey70")
        if c.flags:
            t.append(f"  {' '.join(c.flags)}", style="grey50")
        badges = []
        if c.sha == tr.best_sha:
            badges.append(("BEST", "black on green"))
        if c.sha in tr.pinned:
            badges.append(("PINNED", "black on yellow"))
        if c.sha in tr.accepted:
            badges.append(("ACCEPTED", "black on cyan"))
        if c.sha in tr.rejected:
            badges.append(("REJECTED", "white on red"))
        for label, style in badges:
            t.append("  ")
            t.append(f" {label} ", style=style)
        return t

    def toggle_tab(self) -> str:
        tabs = self.query_one("#kp-tabs", TabbedContent)
        tabs.active = "tab-diff" if tabs.active == "tab-source" else "tab-source"
        return tabs.active
