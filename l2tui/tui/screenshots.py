"""Write the README screenshots (SVG) of the main, replay and help screens.

    python -m l2tui.tui.screenshots [--session DIR] [--out docs/screenshots]

Uses the bundled demo session when there is one (``l2tui.paths.demo_session``),
else the TUI test fixture.  The main screen is the live layout showing the
session's events (no loop attached, so nothing runs); the replay screen is
paused two thirds of the way through.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from .. import paths

SIZE = (160, 48)


def _default_session() -> Path:
    demo = paths.demo_session()
    if demo is not None:
        return demo
    return paths.REPO_ROOT / "tests" / "fixtures" / "sessions" / "tui_grid"


async def _shoot(app, out: Path, name: str, keys: tuple[str, ...] = ()) -> Path:
    async with app.run_test(size=SIZE) as pilot:
        for _ in range(5):
            await pilot.pause(0.1)
        if keys:
            await pilot.press(*keys)
            for _ in range(3):
                await pilot.pause(0.1)
        app.save_screenshot(filename=f"{name}.svg", path=str(out))
    return out / f"{name}.svg"


async def main_async(session: Path, out: Path) -> list[Path]:
    from .app import L2App, UIContext
    from .sessionio import open_session
    from .widgets.feeds import LoopHandle

    out.mkdir(parents=True, exist_ok=True)
    sess = open_session(session)
    events = list(sess.events)
    written = []
    live = L2App(UIContext(session=sess, events=events, handle=LoopHandle(), title=f"l2tui {session.name}"))
    written.append(await _shoot(live, out, "main"))
    replay = L2App(UIContext(session=sess, events=events, replay=True, autoplay=False, start=2 * len(events) // 3,
                             title=f"l2tui replay {session.name}"))
    written.append(await _shoot(replay, out, "replay"))
    help_app = L2App(UIContext(session=sess, events=events, replay=True, autoplay=False, start=len(events)))
    written.append(await _shoot(help_app, out, "help", ("question_mark",)))
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description="write SVG screenshots of the l2tui screens")
    ap.add_argument("--session", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=paths.REPO_ROOT / "docs" / "screenshots")
    args = ap.parse_args()
    for p in asyncio.run(main_async(args.session or _default_session(), args.out)):
        print(p)


if __name__ == "__main__":
    main()
