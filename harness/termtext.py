"""Text from a model or a kernel, made safe to print on a terminal.

Why: a compile error, a check's detail or a model's reply can carry terminal control
sequences (``\\x1b]52;c;...\\x07`` writes the clipboard, ``\\x1b[2J`` clears the screen,
``\\u202e`` reverses what follows), and a terminal acts on them when they are printed raw.
Every headless line that may hold such text goes through :func:`visible`, which shows each
control character as a visible escape instead (``\\x1b``, ``\\u202e``); the app shows the
same text escaped by its own widgets.
"""

from __future__ import annotations

import io
import re
from typing import TextIO

#: C0 controls but tab and newline, DEL, C1 controls, and the bidirectional formatting characters
_CONTROLS = "\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069"
_MULTI_LINE = re.compile(f"[{_CONTROLS}]")
_SINGLE_LINE = re.compile(f"[{_CONTROLS}\\n]")


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group(0))
    return f"\\x{c:02x}" if c <= 0xFF else f"\\u{c:04x}"


def visible(text: str, *, single_line: bool = True) -> str:
    """``text`` with control characters shown as escapes; a newline too when ``single_line``
    (a progress line must stay one line, whatever a kernel's error says)."""
    return (_SINGLE_LINE if single_line else _MULTI_LINE).sub(_escape, text)


class VisibleStream(io.TextIOBase):
    """A text stream that writes through :func:`visible` (newlines kept) to another one: for
    commands whose output tables quote kernel or worker text in many places."""

    def __init__(self, target: TextIO) -> None:
        super().__init__()
        self._target = target

    def write(self, s: str) -> int:
        # a write that starts with a carriage return is a progress bar redrawing its line: that
        # one is kept, every other control character in the text is shown escaped
        redraw = s.startswith("\r")
        self._target.write(("\r" if redraw else "") + visible(s[1:] if redraw else s, single_line=False))
        return len(s)

    def flush(self) -> None:
        self._target.flush()

    def isatty(self) -> bool:
        return self._target.isatty()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._target, "encoding", "utf-8")
