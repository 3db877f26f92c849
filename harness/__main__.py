"""``python -m harness COMMAND``: the harness without l2tui (bench, doctor, profile, build, winners, models)."""

from __future__ import annotations

import contextlib
import importlib
import sys

from .errors import HarnessError
from .oneline import OneLineParser
from .termtext import VisibleStream, visible

COMMANDS = {
    "bench": ("harness.bench", "time kernels and baselines on shapes"),
    "doctor": ("harness.doctor", "check GPU, nvcc, CUTLASS, ncu, NVML and Python packages"),
    "profile": ("harness.profiling.cli", "profile a kernel or baseline with Nsight Compute"),
    "build": ("harness.buildcli", "compile an ABI kernel file and print its ptxas report"),
    "winners": ("harness.winners", "render a winners file's configurations as per-shape kernel sources"),
    "models": ("harness.models", "a model's GEMM shapes (presets or a config.json) as a shapes file"),
    "foreign-report": ("harness.foreign_report", "another system's kernels: its claimed speedups beside the measured ones"),
}


def main(argv: list[str] | None = None) -> int:
    """Run one command; its output goes through :class:`~harness.termtext.VisibleStream`, since
    result tables, build reports and errors quote kernel names, compiler and worker text."""
    with contextlib.redirect_stdout(VisibleStream(sys.stdout)), contextlib.redirect_stderr(VisibleStream(sys.stderr)):
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    parser = OneLineParser(prog="python -m harness", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    mods = {}
    for name, (modname, help_) in COMMANDS.items():
        try:
            mod = importlib.import_module(modname)
        except ModuleNotFoundError as e:
            if e.name == modname:
                continue
            raise
        p = sub.add_parser(name, help=help_, description=help_)
        mod.add_arguments(p)
        mods[name] = mod
    args = parser.parse_args(argv)
    try:
        return int(mods[args.command].main(args) or 0)
    except HarnessError as e:
        print(f"harness: error: {visible(str(e))}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
