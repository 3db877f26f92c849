"""The l2tui Textual app: one main screen, live or replay, plus modal dialogs.

The app owns the link to the loop: a screen's steering keys post
:class:`~l2tui.tui.screens.main.MainScreen.CommandSent` messages, and the app hands their
typed command to the loop (:meth:`L2App._deliver`).
"""

from __future__ import annotations

from textual import on
from textual.app import App

from . import keymap
from .context import UIContext
from .screens.main import MainScreen
from .screens.modals import HelpScreen
from .screens.replay import ReplayScreen

__all__ = ["L2App", "UIContext"]


class L2App(App):
    CSS_PATH = "styles/app.tcss"
    TITLE = "l2tui"
    BINDINGS = keymap.bindings(keymap.APP)

    def __init__(self, ctx: UIContext) -> None:
        super().__init__()
        self.ctx = ctx
        self.title = ctx.title

    def on_mount(self) -> None:
        if self.ctx.keys:
            self.set_keymap(self.ctx.keys)
        self.push_screen(ReplayScreen(self.ctx) if self.ctx.replay else MainScreen(self.ctx))

    @on(MainScreen.CommandSent)
    def _deliver(self, msg: MainScreen.CommandSent) -> None:
        """A steering command from the screen, to the loop (queued until the loop is built)."""
        if self.ctx.handle is not None:
            self.ctx.handle.send(msg.command)

    def action_help(self) -> None:
        if isinstance(self.screen, MainScreen):
            self.push_screen(HelpScreen(self.screen))

    def on_unmount(self) -> None:
        if self.ctx.handle is not None:
            self.ctx.handle.request_stop()
