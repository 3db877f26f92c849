"""Speedup history: per step of the focused track, and best-so-far over every shape.

Plots are plotext (textual-plotext); when the panel is too short for a plot
the same series are drawn as Textual Sparklines.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Sparkline, Static
from textual_plotext import PlotextPlot

from ..state import SessionModel, Track

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ..options import WidgetOptions

MIN_PLOT_HEIGHT = 7
MAX_POINTS = 400


class HistoryPanel(Horizontal):
    DEFAULT_CSS = """
    HistoryPanel { height: 12; }
    HistoryPanel > Vertical { width: 1fr; height: 1fr; }
    HistoryPanel PlotextPlot { height: 1fr; }
    HistoryPanel Sparkline { height: 1fr; display: none; }
    HistoryPanel .hp-label { height: 1; color: $text-muted; display: none; }
    HistoryPanel.small PlotextPlot { display: none; }
    HistoryPanel.small Sparkline, HistoryPanel.small .hp-label { display: block; }
    """

    def __init__(self, model: SessionModel, **kw: Unpack[WidgetOptions]) -> None:
        super().__init__(**kw)
        self.model = model
        self.track: Track | None = None
        self.baseline: str | None = None
        self._track_key: tuple | None = None
        self._all_key: tuple | None = None
        #: the (seconds, geomean) points the all-shapes plot shows now
        self.all_series: list[tuple[float, float]] = []

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("focused shape: speedup per step", classes="hp-label")
            yield PlotextPlot(id="hp-track")
            yield Sparkline([], id="hp-track-spark")
        with Vertical():
            yield Static("all shapes: geomean of best", classes="hp-label")
            yield PlotextPlot(id="hp-all")
            yield Sparkline([], id="hp-all-spark")

    def on_resize(self) -> None:
        self.set_class(self.size.height < MIN_PLOT_HEIGHT, "small")

    def update_track(self, track: Track | None, *, force: bool = False) -> None:
        key = (track.id if track else None, len(track.history) if track else 0, len(track.best_history) if track else 0)
        if key == self._track_key and not force:
            return
        self._track_key = key
        self.track = track
        plot = self.query_one("#hp-track", PlotextPlot)
        plt = plot.plt
        plt.clear_figure()
        name = f"{track.label}-{track.acc}" if track else "no shape"
        plt.title(f"{name}: speedup per step")
        pts = [(s, v) for s, v in (track.history if track else []) if v is not None]
        if pts:
            plt.scatter([p[0] for p in pts], [p[1] for p in pts], marker="dot", color="cyan", label="candidate")
            best, run = [], 0.0
            for _, v in pts:
                run = max(run, v)
                best.append(run)
            plt.plot([p[0] for p in pts], best, color="green", label="best")
            plt.horizontal_line(1.0, color="red")
            if track is not None and track.profiling_step is not None:
                plt.vertical_line(track.profiling_step, color="magenta")  # NCU metrics enter the context
        plt.xlabel("step")
        plot.refresh()
        self.query_one("#hp-track-spark", Sparkline).data = [v for _, v in pts] or [0.0]

    def update_all(self, *, force: bool = False) -> None:
        """Redraw the all-shapes plot when a new best or a later event changed its series."""
        series = self.model.geomean_series()
        key = (len(self.model.best_over_time), round(series[-1][0]) if series else None)
        if key == self._all_key and not force:
            return
        self._all_key = key
        plot = self.query_one("#hp-all", PlotextPlot)
        plt = plot.plt
        plt.clear_figure()
        n = sum(1 for t in self.model.tracks.values() if t.best_speedup)
        plt.title(f"geomean best speedup, {n}/{len(self.model.tracks)} shapes")
        if len(series) > MAX_POINTS:  # keep the last point, thin the rest evenly
            stride = len(series) / MAX_POINTS
            series = [series[int(i * stride)] for i in range(MAX_POINTS - 1)] + [series[-1]]
        self.all_series = series
        if series:
            plt.plot([s for s, _ in series], [g for _, g in series], color="green")
            plt.horizontal_line(1.0, color="red")
        plt.xlabel("seconds")
        plot.refresh()
        self.query_one("#hp-all-spark", Sparkline).data = [g for _, g in series] or [0.0]
