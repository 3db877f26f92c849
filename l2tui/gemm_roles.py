"""What a session's shapes are for: a model's GEMM roles (qkv, o, gate_up, down, lm_head).

``l2tui run`` and ``l2tui sweep`` keep them in the session's config (``[config.run.roles]`` /
``[config.sweep.roles]``: ``"MxNxK" = "llama-3-8b qkv t16"``), where the shapes came from a model
or a shapes file's comments. The app's list view, the export manifest and the results name each
shape by its role from here. A session folder can be edited by anyone, so only well-formed
entries are kept, each role cut to a bounded length.
"""

from __future__ import annotations

import re
from typing import Mapping

from harness.shapes import MAX_ROLE_CHARS
#: at most this many shapes' roles are read from one session
MAX_ROLES = 100_000
_SHAPE_KEY = re.compile(r"[1-9]\d{0,6}x[1-9]\d{0,6}x[1-9]\d{0,6}")


def session_roles(config: Mapping[str, object] | None) -> dict[str, str]:
    """``"MxNxK" -> role`` from a session config's ``run`` and ``sweep`` sections (both may hold
    some: a sweep resumed as a run, say); malformed entries are left out."""
    out: dict[str, str] = {}
    for section in ("run", "sweep"):
        body = (config or {}).get(section)
        roles = body.get("roles") if isinstance(body, Mapping) else None
        if not isinstance(roles, Mapping):
            continue
        for shape, role in list(roles.items())[:MAX_ROLES]:
            if isinstance(shape, str) and _SHAPE_KEY.fullmatch(shape) and isinstance(role, str) and role.strip():
                out.setdefault(shape, clean_role(role))
    return out


def clean_role(role: str) -> str:
    """One line of printable text, at most :data:`MAX_ROLE_CHARS` long."""
    text = " ".join("".join(c if c.isprintable() else " " for c in role).split())
    return text if len(text) <= MAX_ROLE_CHARS else text[:MAX_ROLE_CHARS - 1] + "…"
