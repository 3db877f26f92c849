"""``l2tui rl-data SESSION… --format trl|openai-sft|openai-dpo --out FILE``: training rows.

See :mod:`l2tui.rldata` for the formats and the README, "Export" for how a
trainer consumes them.
"""

from __future__ import annotations

import argparse

from harness.termtext import visible

NAME = "rl-data"
HELP = "write RL / fine-tuning rows (TRL, OpenAI SFT, OpenAI DPO) from sessions' rewards.jsonl"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from l2tui.rldata import FORMATS

    p.add_argument("sessions", nargs="+", metavar="SESSION", help="session folders")
    p.add_argument("--format", dest="rl_format", required=True, choices=FORMATS, help="row format")
    p.add_argument("--out", required=True, metavar="FILE", help="JSON-lines file to write")
    p.add_argument("--min-reward", type=float, metavar="X",
                   help="keep rows with reward >= X (DPO: the preferred completion's reward)")
    p.add_argument("--policy", dest="rl_policy", metavar="P", help="keep rows of this policy (llm, search, human)")
    p.add_argument("--role", dest="rl_role", metavar="R", help="keep rows of this agent role (coder, debugger, planner)")
    p.add_argument("--shapes", dest="rl_shapes", action="append", metavar="SPEC",
                   help="keep rows of these shapes (grid, small, sample100, MxNxK, a shapes file); repeatable")
    p.add_argument("--margin", type=float, default=0.0, metavar="D",
                   help="DPO: the preferred reward must exceed the other by more than D (default 0)")
    p.add_argument("--max-pairs", type=int, default=8, metavar="N", help="DPO: pairs per prompt at most (default 8)")
    p.add_argument("--pair-by", choices=("parent+prompt", "parent"), default="parent+prompt",
                   help="DPO: pair completions of the same parent and prompt (default), or of the same parent "
                        "kernel whatever the prompt (the input is then the preferred one's prompt)")
    p.add_argument("--force", action="store_true", help="overwrite FILE")


def run(args: argparse.Namespace) -> int:
    from harness.shapes import resolve_shapes
    from l2tui.rldata import rl_data

    shapes = resolve_shapes(args.rl_shapes) if args.rl_shapes else None
    stats = rl_data(args.sessions, args.rl_format, args.out, min_reward=args.min_reward, policy=args.rl_policy,
                    role=args.rl_role, shapes=shapes, margin=args.margin, max_pairs=args.max_pairs,
                    pair_by=args.pair_by, force=args.force)
    print(visible(stats.line(args.out)))
    return 0
