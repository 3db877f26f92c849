"""``l2tui doctor``: GPU, driver, nvcc, CUTLASS, the sandbox (bubblewrap), ncu, NVML, cupy, torch, and
the ``openai`` client the llm policy needs."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.doctor import Check

NAME = "doctor"
HELP = "check what this machine has for building, timing and profiling kernels"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from harness.doctor import add_arguments as add

    add(p)


def run(args: argparse.Namespace) -> int:
    from harness.doctor import check_package, main

    return main(args, extra=[check_package("openai", "openai", ("openai",),
                                           "pip install openai: the llm policy's client (search and human need none)"),
                             check_config()])


def check_config() -> "Check":
    """The config every command would read: a broken one stops them all, so doctor says so."""
    from harness.doctor import Check
    from harness.termtext import visible

    from ..config import load_config
    from ..errors import ConfigError
    from ..paths import user_config_file

    try:
        cfg = load_config(None, notice=lambda _line: None)
    except ConfigError as e:
        return Check("l2tui.toml", False, visible(str(e)), "fix or remove that file (l2tui.example.toml lists every key)",
                     required=True)
    where = str(cfg.source) if cfg.source else f"defaults (no ./l2tui.toml, none at {user_config_file()})"
    return Check("l2tui.toml", True, visible(where + (" (from the working directory)" if cfg.from_workdir else "")))
