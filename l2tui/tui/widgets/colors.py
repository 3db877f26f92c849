"""The diverging speedup colour scale shared by the grid and the metrics panel."""

from __future__ import annotations

import math

from rich.style import Style

NEUTRAL = (70, 70, 78)
FAST = (20, 170, 90)
SLOW = (200, 50, 50)
STATE_MARK = {"running": "▶", "queued": "·", "paused": "‖", "failed": "✗", "stopped": "■", "done": ""}


def _mix(a: tuple[int, int, int], b: tuple[int, int, int], t: float) -> tuple[int, int, int]:
    return tuple(int(round(x + (y - x) * t)) for x, y in zip(a, b))  # type: ignore[return-value]


def speedup_rgb(s: float | None) -> tuple[int, int, int] | None:
    """0.5× and below full red, 1.0× grey, 2× and above full green (log scale)."""
    if s is None or s <= 0:
        return None
    x = max(-1.0, min(1.0, math.log2(s)))
    return _mix(NEUTRAL, FAST, x) if x >= 0 else _mix(NEUTRAL, SLOW, -x)


def speedup_style(s: float | None, *, cursor: bool = False) -> Style:
    rgb = speedup_rgb(s)
    if rgb is None:
        base = Style(color="grey50")
    else:
        lum = 0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2]
        base = Style(bgcolor=f"rgb({rgb[0]},{rgb[1]},{rgb[2]})", color="black" if lum > 140 else "white")
    if cursor:
        base = base + Style(reverse=True, bold=True)
    return base


def dim_label(d: int) -> str:
    """Short axis labels: 64, 512, 1k, 12k, 16k."""
    if d >= 1024 and d % 1024 == 0:
        return f"{d // 1024}k"
    return str(d)
