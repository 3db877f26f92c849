"""The l2tui Textual app: one main screen, live or replay, plus modal dialogs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from textual.app import App

from . import keymap
from .palette import SteeringCommands
from .sessionio import SessionLike
from .widgets.feeds import LoopHandle


@dataclass
class UIContext:
    """Everything a screen needs; built by :func:`l2tui.tui.launch.launch_app` or by tests."""

    session: SessionLike | None
    events: list[dict] = field(default_factory=list)
    replay: bool = False
    handle: LoopHandle | None = None
    loop_factory: Callable[[], Any] | None = None
    speed: float = 1.0
    autoplay: bool = True
    start: int | None = None
    baseline: str | None = None
    keys: dict[str, str] = field(default_factory=dict)
    note: str = ""
    notice: str = ""  # shown once as a notification when the screen opens (e.g. why this is a demo)
    title: str = "l2tui"
    flush_hz: float = 15.0
    telemetry_hz: float = 0.0  # live NVML sampling in the UI (0: only telemetry events from the session)


class L2App(App):
    CSS_PATH = "styles/app.tcss"
    TITLE = "l2tui"
    BINDINGS = keymap.bindings(keymap.APP)
    COMMANDS = App.COMMANDS | {SteeringCommands}

    def __init__(self, ctx: UIContext, **kw) -> None:
        super().__init__(**kw)
        self.ctx = ctx
        self.title = ctx.title

    def on_mount(self) -> None:
        if self.ctx.keys:
            self.set_keymap(self.ctx.keys)
        if self.ctx.replay:
            from .screens.replay import ReplayScreen

            self.push_screen(ReplayScreen(self.ctx))
        else:
            from .screens.main import MainScreen

            self.push_screen(MainScreen(self.ctx))

    def action_help(self) -> None:
        from .screens.main import MainScreen
        from .screens.modals import HelpScreen

        if isinstance(self.screen, MainScreen):
            self.push_screen(HelpScreen(self.screen))

    def on_unmount(self) -> None:
        if self.ctx.handle is not None:
            self.ctx.handle.request_stop()
