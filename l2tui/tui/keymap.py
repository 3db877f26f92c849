"""Every key binding of the app, with a stable id, in one place.

Users remap keys in the config file's ``[keys]`` section (binding id → key, or
several keys separated by commas); :func:`validate_keymap` turns a typo into a
one-line error and :meth:`App.set_keymap` applies the rest.  The help screen and
the command palette read the same table, so they always agree with the keys.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.binding import Binding, BindingType

from ..errors import ConfigError


@dataclass(frozen=True)
class Spec:
    id: str
    key: str
    action: str
    description: str
    group: str
    show: bool = False
    palette: bool = True  # offered in the command palette


APP = (
    Spec("quit", "q", "quit", "Quit", "app", show=True),
    Spec("help", "question_mark,f1", "help", "Keys", "app", show=True),
)

MAIN = (
    # steering (live only)
    Spec("pause", "p", "pause", "Pause/resume track", "steer", show=True),
    Spec("pause_all", "P", "pause_all", "Pause/resume all tracks", "steer"),
    Spec("step", "full_stop", "step", "Single step", "steer"),
    Spec("stop", "x", "stop", "Stop track", "steer"),
    Spec("hint", "h", "hint", "Hint", "steer", show=True),
    Spec("edit", "e", "edit", "Edit in $EDITOR", "steer", show=True),
    Spec("edit_inline", "E", "edit_inline", "Edit in app", "steer"),
    Spec("accept", "a", "accept", "Accept", "steer", show=True),
    Spec("reject", "r", "reject", "Reject", "steer", show=True),
    Spec("pin", "n", "pin", "Pin/unpin", "steer"),
    Spec("reorder", "o", "reorder", "Reorder queue", "steer"),
    Spec("policy", "y", "policy", "Policy…", "steer"),
    Spec("baseline", "b", "baseline", "Baseline…", "steer"),
    Spec("acc", "u", "acc", "Accumulator…", "steer"),
    Spec("mode", "t", "mode", "Offline/server timing", "steer"),
    Spec("dtype", "D", "dtype", "Element type fp16/bf16…", "steer"),
    Spec("bench_server", "s", "bench_server", "Server benchmark now", "steer"),
    Spec("profile", "f", "profile", "NCU profile now", "steer"),
    Spec("export", "X", "export", "Export accepted kernels", "steer"),
    # view
    Spec("k_next", "right_square_bracket", "k_next", "Next K", "view", show=True),
    Spec("k_prev", "left_square_bracket", "k_prev", "Previous K", "view"),
    Spec("view", "v", "cycle_view", "Grid / all K / list", "view", show=True),
    Spec("diff", "d", "toggle_diff", "Source / diff", "view"),
    Spec("cand_prev", "j", "cand_prev", "Show the previous candidate", "view"),
    Spec("cand_next", "k", "cand_next", "Show the next candidate", "view"),
    Spec("copy", "c", "copy", "Copy kernel source", "view"),
    Spec("metrics_full", "m", "metrics_full", "Full metrics table", "view"),
    Spec("log_filter", "l", "log_filter", "Log: all / this track", "view"),
    Spec("grid_focus", "g", "focus_grid", "Focus the grid", "view"),
    Spec("follow", "F", "follow", "Follow the running track and its best", "view"),
    Spec("pane", "w", "next_pane", "Next panel (small terminals)", "view"),
    Spec("known", "K", "known", "Known kernels for this GPU", "view"),
)

REPLAY = (
    Spec("replay.play", "space", "replay_play", "Play/pause", "replay", show=True),
    Spec("replay.faster", "plus,equals_sign", "replay_faster", "Faster", "replay", show=True),
    Spec("replay.slower", "minus", "replay_slower", "Slower", "replay", show=True),
    Spec("replay.forward", "greater_than_sign", "replay_forward", "Step one event", "replay"),
    Spec("replay.back", "less_than_sign", "replay_back", "Back one event", "replay"),
    Spec("replay.next_step", "right_curly_bracket", "replay_next_step", "Next agent step", "replay"),
    Spec("replay.prev_step", "left_curly_bracket", "replay_prev_step", "Previous agent step", "replay"),
    Spec("replay.seek", "colon", "replay_seek", "Seek to step/time", "replay", show=True),
    Spec("replay.start", "home", "replay_start", "Go to start", "replay"),
    Spec("replay.end", "end", "replay_end", "Go to end", "replay"),
)

GRID = (
    Spec("grid.up", "up", "move(-1,0)", "Up", "grid", palette=False),
    Spec("grid.down", "down", "move(1,0)", "Down", "grid", palette=False),
    Spec("grid.left", "left", "move(0,-1)", "Left", "grid", palette=False),
    Spec("grid.right", "right", "move(0,1)", "Right", "grid", palette=False),
    Spec("grid.select", "enter", "select", "Focus track", "grid", palette=False),
)

LIST = (
    Spec("list.first", "home", "first", "First track", "list", palette=False),
    Spec("list.last", "end", "last", "Last track", "list", palette=False),
)

EDITOR = (
    Spec("editor.submit", "ctrl+s", "submit", "Submit as human step", "editor", show=True, palette=False),
    Spec("editor.cancel", "escape", "cancel", "Cancel", "editor", show=True, palette=False),
)

REORDER = (
    Spec("reorder.up", "K,shift+up", "move(-1)", "Move up", "reorder", show=True, palette=False),
    Spec("reorder.down", "J,shift+down", "move(1)", "Move down", "reorder", show=True, palette=False),
    Spec("reorder.apply", "ctrl+s", "apply", "Apply order", "reorder", show=True, palette=False),
    Spec("reorder.cancel", "escape", "cancel", "Cancel", "reorder", show=True, palette=False),
)

DIALOG = (
    Spec("modal.cancel", "escape", "cancel", "Close the dialog", "dialog", palette=False),
    Spec("help.close", "question_mark,f1,q", "cancel", "Close the help", "dialog", palette=False),
)

ALL: tuple[Spec, ...] = APP + MAIN + REPLAY + GRID + LIST + EDITOR + REORDER + DIALOG
BY_ID = {s.id: s for s in ALL}


def bindings(specs: tuple[Spec, ...], *, hide: tuple[str, ...] = ()) -> list[BindingType]:
    """Textual bindings of ``specs``; those of the groups in ``hide`` stay bound but leave the footer.

    Typed as Textual's ``BindingType`` list, the type of a widget's ``BINDINGS``."""
    return [Binding(s.key, s.action, s.description, show=s.show and s.group not in hide, id=s.id) for s in specs]


def validate_keymap(keys: dict[str, object], source: str = "config") -> dict[str, str]:
    """Check a ``[keys]`` table; unknown ids or non-string keys are one-line errors."""
    out: dict[str, str] = {}
    for bid, key in keys.items():
        if bid not in BY_ID:
            known = ", ".join(sorted(BY_ID))
            raise ConfigError(f"{source}: [keys] has unknown binding id {bid!r}; use one of: {known}")
        if isinstance(key, list):
            key = ",".join(str(k) for k in key)
        if not isinstance(key, str) or not key.strip():
            raise ConfigError(f"{source}: [keys] {bid} must be a key name such as \"ctrl+k\" or \"f5\"")
        out[bid] = ",".join(k.strip() for k in key.split(",") if k.strip())
    _check_shadowing(out, source)
    return out


_VIEW = tuple(s for s in MAIN if s.group == "view")
#: bindings in force at the same time (the app's, a screen's and those of the widget with the
#: focus); two ids of one scope on one key means one of them never fires.  In a replay the
#: transport keys come first and the steering keys only say that a replay is read-only, so a
#: transport key may reuse a steering key.
SCOPES: tuple[tuple[Spec, ...], ...] = (APP + MAIN + GRID, APP + MAIN + LIST, APP + REPLAY + _VIEW + GRID,
                                        EDITOR, REORDER)


def _norm(key: str) -> str:
    """A key as Textual matches it ("." and "full_stop" are one key)."""
    from textual.keys import _character_to_key

    key = key.strip()
    return _character_to_key(key) if len(key) == 1 else key


def _check_shadowing(remap: dict[str, str], source: str) -> None:
    """One line naming both actions when a remapped key is also another binding's key
    (``accept = "q"`` would make ``a`` stop accepting and ``q`` do one thing only)."""
    for scope in SCOPES:
        owner: dict[str, str] = {}
        ids = [s.id for s in scope]
        # remapped ids last, so the message names the remap as the one that shadows
        for bid in sorted(ids, key=lambda i: i in remap):
            keys = remap.get(bid, BY_ID[bid].key)
            for k in {_norm(k) for k in keys.split(",") if k.strip()}:
                other = owner.get(k)
                if other is not None and other != bid:
                    a, b = (bid, other) if bid in remap else (other, bid)
                    raise ConfigError(
                        f'{source}: [keys] {a} = "{remap.get(a, BY_ID[a].key)}" shadows {b} '
                        f'({BY_ID[b].description}, also on "{k}"): give one of them another key')
                owner[k] = bid
