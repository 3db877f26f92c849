"""``l2tui profile --shape MxNxK (--kernel FILE | --baseline NAME)``: Nsight Compute verdict and metrics.

The work is done by :mod:`harness.profiling.cli`, so ``python -m harness profile``
and ``l2tui profile`` behave the same.
"""

from __future__ import annotations

import argparse

NAME = "profile"
HELP = "profile a kernel or baseline on one shape with Nsight Compute: bottleneck verdict and key metrics"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from harness.profiling.cli import add_arguments as add

    add(parser)


def run(args: argparse.Namespace) -> int:
    from harness.profiling.cli import main

    return main(args)
