"""Reading a JSON file that a user named: every way it can be wrong is one line of the caller's
error type (a missing file, bytes that are not UTF-8, text that is not JSON), never a traceback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_json(path: str | Path, error: type[Exception], what: str) -> Any:
    """The parsed content of ``path``; ``error(line)`` for any reason it cannot be read.
    ``what`` names the file in the line ("result file", "winners file")."""
    p = Path(path)
    try:
        return json.loads(p.read_text())
    except OSError as e:
        raise error(f"cannot read {what} {str(p)!r}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise error(f"{p}: not a {what} (not UTF-8 text)") from None
    except ValueError as e:
        where = f" at line {e.lineno}" if isinstance(e, json.JSONDecodeError) else ""
        msg = e.msg if isinstance(e, json.JSONDecodeError) else str(e)
        raise error(f"{p}: not JSON ({msg}{where})") from None


def read_capped(path: str | Path, limit: int, error: type[Exception], what: str, *,
                verdict: str = "refused") -> bytes:
    """The bytes of a file a user named, at most ``limit`` of them: ``error(line)`` when it cannot
    be read or is larger (the rest is never read, so a huge or endless file costs nothing). The
    line names the file, never its content (a mistyped path may be a secret's); ``verdict`` ends
    the line for a file over the limit ("not a list of shapes")."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise error(f"cannot read {what} {str(p)!r}: {e.strerror or e}") from None
    if len(data) > limit:
        size = f"{limit >> 20} MB" if limit >= 1 << 20 else f"{limit >> 10} kB"
        raise error(f"{what} {str(p)!r} is over {size}: {verdict}")
    return data
