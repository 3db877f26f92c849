"""SVG snapshots (pytest-textual-snapshot) of the main, replay and help screens at 160×48.

Regenerate after an intended change with ``pytest tests/test_tui_snapshots.py --snapshot-update``
and look at the report before committing.
"""

from __future__ import annotations

from tui_support import GRID, LIST, SIZE, live_app, replay_app


async def _settle(pilot) -> None:
    for _ in range(4):
        await pilot.pause(0.05)
    await pilot.wait_for_scheduled_animations()


def test_main_screen(snap_compare, tmp_path):
    app, _ = live_app(tmp_path)
    assert snap_compare(app, terminal_size=SIZE, run_before=_settle)


def test_main_screen_diff_all_k(snap_compare, tmp_path):
    app, _ = live_app(tmp_path)

    async def run_before(pilot) -> None:
        await _settle(pilot)
        await pilot.press("v", "d")
        await _settle(pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_replay_screen(snap_compare):
    app = replay_app(GRID, start=1500)
    assert snap_compare(app, terminal_size=SIZE, run_before=_settle)


def test_replay_list_view(snap_compare):
    app = replay_app(LIST, start=10**6)
    assert snap_compare(app, terminal_size=SIZE, run_before=_settle)


def test_help_screen(snap_compare):
    app = replay_app(GRID, start=10**6, keys={"accept": "ctrl+y"})

    async def run_before(pilot) -> None:
        await _settle(pilot)
        await pilot.press("question_mark")
        await _settle(pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_replay_of_the_scripted_h200_session(snap_compare):
    """The scripted-LLM session recorded on the H200 (the TUI tests' fixture, and what a plain
    ``l2tui`` without a GPU falls back to while no real demo is bundled), at its end."""
    from l2tui.paths import FALLBACK_DEMO_SESSION

    app = replay_app(FALLBACK_DEMO_SESSION, start=10**6)
    assert snap_compare(app, terminal_size=SIZE, run_before=_settle)


def test_main_screen_at_80x24(snap_compare, tmp_path):
    """The smallest terminal the layout is made for (docs/tui.md): one panel at a time under a
    strip naming them, the whole grid, a short log."""
    app, _ = live_app(tmp_path)
    assert snap_compare(app, terminal_size=(80, 24), run_before=_settle)


def test_metrics_pane_at_80x24(snap_compare):
    app = replay_app(GRID, start=1500)

    async def run_before(pilot) -> None:
        await _settle(pilot)
        await pilot.press("w", "w")
        await _settle(pilot)

    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


def test_known_view(snap_compare):
    """``K`` over the replay: the known kernels for the session's GPU (the bundled H200 layer:
    a change of ``results/h200`` winners redraws this one) beside each track's best."""
    app = replay_app(GRID, start=10**6)

    async def run_before(pilot) -> None:
        await _settle(pilot)
        await pilot.press("K")
        for worker in [w for w in app.workers if w.group == "known"]:
            await worker.wait()
        await _settle(pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)
