"""Modal dialogs: text prompt (hint, seek), choice (policy, baseline…), in-app editor, queue order, help."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Input, Label, ListItem, ListView, OptionList, Static, TextArea
from textual.widgets.option_list import Option

from .. import keymap

CANCEL = keymap.bindings(keymap.DIALOG[:1])[0]


class PromptScreen(ModalScreen[str | None]):
    """One line of text (a hint for the planner, a seek target)."""

    BINDINGS = [CANCEL]

    def __init__(self, title: str, placeholder: str = "", value: str = "") -> None:
        super().__init__()
        self.title_text, self.placeholder, self.value = title, placeholder, value

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.title_text, classes="dialog-title")
            yield Input(value=self.value, placeholder=self.placeholder, id="prompt-input")
            yield Label("enter: send · escape: cancel", classes="dialog-help")

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(event.value.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)


class ChoiceScreen(ModalScreen[str | None]):
    """Pick one value (policy, baseline, accumulator, timing mode)."""

    BINDINGS = [CANCEL]

    def __init__(self, title: str, options: list[str], current: str | None = None) -> None:
        super().__init__()
        self.title_text, self.options, self.current = title, options, current

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.title_text, classes="dialog-title")
            yield OptionList(*[Option(f"{o}{'  (current)' if o == self.current else ''}", id=o) for o in self.options],
                             id="choice-list")
            yield Label("enter: choose · escape: cancel", classes="dialog-help")

    def on_mount(self) -> None:
        ol = self.query_one(OptionList)
        if self.current in self.options:
            ol.highlighted = self.options.index(self.current)

    @on(OptionList.OptionSelected)
    def _selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)


class EditorScreen(ModalScreen[str | None]):
    """Edit a kernel inside the app; ctrl+s submits it as a human step."""

    BINDINGS = keymap.bindings(keymap.EDITOR)

    def __init__(self, source: str, title: str) -> None:
        super().__init__()
        self.source, self.title_text = source, title

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog editor-dialog"):
            yield Label(self.title_text, classes="dialog-title")
            yield TextArea.code_editor(self.source, language=None, id="editor-area", soft_wrap=False)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(TextArea).focus()

    def action_submit(self) -> None:
        self.dismiss(self.query_one(TextArea).text)

    def action_cancel(self) -> None:
        self.dismiss(None)


class ReorderScreen(ModalScreen[list[str] | None]):
    """Move queued tracks up and down; ctrl+s sends the new order."""

    BINDINGS = keymap.bindings(keymap.REORDER)

    def __init__(self, tracks: list[tuple[str, str]]) -> None:
        super().__init__()
        self.order = [tid for tid, _ in tracks]
        self.labels = dict(tracks)

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label("Queue order (first runs first)", classes="dialog-title")
            yield ListView(*[ListItem(Label(self.labels[t]), id=f"q-{i}") for i, t in enumerate(self.order)], id="reorder-list")
        yield Footer()

    def _redraw(self, index: int) -> None:
        lv = self.query_one(ListView)
        for i, item in enumerate(lv.children):
            item.query_one(Label).update(self.labels[self.order[i]])
        lv.index = index

    def action_move(self, delta: int) -> None:
        lv = self.query_one(ListView)
        i = lv.index or 0
        j = i + delta
        if 0 <= j < len(self.order):
            self.order[i], self.order[j] = self.order[j], self.order[i]
            self._redraw(j)

    def action_apply(self) -> None:
        self.dismiss(list(self.order))

    def action_cancel(self) -> None:
        self.dismiss(None)


class HelpScreen(ModalScreen[None]):
    """Every key of the screen underneath, read from its live bindings (so remaps show)."""

    BINDINGS = keymap.bindings(keymap.DIALOG)

    def __init__(self, under: Screen) -> None:
        super().__init__()
        self.under = under

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog help-dialog"):
            yield Label(Text('Keys  (remap any of them in l2tui.toml: [keys] id = "key")'), classes="dialog-title")
            with VerticalScroll():
                yield Static(self._table(), id="help-table")
            yield Label("escape: close · ctrl+p: command palette", classes="dialog-help")

    def _table(self) -> Table:
        by_id: dict[str, list[str]] = {}
        descr: dict[str, str] = {}
        for key, ab in self.under.active_bindings.items():
            b = ab.binding
            bid = b.id or b.action
            by_id.setdefault(bid, [])
            disp = self.app.get_key_display(b.with_key(key) if hasattr(b, "with_key") else b)
            if disp not in by_id[bid]:
                by_id[bid].append(disp)
            descr[bid] = b.description or b.action
        table = Table(box=None, padding=(0, 2), expand=True)
        table.add_column("group", style="grey62")
        table.add_column("keys", style="bold cyan")
        table.add_column("action")
        table.add_column("id", style="grey50")
        order = {s.id: i for i, s in enumerate(keymap.ALL)}
        for bid in sorted(by_id, key=lambda b: (order.get(b, 999), b)):
            spec = keymap.BY_ID.get(bid)
            table.add_row(spec.group if spec else "app", " ".join(by_id[bid]), Text(descr[bid]), bid)
        return table

    def action_cancel(self) -> None:
        self.dismiss(None)
