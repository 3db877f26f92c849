"""``l2tui bench``: check and time baselines and candidate kernels on many shapes (harness.bench)."""

from __future__ import annotations

import argparse

NAME = "bench"
HELP = "check and time HGEMM baselines and kernels on shapes; write JSON + CSV results"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from harness.bench import add_arguments as _add

    _add(p)


def run(args: argparse.Namespace) -> int:
    from harness.bench import main

    return main(args)
