"""``l2tui doctor``: GPU, driver, nvcc, CUTLASS, the sandbox (bubblewrap), ncu, NVML, cupy, torch."""

from __future__ import annotations

import argparse

NAME = "doctor"
HELP = "check what this machine has for building, timing and profiling kernels"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from harness.doctor import add_arguments as add

    add(p)


def run(args: argparse.Namespace) -> int:
    from harness.doctor import main

    return main(args)
