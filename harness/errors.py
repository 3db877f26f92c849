"""Errors a user can cause, each carrying a one-line message that says what to do.

Command-line entry points catch :class:`HarnessError` and print ``str(err)``
instead of a traceback.
"""

from __future__ import annotations


class HarnessError(Exception):
    """Base class: the message is one line, meant for the user."""


class ShapeError(HarnessError, ValueError):
    """A shape string, shape file or shape-set name that cannot be parsed."""


class ToolMissing(HarnessError):
    """A required external tool (nvcc, ncu, a GPU) is not available."""


class KernelSourceError(HarnessError):
    """A kernel file that cannot be read or does not define ``l2_hgemm``."""
