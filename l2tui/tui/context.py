"""What a screen is given: the session, its events, the loop handle and the UI settings.

Its own module so that the app and its screens both import it and neither imports the other
for it (the app imports the screens; the screens never import the app).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .sessionio import SessionLike
from .loophandle import LoopHandle, SteeredLoop


@dataclass
class UIContext:
    """Everything a screen needs; built by :func:`l2tui.tui.launch.launch_app` or by tests."""

    session: SessionLike | None
    events: list[dict] = field(default_factory=list)
    replay: bool = False
    handle: LoopHandle | None = None
    loop_factory: Callable[[], SteeredLoop] | None = None
    speed: float = 1.0
    autoplay: bool = True
    start: int | None = None
    baseline: str | None = None
    keys: dict[str, str] = field(default_factory=dict)
    note: str = ""
    notice: str = ""  # shown once as a notification when the screen opens (e.g. why this is a demo)
    title: str = "l2tui"
    flush_hz: float = 15.0
    telemetry_hz: float = 0.0  # live NVML sampling in the UI (0: only telemetry events from the session)
