"""``l2tui bench``: check and time baselines and candidate kernels on many shapes (harness.bench)."""

from __future__ import annotations

import argparse

NAME = "bench"
HELP = "check and time HGEMM baselines and kernels on shapes; write JSON + CSV results"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from harness.bench import add_arguments as _add

    _add(p)


def run(args: argparse.Namespace) -> int:
    import contextlib
    import sys

    from harness.bench import main
    from harness.termtext import VisibleStream

    # the result table and the progress lines quote kernel names and worker text
    with contextlib.redirect_stdout(VisibleStream(sys.stdout)), contextlib.redirect_stderr(VisibleStream(sys.stderr)):
        return main(args)
