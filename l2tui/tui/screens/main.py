"""The main screen: grid, kernel, metrics, history, telemetry, log — and the steering keys.

The same screen serves live sessions (events from the AgentLoop) and replays
(:class:`~l2tui.tui.screens.replay.ReplayScreen`, events from the log).  It
holds no optimisation logic: every steering key becomes one typed command
(:class:`~l2tui.steering.LoopCommand`) posted as a :class:`MainScreen.CommandSent`
message, which the app hands to the loop (docs/INTERFACES.md); its effects come back as events.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from rich.markup import escape
from textual import on, work
from textual.app import ComposeResult, SuspendNotSupported
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import Screen
from textual import events
from textual.widgets import Footer, Static

from ...export.core import routes_line
from ... import events as ev_schema
from ...steering import DTYPES, LoopCommand, dtype_switch_line
from .. import keymap
from ..palette import SteeringCommands
from ..sessionio import read_kernel
from ..state import Candidate, Changes, SessionModel, Track
from ..widgets.agent_log import AgentLog
from ..widgets.bars import TelemetryBar
from ..widgets.feeds import EventFeed, LiveFeed
from ..widgets.history import HistoryPanel
from ..widgets.kernel_panel import KernelPanel
from ..widgets.metrics_panel import MetricsPanel, profiled_ancestor
from ..widgets.shape_grid import ShapeGrid, forms_grid
from ..widgets.track_list import TrackList
from .known import KnownScreen
from .modals import ChoiceScreen, EditorScreen, HelpScreen, PromptScreen, ReorderScreen

if TYPE_CHECKING:
    from ..context import UIContext

POLICIES = ("llm", "search", "human")
ACCS = ("f32", "f16")
MODES = ("offline", "server")
DEFAULT_BASELINES = ("cublaslt_autotune", "cublaslt_heuristic", "cublas", "torch")
VIEWS = ("grid", "all", "list")
HISTORY_EVERY_S = 1.0
#: the panels a small terminal shows one at a time (``w`` cycles them)
PANES = ("grid", "kernel", "metrics", "history")
#: below this many columns or rows the body shows one panel at a time (80×24 is the smallest size
#: the layout is made for: docs/tui.md); at this size and above, all four side by side
PANES_BELOW = (110, 32)


def export_summary(manifest: dict, out: Path) -> str:
    """The export toast: where the library went and how many shapes run an exported kernel against
    how many the library fallback (:func:`l2tui.export.core.routes_line`, the wording the command
    prints), so a count of exported entries is never read as a count of kernels that win."""
    return f"exported to {out}: {routes_line(manifest)}"


class MainScreen(Screen):
    BINDINGS = keymap.bindings(keymap.MAIN)
    COMMANDS = {SteeringCommands}
    #: the key specs the command palette lists on this screen
    PALETTE_SPECS: tuple[keymap.Spec, ...] = tuple(keymap.MAIN)

    @dataclass
    class CommandSent(Message):
        """A steering command for the loop; the app delivers it (``L2App._deliver``), tests listen."""

        command: LoopCommand

    def __init__(self, ctx: "UIContext") -> None:
        super().__init__()
        self.ctx = ctx
        self.model = SessionModel()
        self.track_id: str | None = None
        self.follow = True
        self.view = "grid"
        self.pane = "grid"
        self.baseline: str | None = ctx.baseline
        self.sent: list[LoopCommand] = []
        self._history_cooling = False  # the all-shapes plot was drawn less than a second ago
        self._history_dirty = False    # ... and events came since
        #: track id -> the candidate the user chose to see there instead of the track's best
        self.picked: dict[str, str] = {}
        self._sources: dict[str, str | None] = {}

    # -- layout -------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield TelemetryBar(self.model, id="telemetry")
        yield from self.compose_top()
        yield Static("", id="panes")
        with Horizontal(id="body", classes="pane-grid"):
            with Vertical(id="left"):
                with Vertical(id="gridbox"):
                    yield ShapeGrid(self.model, id="grid")
                    yield TrackList(self.model, id="tracklist")
                yield MetricsPanel(id="metrics")
            with Vertical(id="right"):
                yield KernelPanel(id="kernel")
                yield HistoryPanel(self.model, id="history")
        yield AgentLog(self.model, id="log")
        yield self.make_feed()
        yield Footer()

    def compose_top(self) -> ComposeResult:
        return iter(())

    def make_feed(self) -> EventFeed:
        assert self.ctx.handle is not None
        return LiveFeed(self.ctx.handle, self.ctx.loop_factory, initial=self.ctx.events, flush_hz=self.ctx.flush_hz,
                        telemetry_hz=self.ctx.telemetry_hz, id="feed")

    def on_mount(self) -> None:
        self.query_one(TrackList).display = False
        self._fit(self.app.size.width, self.app.size.height)
        self.query_one(TelemetryBar).note = self.ctx.note
        self.query_one(TelemetryBar).baseline = self.baseline
        self.query_one(AgentLog).border_title = "log: all tracks"
        self.query_one(MetricsPanel).border_title = "metrics"
        self.query_one(ShapeGrid).focus()
        self._sync_all(Changes(reset=True))
        self.set_interval(HISTORY_EVERY_S, self._redraw_history, name="history")
        if self.ctx.notice:
            self.notify(self.ctx.notice, title="l2tui", timeout=15)
        if not self.ctx.events and self.ctx.replay:
            from rich.text import Text

            self.notify(self.empty_message(), severity="warning", timeout=15)
            self.query_one(AgentLog).write(Text(self.empty_message(), style="yellow"))  # stays after the notice

    # -- small terminals ----------------------------------------------------------------------
    def on_resize(self, event: events.Resize) -> None:
        self._fit(event.size.width, event.size.height)

    @property
    def one_pane(self) -> bool:
        """Whether the terminal is too small for every panel at once (class ``-panes``)."""
        return self.has_class("-panes")

    def _fit(self, width: int, height: int) -> None:
        """Below ``PANES_BELOW`` the body shows one panel at a time, full width, under a strip that
        names them; the log gets shorter so the grid keeps every row."""
        self.set_class(width < PANES_BELOW[0] or height < PANES_BELOW[1], "-panes")
        self._show_pane_strip()

    def _show_pane_strip(self) -> None:
        from rich.text import Text

        t = Text()
        for name in PANES:
            t.append(f" {name} ", style="bold reverse" if name == self.pane else "grey62")
            t.append(" ")
        t.append(f"  {self.key_for('pane')}: next panel", style="grey50")
        self.query_one("#panes", Static).update(t)

    def key_for(self, binding_id: str) -> str:
        """The key the binding ``binding_id`` is on now (a ``[keys]`` remap included)."""
        for key, ab in self.active_bindings.items():
            if ab.binding.id == binding_id:
                return self.app.get_key_display(ab.binding.with_key(key))
        return keymap.BY_ID[binding_id].key

    def set_pane(self, pane: str) -> None:
        """Show ``pane`` (one of ``PANES``) when the terminal shows one panel at a time."""
        self.pane = pane
        body = self.query_one("#body")
        for name in PANES:
            body.set_class(name == pane, f"pane-{name}")
        self._show_pane_strip()
        if pane == "grid":
            self.action_focus_grid()

    def action_next_pane(self) -> None:
        self.set_pane(PANES[(PANES.index(self.pane) + 1) % len(PANES)])
        if not self.one_pane:
            self.notify("every panel is on screen at this terminal size", timeout=2)

    def empty_message(self) -> str:
        """Why a session with no events shows an empty screen."""
        path = getattr(self.ctx.session, "path", None) or "this session"
        return (f"{path} holds no events yet (its events.jsonl is empty): nothing to replay; "
                f"a run writes its first events when it starts")

    # -- events in ----------------------------------------------------------------------------
    @on(EventFeed.Batch)
    def _on_batch(self, msg: EventFeed.Batch) -> None:
        msg.stop()
        if msg.reset:
            self.model.reset()
            ch = self.model.apply_many(msg.events)
            ch.reset = True
        else:
            ch = self.model.apply_many(msg.events)
            if not self.ctx.replay:
                self._answer_dtype_switches(msg.events)
        self._sync_all(ch)

    def _sync_all(self, ch: Changes) -> None:
        grid = self.query_one(ShapeGrid)
        tl = self.query_one(TrackList)
        if ch.added_tracks or ch.reset:
            grid.rebuild_axes()
            if ch.reset:
                tl.resync()
            if self.view != "list" and not forms_grid(list(self.model.tracks.values())):
                self._set_view("list")
        if ch.reset and self.track_id not in self.model.tracks:
            self.track_id = None
        if self.follow:
            running = next((t.id for t in self.model.tracks.values() if t.state == "running"), None)
            target = running or self.track_id or next(iter(self.model.tracks), None)
            if target and target != self.track_id:
                self._focus(target, move_cursor=True)
        if ch.tracks or ch.reset:
            grid.refresh()
            tl.sync(ch.tracks, ch.added_tracks)
        if ch.reset or (self.track_id and self.track_id in ch.tracks):
            self._show_focused()
        bar = self.query_one(TelemetryBar)
        bar.sync()
        log = self.query_one(AgentLog)
        if ch.reset:
            log.rebuild()
        elif ch.log:
            log.add(ch.log)
        if ch.reset:
            self.query_one(HistoryPanel).update_all(force=True)
        elif ch.events:
            self._history_changed()

    def _history_changed(self) -> None:
        """New events may move the all-shapes plot (a new best, a later clock): it is redrawn at
        once, then at most once a second (plotting is the costliest redraw), the last change
        always drawn by the next tick of ``_redraw_history``."""
        if self._history_cooling:
            self._history_dirty = True
            return
        self.query_one(HistoryPanel).update_all()
        self._history_cooling = True

    def _redraw_history(self) -> None:
        """Once a second: draw what changed since the last drawing, or end the cool-down."""
        if self._history_dirty:
            self._history_dirty = False
            self.query_one(HistoryPanel).update_all()
        else:
            self._history_cooling = False

    # -- focus --------------------------------------------------------------------------------
    @property
    def track(self) -> Track | None:
        return self.model.tracks.get(self.track_id) if self.track_id else None

    def _focus(self, tid: str | None, *, move_cursor: bool = False) -> None:
        self.track_id = tid
        tr = self.track
        if tr is not None and move_cursor:
            self.query_one(ShapeGrid).goto_track(tr)
            tl = self.query_one(TrackList)
            if tl.display:
                tl.focus_track(tr.id)
        self.query_one(AgentLog).set_filter(self.query_one(AgentLog).filter_on, tid)
        self._show_focused()

    def _source(self, sha: str | None) -> str | None:
        if not sha:
            return None
        if sha not in self._sources:
            if len(self._sources) > 256:
                self._sources.clear()
            self._sources[sha] = read_kernel(self.ctx.session, sha)
        return self._sources[sha]

    def shown_candidate(self) -> Candidate | None:
        """What the kernel and metrics panels show for the focused track: the candidate the user
        picked there (``j`` / ``k``), else the track's best, else its newest candidate (a track
        has a best only once a candidate has been timed)."""
        tr = self.track
        if tr is None:
            return None
        picked = self.picked.get(tr.id)
        if picked in tr.candidates:
            return tr.candidates[picked]
        if tr.best_sha in tr.candidates:
            return tr.candidates[tr.best_sha]
        return tr.current

    def pick_candidate(self, delta: int) -> Candidate | None:
        """Show the candidate ``delta`` places away (by number) from the shown one; back on the
        best, the panels follow the best again."""
        tr, c = self.track, self.shown_candidate()
        if tr is None or c is None:
            self.notify("this track has no candidate yet", severity="warning", timeout=3)
            return None
        order = sorted(tr.candidates.values(), key=lambda x: x.num)
        i = max(0, min(len(order) - 1, order.index(c) + delta))
        chosen = order[i]
        if chosen.sha == tr.best_sha:
            self.picked.pop(tr.id, None)
        else:
            self.picked[tr.id] = chosen.sha
        self._show_focused()
        return chosen

    def _show_focused(self) -> None:
        tr = self.track
        c = self.shown_candidate()
        src = self._source(c.sha) if c else None
        parent = self._source(c.parent) if c and c.parent else None
        self.query_one(KernelPanel).show(tr, c, src, parent)
        mp = self.query_one(MetricsPanel)
        mp.baseline = self.baseline
        mp.show(tr, c)
        self.query_one(HistoryPanel).update_track(tr)

    @on(ShapeGrid.Focused)
    def _grid_focused(self, msg: ShapeGrid.Focused) -> None:
        self.follow = False
        if msg.track is not None:
            self._focus(msg.track)
        else:
            self.track_id = None
            self._show_focused()

    @on(TrackList.Focused)
    def _list_focused(self, msg: TrackList.Focused) -> None:
        tl = self.query_one(TrackList)
        if not (tl.display and tl.has_focus):  # rows being added move the cursor too
            return
        if msg.track != self.track_id:
            self.follow = False
            self._focus(msg.track)

    # -- sending commands ---------------------------------------------------------------------
    def send(self, name: str, track: str | None = None, **args: object) -> bool:
        """Send one command to the loop; in a replay only say that it is read-only."""
        if self.ctx.replay or self.ctx.handle is None:
            self.notify(self.read_only_message(), severity="warning", timeout=5)
            return False
        cmd = LoopCommand(name, track, args)
        self.sent.append(cmd)
        self.post_message(self.CommandSent(cmd))
        self.notify(f"sent {name}" + (f" to {track}" if track else " to all tracks"), timeout=2)
        return True

    def read_only_message(self) -> str:
        """What to run instead of steering a replay: the same session, live."""
        path = getattr(self.ctx.session, "path", None)
        target = shlex.quote(str(path)) if path else "DIR"
        return (f"replay is read-only: to steer this session, continue it live with "
                f"`l2tui --session {target} --resume` on a GPU machine")

    def _need_track(self) -> Track | None:
        tr = self.track
        if tr is None:
            self.notify("select a shape that has a track first (arrows in the grid)", severity="warning", timeout=3)
        return tr

    def _need_candidate(self) -> tuple[Track, Candidate] | None:
        tr = self._need_track()
        if tr is None:
            return None
        c = self.shown_candidate()
        if c is None:
            self.notify("this track has no candidate yet", severity="warning", timeout=3)
            return None
        return tr, c

    # -- steering actions ---------------------------------------------------------------------
    def action_pause(self) -> None:
        if tr := self._need_track():
            self.send("resume" if tr.state == "paused" else "pause", tr.id)

    def action_pause_all(self) -> None:
        paused = any(t.state == "paused" for t in self.model.tracks.values())
        self.send("resume" if paused else "pause", None)

    def action_step(self) -> None:
        if tr := self._need_track():
            self.send("step", tr.id)

    def action_stop(self) -> None:
        if tr := self._need_track():
            self.send("stop", tr.id)

    def action_hint(self, all_tracks: bool = False) -> None:
        tr = None if all_tracks else self._need_track()
        if tr is None and not all_tracks:
            return
        target = tr.id if tr else None
        title = f"Hint for the planner of {target}" if target else "Hint for every track's planner"

        def done(text: str | None) -> None:
            if text:
                self.send("hint", target, text=text)

        self.app.push_screen(PromptScreen(title, "e.g. try a 128x256 tile with 4 stages"), done)

    def action_hint_all(self) -> None:
        self.action_hint(all_tracks=True)

    def _editable(self) -> tuple[Track, Candidate, str] | None:
        if self.ctx.replay:
            self.send("edit")  # says read-only
            return None
        got = self._need_candidate()
        if got is None:
            return None
        tr, c = got
        src = self._source(c.sha)
        if src is None:
            self.notify("the kernel source is not in this session", severity="error")
            return None
        return tr, c, src

    def action_edit(self) -> None:
        """Edit the shown kernel in $VISUAL/$EDITOR (the app is suspended meanwhile)."""
        got = self._editable()
        if got is None:
            return
        tr, c, src = got
        editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
        with tempfile.TemporaryDirectory(prefix="l2tui-edit-") as tmp:
            path = Path(tmp) / f"{tr.id}-{c.sha[:8]}.cu"
            path.write_text(src)
            argv = shlex.split(editor) + [str(path)]
            try:
                try:
                    with self.app.suspend():
                        rc = subprocess.run(argv).returncode
                except SuspendNotSupported:  # headless (tests) or a web driver
                    rc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True).returncode
            except FileNotFoundError:
                self.notify(f"editor {editor!r} not found: set $EDITOR", severity="error")
                return
            new = path.read_text()
        self._submit_edit(tr, src, new, rc)

    def _submit_edit(self, tr: Track, old: str, new: str | None, rc: int = 0) -> None:
        if rc != 0:
            self.notify(f"editor exited with status {rc}; nothing sent", severity="warning")
        elif new is None:
            return
        elif new == old:
            self.notify("kernel unchanged; nothing sent", timeout=2)
        else:
            self.send("edit", tr.id, source=new)

    def action_edit_inline(self) -> None:
        got = self._editable()
        if got is None:
            return
        tr, c, src = got
        self.app.push_screen(EditorScreen(src, f"{tr.id}  #{c.num} {c.sha[:12]}  — ctrl+s submits as a human step"),
                             lambda new: self._submit_edit(tr, src, new))

    def _decide(self, action: str) -> None:
        if got := self._need_candidate():
            tr, c = got
            self.send(action, tr.id, sha=c.sha)

    def action_accept(self) -> None:
        self._decide("accept")

    def action_reject(self) -> None:
        self._decide("reject")

    def action_pin(self) -> None:
        if got := self._need_candidate():
            tr, c = got
            self.send("unpin" if c.sha in tr.pinned else "pin", tr.id, sha=c.sha)

    def action_reorder(self) -> None:
        queue = [(t.id, f"{t.id:<24} {t.state}") for t in self.model.queue()]
        if len(queue) < 2:
            self.notify("fewer than two tracks in the queue", timeout=2)
            return

        def done(order: list[str] | None) -> None:
            if order:
                self.send("reorder", None, order=order)

        self.app.push_screen(ReorderScreen(queue), done)

    def _choose(self, title: str, options: list[str], current: str | None, cb: Callable[[str], object]) -> None:
        def chosen(value: str | None) -> None:
            if value:
                cb(value)

        self.app.push_screen(ChoiceScreen(title, options, current), chosen)

    def action_policy(self) -> None:
        self._choose("Policy for the focused track (all tracks if none)", list(POLICIES), self.model.policy or None,
                     lambda v: self.send("policy", self.track_id, value=v))

    def action_baseline(self) -> None:
        options = self.model.baselines() or list(DEFAULT_BASELINES)
        current = self.baseline or (self.track.baseline if self.track else None)

        def chosen(v: str) -> None:
            self.set_baseline(v)
            if not self.ctx.replay:
                self.send("baseline", self.track_id, value=v)

        self._choose("Baseline (grid colours and the reward)", options, current, chosen)

    def set_baseline(self, value: str) -> None:
        self.baseline = value
        for w in (self.query_one(ShapeGrid), self.query_one(TrackList), self.query_one(TelemetryBar)):
            w.baseline = value
        self.query_one(TrackList).resync()
        self.query_one(ShapeGrid).refresh()
        self.query_one(TelemetryBar).sync()
        self._show_focused()

    def action_acc(self) -> None:
        tr = self.track
        current = tr.acc if tr else self.query_one(ShapeGrid).acc

        def chosen(v: str) -> None:
            grid = self.query_one(ShapeGrid)
            grid.acc = v
            grid.rebuild_axes()
            self.send("acc", self.track_id, value=v)

        self._choose("Accumulator", list(ACCS), current, chosen)

    def action_mode(self) -> None:
        self._choose("Timing mode", list(MODES), self.model.mode, lambda v: self.send("mode", self.track_id, value=v))

    def action_dtype(self) -> None:
        """Ask the loop to switch the session's element type; its answer (made, or the one-line
        refusal once the session holds a kernel) comes back as a ``dtype_switch`` event."""
        if self.ctx.replay or self.ctx.handle is None:
            self.notify(self.read_only_message(), severity="warning", timeout=5)
            return
        self._choose("Element type of the session (only before its first kernel)", list(DTYPES), self.model.dtype,
                     lambda v: self.send("dtype", None, value=v))

    def _answer_dtype_switches(self, events: list[dict]) -> None:
        """A toast for each answer of the loop to a ``dtype`` command in a live batch."""
        for ev in events:
            if ev.get("type") == ev_schema.DTYPE_SWITCH:
                refused = ev.get("refused")
                self.notify(escape(dtype_switch_line(ev.get("dtype"), refused)),
                            severity="warning" if refused else "information", timeout=8)

    def action_bench_server(self) -> None:
        if tr := self._need_track():
            self.send("bench_server", tr.id)

    def action_profile(self) -> None:
        if tr := self._need_track():
            self.send("profile", tr.id)

    @dataclass
    class ExportDone(Message):
        """The export worker finished (``ok`` False: ``text`` is the one-line error)."""

        ok: bool
        text: str

    def action_export(self) -> None:
        """Export the accepted (else best) kernels as a library; allowed in replay (no GPU, no session writes)."""
        if self.ctx.session is None:
            self.notify("no session to export", severity="warning")
            return
        src = Path(self.ctx.session.path)
        default = str(src.parent / f"{src.name}-export")

        def chosen(out: str | None) -> None:
            if out:
                self.notify(f"exporting to {out} …", timeout=3)
                self._export(src, Path(out))

        self.app.push_screen(PromptScreen("Export the session's kernels to the folder", default, default), chosen)

    @work(thread=True, group="export", exclusive=True, exit_on_error=False, name="export")
    def _export(self, session_dir: Path, out: Path) -> None:
        """Runs in a worker thread; reports back only by message."""
        from harness.errors import HarnessError

        try:
            from ...export import export_session

            res = export_session(session_dir, out)
            self.post_message(self.ExportDone(True, export_summary(res.manifest, res.out)))
        except (HarnessError, OSError, ImportError) as e:
            self.post_message(self.ExportDone(False, str(e).splitlines()[0] if str(e) else type(e).__name__))

    @on(ExportDone)
    def _export_done(self, msg: "MainScreen.ExportDone") -> None:
        self.notify(msg.text, severity="information" if msg.ok else "error", timeout=8)

    # -- view actions -------------------------------------------------------------------------
    def action_k_next(self) -> None:
        self._shift_k(1)

    def action_k_prev(self) -> None:
        self._shift_k(-1)

    def _shift_k(self, d: int) -> None:
        if self.view == "list":
            self._set_view("grid")
        self.query_one(ShapeGrid).shift_k(d)

    def action_show_k(self, k: int) -> None:
        if self.view == "list":
            self._set_view("grid")
        self.query_one(ShapeGrid).set_k(k)

    def action_cycle_view(self) -> None:
        self._set_view(VIEWS[(VIEWS.index(self.view) + 1) % len(VIEWS)])

    def _set_view(self, view: str) -> None:
        self.view = view
        grid, tl = self.query_one(ShapeGrid), self.query_one(TrackList)
        grid.display = view != "list"
        tl.display = view == "list"
        self.query_one("#gridbox").set_class(view == "list", "-list")
        grid.compact = view == "all"
        grid.refresh(layout=True)
        if view == "list":
            tl.resync()
            if self.track_id:
                tl.focus_track(self.track_id)
            tl.focus()
        else:
            grid.focus()

    def action_cand_prev(self) -> None:
        self.pick_candidate(-1)

    def action_cand_next(self) -> None:
        self.pick_candidate(1)

    def action_toggle_diff(self) -> None:
        self.query_one(KernelPanel).toggle_tab()

    def action_copy(self) -> None:
        c = self.shown_candidate()
        src = self._source(c.sha) if c else None
        if c is None or src is None:
            self.notify("no kernel source to copy", severity="warning", timeout=2)
            return
        self.app.copy_to_clipboard(src)
        self.notify(f"copied {c.sha[:12]} ({len(src.splitlines())} lines) to the clipboard", timeout=2)

    def action_metrics_full(self) -> None:
        mp = self.query_one(MetricsPanel)
        mp.full = not mp.full
        mp.refresh_view()
        tr, c = self.track, self.shown_candidate()
        if mp.full and tr is not None and c is not None and c.profiled is None:
            anc = profiled_ancestor(tr, c)
            if anc is not None:
                self.notify(f"#{c.num} is not profiled: the full table is its ancestor #{anc.num}'s", timeout=4)
            else:
                how = "" if self.ctx.replay else " (f profiles the track's best now)"
                self.notify(f"no NCU profile of #{c.num} or of any kernel it was derived from{how}",
                            severity="warning", timeout=5)

    def action_log_filter(self) -> None:
        log = self.query_one(AgentLog)
        log.set_filter(not log.filter_on, self.track_id)

    def action_focus_grid(self) -> None:
        (self.query_one(TrackList) if self.view == "list" else self.query_one(ShapeGrid)).focus()

    def action_follow(self) -> None:
        self.follow = True
        self.picked.clear()
        self._sync_all(Changes())
        self._show_focused()
        self.notify("following the running track and its best candidate", timeout=2)

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen(self))

    def action_known(self) -> None:
        """What this GPU knows for the session's shapes (live and in replay: it only reads)."""
        self.app.push_screen(KnownScreen(self.model))

    @on(LiveFeed.LoopFinished)
    def _loop_finished(self, msg: LiveFeed.LoopFinished) -> None:
        if msg.error:
            self.notify(f"agent loop stopped: {msg.error}", severity="error", timeout=10)
        else:
            self.notify("agent loop finished", timeout=4)
