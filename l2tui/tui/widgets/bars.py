"""One-line bars: GPU telemetry and session summary on top, replay position below it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.widget import Widget

from ..state import SessionModel, fmt_speedup

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ..options import WidgetOptions


def _fmt(v: object, unit: str, fmt: str = "{:.0f}") -> str:
    """A telemetry reading with its unit; a dash for a missing (or not numeric) one."""
    return fmt.format(v) + unit if isinstance(v, (int, float)) else "—"


class _Line(Widget):
    """A one-line bar drawn from a Text; redrawn without a layout pass (it never changes size)."""

    def __init__(self, **kw: Unpack[WidgetOptions]) -> None:
        super().__init__(**kw)
        self._text = Text("")

    def update(self, text: Text) -> None:
        if text == self._text or (text.plain == self._text.plain and text.spans == self._text.spans):
            return
        self._text = text
        self.refresh()

    @property
    def content(self) -> Text:
        return self._text

    def render(self) -> Text:
        return self._text


class TelemetryBar(_Line):
    """SM clock, temperature, power and utilisation from telemetry events; "no GPU" without one."""

    DEFAULT_CSS = """
    TelemetryBar { height: 1; background: $panel; padding: 0 1; }
    """

    def __init__(self, model: SessionModel, **kw: Unpack[WidgetOptions]) -> None:
        super().__init__(**kw)
        self.model = model
        self.baseline: str | None = None
        self.note: str = ""

    def sync(self) -> None:
        m = self.model
        tel = m.telemetry
        t = Text()
        gpu = m.gpu.get("name") if m.gpu else None
        if self.note:
            t.append(f" {self.note} ", style="bold black on magenta")
            t.append(" ")
        if not gpu:
            t.append(" no GPU ", style="black on yellow")
        else:
            t.append(f" {str(gpu).replace('NVIDIA ', '')} ", style="bold black on green")
        if tel:
            t.append(f" SM {_fmt(tel.get('sm_clock_mhz'), ' MHz')}")
            temp = tel.get("temp_c")
            t.append(f" {_fmt(temp, '°C')}", style="red" if isinstance(temp, (int, float)) and temp >= 85 else "")
            t.append(f" {_fmt(tel.get('power_w'), '')}/{_fmt(tel.get('power_limit_w'), 'W')}")
            t.append(f" util {_fmt(tel.get('util_pct'), '%')}")
            mem = tel.get("mem_used_mib")
            t.append(f" {_fmt(mem / 1024 if isinstance(mem, (int, float)) else None, ' GiB', '{:.1f}')}")
        elif gpu:
            t.append("  no telemetry yet", style="grey50")
        states: dict[str, int] = {}
        for tr in m.tracks.values():
            states[tr.state] = states.get(tr.state, 0) + 1
        t.append(" │ ", style="grey50")
        t.append(f"{m.policy or '—'} · ")
        if m.dtype != "fp16" or m.dtype_switched:   # fp16 goes unnamed unless a switch chose it
            t.append(m.dtype, style="bold")
            t.append(" · ")
        t.append(f"{m.mode} · vs {self.baseline or _first_baseline(m) or '—'}")
        t.append(" │ ", style="grey50")
        t.append(" ".join(f"{n} {s}" for s, n in states.items()) or "no tracks")
        gm = m.geomean_best(self.baseline)
        t.append(f" · geomean {fmt_speedup(gm)}")
        self.update(t)


def _first_baseline(m: SessionModel) -> str | None:
    for tr in m.tracks.values():
        if tr.baseline:
            return tr.baseline
    return None


class ReplayBar(_Line):
    """Play state, speed, position (event and session time) and a progress bar."""

    DEFAULT_CSS = """
    ReplayBar { height: 1; background: $boost; padding: 0 1; }
    """

    def show(self, *, playing: bool, speed: float, pos: int, total: int, elapsed: float, duration: float) -> None:
        t = Text()
        at_end = total > 0 and pos >= total
        if playing:
            t.append(" ▶ PLAY ", style="bold black on green")
        else:
            t.append(" ■ END " if at_end else " ‖ PAUSED ", style="bold black on yellow")
        t.append(f"  ×{speed:g}  ")
        t.append(f"event {pos}/{total}  ")
        t.append(f"{_clock(elapsed)} / {_clock(duration)}  ")
        width = 30
        filled = int(width * pos / total) if total else 0
        t.append("━" * filled, style="green")
        t.append("─" * (width - filled), style="grey42")
        play = "space plays again" if at_end and not playing else "space play"
        t.append(f"   {play} · +/- speed · </> event · {{/}} step · : seek", style="grey50")
        self.update(t)


def _clock(s: float) -> str:
    s = int(s)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
