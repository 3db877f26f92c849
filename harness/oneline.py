"""An argument parser whose mistakes are one line, for ``python -m harness`` and ``l2tui`` alike."""

from __future__ import annotations

import argparse
from typing import NoReturn

from .termtext import visible


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose mistakes (a bad choice, a missing value) are one line that points
    at ``--help``.

    argparse's own ``error`` prints the whole usage block before the one line that matters; a
    newcomer's typo deserves the line that says what is wrong and where the options are listed.
    The message quotes what was typed, so it is escaped for the terminal. Sub-command parsers are
    made of the same class (argparse uses the parent's)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {visible(message)} (see {self.prog} --help)\n")
