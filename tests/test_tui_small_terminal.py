"""The app in an 80×24 terminal (the smallest the layout is made for, docs/tui.md): every panel
can be shown whole, one at a time, and a large terminal still shows them all at once."""

from __future__ import annotations

from l2tui.tui.screens.main import PANES
from l2tui.tui.widgets.history import HistoryPanel
from l2tui.tui.widgets.shape_grid import ShapeGrid

from tui_support import GRID, SIZE, plain, replay_app

SMALL = (80, 24)
PANEL = {"grid": "#grid", "kernel": "#kernel", "metrics": "#metrics", "history": "#history"}


async def settle(pilot, n: int = 3) -> None:
    for _ in range(n):
        await pilot.pause(0.05)


def on_screen(scr, selector: str) -> bool:  # noqa: ANN001
    """The widget is shown and lies inside the terminal."""
    w = scr.query_one(selector)
    r = w.region
    return w.display and r.width > 0 and r.height > 0 and r.right <= scr.size.width and r.bottom <= scr.size.height


async def test_80x24_shows_each_panel_whole_in_turn():
    app = replay_app(GRID, start=1500)
    async with app.run_test(size=SMALL) as pilot:
        await settle(pilot)
        scr = app.screen
        assert scr.one_pane and scr.pane == "grid"
        grid = scr.query_one(ShapeGrid)
        # every row and column of the grid: M\N labels plus one cell per N, one line per M
        assert grid.region.height >= len(grid.ms) + 2
        assert grid.region.width >= 6 + 6 * len(grid.ns)
        assert "grid" in plain(scr.query_one("#panes")) and "w: next panel" in plain(scr.query_one("#panes"))
        assert "geomean" in plain(scr.query_one("#telemetry"))
        assert on_screen(scr, "#log")
        for pane in PANES[1:]:
            await pilot.press("w")
            await settle(pilot)
            assert scr.pane == pane
            assert on_screen(scr, PANEL[pane]) and scr.query_one(PANEL[pane]).region.width == SMALL[0]
            others = [PANEL[p] for p in PANES if p != pane]
            assert not any(on_screen(scr, o) for o in others), pane
            if pane == "history":   # both plots, the geomean one included, as plots (not sparklines)
                hp = scr.query_one(HistoryPanel)
                assert not hp.has_class("small")
                assert on_screen(scr, "#hp-track") and on_screen(scr, "#hp-all")
            if pane == "metrics":
                assert "best" in plain(scr.query_one("#mp-body"))
        await pilot.press("w")
        await settle(pilot)
        assert scr.pane == "grid" and grid.has_focus


async def test_a_large_terminal_shows_every_panel_at_once():
    app = replay_app(GRID, start=1500)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        scr = app.screen
        assert not scr.one_pane
        assert not scr.query_one("#panes").display
        assert all(on_screen(scr, sel) for sel in PANEL.values())


async def test_resizing_switches_between_the_layouts():
    app = replay_app(GRID, start=1500)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        scr = app.screen
        await pilot.resize_terminal(*SMALL)
        await settle(pilot)
        assert scr.one_pane and on_screen(scr, "#grid") and not on_screen(scr, "#kernel")
        await pilot.resize_terminal(*SIZE)
        await settle(pilot)
        assert not scr.one_pane and on_screen(scr, "#kernel") and on_screen(scr, "#metrics")
