"""``l2tui doctor``: GPU, driver, nvcc, CUTLASS, the sandbox (bubblewrap), ncu, NVML, cupy, torch, and
the ``openai`` client the llm policy needs."""

from __future__ import annotations

import argparse

NAME = "doctor"
HELP = "check what this machine has for building, timing and profiling kernels"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from harness.doctor import add_arguments as add

    add(p)


def run(args: argparse.Namespace) -> int:
    from harness.doctor import check_package, main

    return main(args, extra=[check_package("openai", "openai", ("openai",),
                                           "pip install openai: the llm policy's client (search and human need none)")])
