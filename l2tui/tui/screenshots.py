"""Write every screenshot in ``docs/screenshots`` from the bundled demo session, in one run.

    python -m l2tui.tui.screenshots [--session sessions/demo-h200] [--out docs/screenshots]

Each shot is the app drawn from the demo's own events (no GPU, no loop attached, nothing runs),
and each SVG's title names the session it shows (:func:`session_caption`: its folder, GPU and
start time), so ``tests/test_tui_screenshots.py`` can tell a screenshot of another session, or of
an older recording of the demo, from a current one.  Re-recording the demo
(``tools/record_demo.py``) is therefore followed by running this module again.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from .. import paths
from ..errors import UserError

if TYPE_CHECKING:
    from textual.pilot import Pilot

    from .app import L2App

LARGE = (160, 48)
SMALL = (80, 24)
#: how long before the demo's end the "live" shot is taken (the recorder's shot is a few s early too)
LIVE_LEAD_S = 5.0


@dataclass(frozen=True)
class Shot:
    """One screenshot: its file name (without ``.svg``) and what docs/tui.md says it shows."""

    name: str
    shows: str


SHOTS: tuple[Shot, ...] = (
    Shot("live-h200", f"the main screen {LIVE_LEAD_S:g} s before the end of the run, every K at once"),
    Shot("main", "the main screen at the end of the run, on the track with the fastest profiled best"),
    Shot("replay", "the replay a plain `l2tui` opens, paused after two thirds of the events"),
    Shot("help", "the keys in force (`?`) over the replay"),
    Shot("small", "an 80×24 terminal: one panel at a time (`w` shows the next)"),
)


def session_caption(session_dir: Path) -> str:
    """How a screenshot names the session it shows: its folder (relative to the checkout when
    inside it), the GPU it ran on and the UTC time of its first event."""
    from .sessionio import open_session

    events = open_session(session_dir).events
    started = next((e for e in events[:8] if e.get("type") == "session_started"), {})
    gpu = started.get("gpu")
    name = gpu.get("name") if isinstance(gpu, dict) else None
    label = " ".join(str(name).split())[:60] if name else "no GPU"
    return f"{_shown(session_dir)} ({label}, {_utc(events[0].get('time') if events else None)})"


def _utc(t: object) -> str:
    """A session time stamp as a UTC minute; words for one that is missing or not a time."""
    if not isinstance(t, (int, float)):
        return "no start time"
    try:
        return datetime.fromtimestamp(float(t), tz=timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    except (OverflowError, OSError, ValueError):
        return "no start time"


def _shown(p: Path) -> str:
    try:
        return Path(p).resolve().relative_to(paths.REPO_ROOT.resolve()).as_posix()
    except ValueError:
        return str(p)


async def _settle(pilot: Pilot[None], n: int = 6) -> None:
    for _ in range(n):
        await pilot.pause(0.1)


async def _shoot(app: "L2App", out: Path, shot: Shot, size: tuple[int, int], keys: tuple[str, ...] = (),
                 track: str | None = None) -> Path:
    """Draw ``app`` at ``size``, focus ``track`` and press ``keys``, then save ``out/<name>.svg``."""
    from .screens.main import MainScreen

    async with app.run_test(size=size) as pilot:
        await _settle(pilot)
        if track is not None:
            screen = app.screen
            if not isinstance(screen, MainScreen):
                raise UserError(f"screenshot {shot.name}: the app shows {type(screen).__name__}, not the main screen")
            screen.follow = False
            screen._focus(track, move_cursor=True)
        if keys:
            await pilot.press(*keys)
        await _settle(pilot)
        app.save_screenshot(filename=f"{shot.name}.svg", path=str(out))
    return out / f"{shot.name}.svg"


def showcase_track(events: list[dict]) -> str | None:
    """The track whose best is fastest among those whose best was profiled (the main shot shows
    it: its panels then hold timings, checks, ptxas and an NCU verdict)."""
    from .state import SessionModel

    model = SessionModel()
    model.apply_many(events)
    ranked = sorted((t for t in model.tracks.values() if t.best_sha in t.candidates
                     and t.candidates[t.best_sha].profiled is not None),
                    key=lambda t: -(t.best_speedup or 0.0))
    return ranked[0].id if ranked else next(iter(model.tracks), None)


def _time(ev: dict) -> float:
    """An event's time stamp, 0 for one without a number there (a torn or foreign line)."""
    t = ev.get("time")
    return float(t) if isinstance(t, (int, float)) else 0.0


def _app(session_dir: Path, events: list[dict], title: str, *, replay: bool, start: int | None = None) -> "L2App":
    from .app import L2App, UIContext
    from .sessionio import open_session
    from .loophandle import LoopHandle

    sess = open_session(session_dir)
    if replay:
        from .launch import DEMO_SPEED

        ctx = UIContext(session=sess, events=events, replay=True, autoplay=False, start=start, speed=DEMO_SPEED,
                        title=title)
    else:
        ctx = UIContext(session=sess, events=events, handle=LoopHandle(), title=title)
    return L2App(ctx)


async def main_async(session_dir: Path, out: Path) -> list[Path]:
    """Every shot of ``SHOTS`` into ``out``, in that order."""
    from .sessionio import open_session

    events = list(open_session(session_dir).events)
    if not events:
        raise UserError(f"{session_dir} holds no events: record the demo first (tools/record_demo.py)")
    out.mkdir(parents=True, exist_ok=True)
    caption = session_caption(session_dir)
    by_name = {s.name: s for s in SHOTS}
    t_end = max(_time(e) for e in events)
    early = [e for e in events if _time(e) <= t_end - LIVE_LEAD_S] or events
    track = showcase_track(events)
    written = [
        await _shoot(_app(session_dir, early, f"l2tui · {caption} · {LIVE_LEAD_S:g} s before the end", replay=False),
                     out, by_name["live-h200"], LARGE, keys=("v",)),
        await _shoot(_app(session_dir, events, f"l2tui · {caption} · the end", replay=False),
                     out, by_name["main"], LARGE, track=track),
        await _shoot(_app(session_dir, events, f"l2tui replay · {caption}", replay=True, start=2 * len(events) // 3),
                     out, by_name["replay"], LARGE),
        await _shoot(_app(session_dir, events, f"l2tui replay · {caption} · keys", replay=True, start=len(events)),
                     out, by_name["help"], LARGE, keys=("question_mark",)),
        await _shoot(_app(session_dir, events, f"l2tui · {caption} · 80x24", replay=False),
                     out, by_name["small"], SMALL),
    ]
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m l2tui.tui.screenshots",
                                 description="write every docs/screenshots SVG from the bundled demo session")
    ap.add_argument("--session", type=Path, default=paths.DEMO_SESSION,
                    help="the session to draw (default: the bundled demo, sessions/demo-h200)")
    ap.add_argument("--out", type=Path, default=paths.REPO_ROOT / "docs" / "screenshots")
    args = ap.parse_args(argv)
    if not (args.session / "events.jsonl").is_file():
        print(f"screenshots: error: {args.session} is not a session (no events.jsonl): record the demo with "
              "tools/record_demo.py on a GPU machine, or pass --session DIR", file=sys.stderr)
        return 2
    try:
        for p in asyncio.run(main_async(args.session, args.out)):
            print(p)
    except (UserError, OSError) as e:
        print(f"screenshots: error: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
