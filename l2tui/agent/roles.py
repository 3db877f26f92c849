"""The four roles of CUDAMaster as small, testable functions.

* planner  - proposes one optimization in words (``REWRITE`` on its first line
  asks for a whole-file rewrite instead of a local patch);
* coder    - turns the plan into SEARCH/REPLACE blocks (``patches.py``);
* debugger - fixes a compile/check failure with a small, guarded patch
  (``structure.guard_debug_patch``);
* compiler - chooses nvcc flags from an allowed list.  It reads an
  ``NVCC_FLAGS:`` line of the coder's reply; flags outside the list are dropped
  with a note, so a model can never pass ``-o`` or ``-run`` to nvcc.

Which *policy* plays a role (llm, search, human) is separate: these helpers
only interpret what a role produced.
"""

from __future__ import annotations

import re
import shlex
from collections import deque

ROLE_NAMES = ("planner", "coder", "debugger", "compiler")
_FLAGS_RE = re.compile(r"^[ \t>*`-]*NVCC_FLAGS\s*:\s*(?P<flags>.*?)`?\s*$", re.M | re.I)


def wants_rewrite(plan: str) -> bool:
    """True when the planner asked for a full rewrite (first non-blank line is REWRITE)."""
    for line in (plan or "").splitlines():
        if line.strip():
            return re.match(r"REWRITE\b", line.strip().strip("*#` ")) is not None
    return False


def _last_flags_line(reply: str) -> re.Match[str] | None:
    """The reply's last ``NVCC_FLAGS:`` line: a reply that revises its flags means the last one.
    Only that match is kept, however many lines the reply repeats."""
    last = deque(_FLAGS_RE.finditer(reply), maxlen=1)
    return last[0] if last else None


def choose_flags(reply: str, allowed: list[str], current: list[str]) -> tuple[list[str], str | None]:
    """The compiler role: flags from an ``NVCC_FLAGS:`` line, filtered by ``allowed``.

    Returns (flags, note); no line keeps ``current``; ``none`` clears them.
    """
    m = _last_flags_line(reply or "")
    if m is None:
        return list(current), None
    text = m.group("flags").strip().strip("`")
    if text.lower() in ("none", "", "-"):
        return [], None
    try:
        asked = shlex.split(text)
    except ValueError:
        asked = text.split()
    keep = [f for f in asked if f in allowed]
    dropped = [f for f in asked if f not in allowed]
    note = f"flags not in the allowed list dropped: {' '.join(dropped)}" if dropped else None
    # one value per option family (e.g. a single -maxrregcount)
    seen: dict[str, str] = {}
    for f in keep:
        seen[f.split("=", 1)[0]] = f
    return list(seen.values()), note
