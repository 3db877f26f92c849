"""``l2tui replay SESSION``: watch a recorded session in the app (no GPU needed)."""

from __future__ import annotations

import argparse

NAME = "replay"
HELP = "replay a recorded session in the terminal UI (play/pause, speed, step, seek; never touches a GPU)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", metavar="SESSION", help="session folder (holds events.jsonl)")
    p.add_argument("--speed", type=float, default=10.0,
                   help="playback speed: 1, 2, 5, 10, 20, 50 or 100 times real time (default 10)")
    p.add_argument("--paused", action="store_true", help="start paused (space plays)")
    p.add_argument("--at", metavar="EVENT", type=int, default=None,
                   help="start after this many events (e.g. --at 0 for an empty screen, default: the start)")
    # dest of its own: a subcommand's --config default would overwrite `l2tui --config FILE replay …`
    p.add_argument("--config", dest="replay_config", metavar="FILE", help="config file for key bindings and theme")


def run(args: argparse.Namespace) -> int:
    from ..config import load_config
    from ..errors import UserError
    from ..tui.launch import make_replay_app
    from ..tui.replay import SPEEDS

    if args.speed not in SPEEDS:
        raise UserError(f"--speed {args.speed:g} is not offered: use one of {', '.join(f'{s:g}' for s in SPEEDS)}")
    cfg = load_config(getattr(args, "replay_config", None) or getattr(args, "config", None))
    app = make_replay_app(args.session, cfg=cfg, speed=args.speed, autoplay=not args.paused, start=args.at)
    app.run()
    return int(app.return_code or 0)
