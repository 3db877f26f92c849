"""Values that travel from a session into generated build files, checked first.

A session folder is data a user may have been handed by someone else: its
``session.toml`` and events are not to be trusted with a shell.  Every value that
reaches ``build.sh`` or the CMake files goes through here: an architecture must
be a real CUDA architecture name, and anything placed in a shell line is quoted.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from l2tui.errors import UserError

#: CUDA architecture names nvcc accepts for ``code=`` (family and feature suffixes included);
#: the export records these for a session's GPU even where this nvcc driver cannot build them
KNOWN_ARCHS: tuple[str, ...] = (
    "sm_50", "sm_52", "sm_53", "sm_60", "sm_61", "sm_62", "sm_70", "sm_72", "sm_75",
    "sm_80", "sm_86", "sm_87", "sm_88", "sm_89", "sm_90", "sm_90a",
    "sm_100", "sm_100a", "sm_100f", "sm_101", "sm_101a", "sm_101f", "sm_103", "sm_103a", "sm_103f",
    "sm_110", "sm_110a", "sm_110f", "sm_120", "sm_120a", "sm_120f", "sm_121", "sm_121a", "sm_121f",
)
_ARCH_FORM = re.compile(r"^(?:sm_|compute_)?([0-9]{2,3}[af]?)$")


class ExportValueError(UserError):
    """A value from a session (or the command line) that may not reach a build file."""


def check_arch(value: object, where: str = "arch") -> str:
    """``sm_90a`` / ``90a`` / ``compute_90a`` -> ``sm_90a``; anything else is refused in one line.

    The refusal never repeats the value: a hostile session may carry shell text
    there, and a terminal is no place to echo it either.
    """
    if isinstance(value, str) and len(value) <= 16:
        m = _ARCH_FORM.match(value.strip().lower())
        if m and f"sm_{m.group(1)}" in KNOWN_ARCHS:
            return f"sm_{m.group(1)}"
    raise ExportValueError(f"{where} is not a known CUDA architecture name (e.g. sm_90a, sm_80); "
                           "fix the session's [gpu] arch or pass --arch")


def gencode(arch: str) -> list[str]:
    """nvcc flags for a checked architecture name (the harness's table first, else the standard form)."""
    from harness.build import ARCH_GENCODE

    a = check_arch(arch)
    if a in ARCH_GENCODE:
        return list(ARCH_GENCODE[a])
    return [f"-gencode=arch=compute_{a[3:]},code={a}"]


def sh_word(text: str) -> str:
    """One shell word, single-quoted unless it is plainly safe."""
    return shlex.quote(str(text))


def check_out_path(out: Path, what: str = "--out") -> None:
    """Refuse an output whose parent chain runs through a file (``file.txt/export``) in one line."""
    for parent in out.parents:
        try:
            if parent.exists():
                if not parent.is_dir():
                    raise ExportValueError(f"{what} {out}: {parent} is a file, not a folder; pick another {what}")
                return
        except OSError as e:
            raise ExportValueError(f"{what} {out}: cannot use {parent} ({e.strerror}); pick another {what}") from None


def inside(path: Path, folder: Path) -> bool:
    """Whether ``path`` (existing or not) is ``folder`` or lies under it, symlinks resolved."""
    p, f = path.expanduser().resolve(), folder.expanduser().resolve()
    return p == f or f in p.parents
