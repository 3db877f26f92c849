"""The ``l2tui`` console script.

``l2tui`` with no sub-command opens the app (a plain ``l2tui`` without a GPU replays the
bundled demo; with any run option it needs a GPU or ``--recorded``); sub-commands live in
``l2tui.commands.<name>``.  Errors a user can cause are printed as one line
(``l2tui: error: ...``) with exit status 2, never as a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from types import ModuleType
from typing import Sequence

from harness.oneline import OneLineParser

from . import __version__
from .commands import COMMAND_MODULES


def _load(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(f"l2tui.commands.{name}")
    except ModuleNotFoundError as e:  # a command module this install lacks: left out of the parser
        if e.name == f"l2tui.commands.{name}":
            return None
        raise


def build_parser() -> tuple[argparse.ArgumentParser, dict]:
    parser = OneLineParser(
        prog="l2tui",
        description="Steer an agent that writes, tests, times and profiles HGEMM kernels.",
    )
    parser.add_argument("--version", action="version", version=f"l2tui {__version__}")
    parser.add_argument("--session", metavar="DIR", help="open (or create) this session folder")
    parser.add_argument("--resume", action="store_true", help="resume the session's loop state")
    parser.add_argument("--config", metavar="FILE", help="config file (default: ./l2tui.toml, then the user config dir)")
    parser.add_argument("--policy", choices=("llm", "search", "human"), help="who plays the agent's roles")
    parser.add_argument("--no-sandbox", action="store_true",
                        help="compile and load model-written kernels without the OS sandbox (bubblewrap); prints a warning")
    parser.add_argument("--shapes", action="append", metavar="SPEC",
                        help="grid, small, sample100, MxNxK, a list or a shapes file (repeatable)")
    parser.add_argument("--dtype", dest="app_dtype", choices=("fp16", "bf16"),
                        help="element type of A, B and C of new tracks (default: [loop] dtype, fp16)")
    # dest of its own: `l2tui run`'s --recorded default would overwrite it
    parser.add_argument("--recorded", dest="app_recorded", metavar="FILE",
                        help="replay GPU evaluations recorded in FILE instead of using a GPU")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules = {}
    for name in COMMAND_MODULES:
        mod = _load(name)
        if mod is None:
            continue
        p = sub.add_parser(mod.NAME, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        modules[mod.NAME] = mod
    return parser, modules


def main(argv: Sequence[str] | None = None) -> int:
    from harness.errors import HarnessError

    parser, modules = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command is None:
            from .tui.launch import launch_app

            return launch_app(args)
        return int(modules[args.command].run(args) or 0)
    except HarnessError as e:
        from harness.termtext import visible

        print(f"l2tui: error: {visible(str(e))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        from harness.build import kill_all_builds

        kill_all_builds()   # compilers run in their own process groups: they stop with the run
        print("l2tui: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
