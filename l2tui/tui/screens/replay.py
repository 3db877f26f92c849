"""The replay screen: the main screen fed from a recorded event log, with transport keys."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult

from .. import keymap
from ..widgets.bars import ReplayBar
from ..widgets.feeds import EventFeed, ReplayFeed
from .main import MainScreen
from .modals import PromptScreen


class ReplayScreen(MainScreen):
    # the steering keys stay bound (they say how to steer instead) but leave the footer, which
    # shows what works here: the transport keys and the view keys
    inherit_bindings = False
    BINDINGS = keymap.bindings(keymap.REPLAY) + keymap.bindings(keymap.MAIN, hide=("steer",))
    PALETTE_SPECS = tuple(keymap.MAIN) + tuple(keymap.REPLAY)

    def compose_top(self) -> ComposeResult:
        yield ReplayBar(id="replaybar")

    def make_feed(self) -> EventFeed:
        return ReplayFeed(self.ctx.events, speed=self.ctx.speed, start=self.ctx.start,
                          autoplay=self.ctx.autoplay, id="feed")

    @property
    def feed(self) -> ReplayFeed:
        return self.query_one(ReplayFeed)

    @on(ReplayFeed.Position)
    def _position(self, msg: ReplayFeed.Position) -> None:
        msg.stop()
        self.query_one(ReplayBar).show(playing=msg.playing, speed=msg.speed, pos=msg.pos, total=msg.total,
                                       elapsed=msg.elapsed, duration=msg.duration)

    def action_replay_play(self) -> None:
        self.feed.toggle()

    def action_replay_faster(self) -> None:
        self.feed.faster()

    def action_replay_slower(self) -> None:
        self.feed.slower()

    def action_replay_forward(self) -> None:
        self.feed.step(1)

    def action_replay_back(self) -> None:
        self.feed.step(-1)

    def action_replay_next_step(self) -> None:
        self.feed.pause()
        self.feed.seek(self.feed.clock.next_step_index(None, 1))

    def action_replay_prev_step(self) -> None:
        self.feed.pause()
        self.feed.seek(self.feed.clock.next_step_index(None, -1))

    def action_replay_start(self) -> None:
        self.feed.pause()
        self.feed.seek(0)

    def action_replay_end(self) -> None:
        self.feed.pause()
        self.feed.seek(self.feed.clock.total)

    def action_replay_seek(self) -> None:
        def done(text: str | None) -> None:
            if not text:
                return
            try:
                idx = self.feed.clock.parse_target(text, self.track_id)
            except ValueError as e:
                self.notify(str(e), severity="error", timeout=4)
                return
            self.feed.pause()
            self.feed.seek(idx)

        self.app.push_screen(PromptScreen("Seek to: step (12), time (90s, 1:30) or event (#500)", "12"), done)
