"""The known-kernels view (``K``, issue 52) on the real app through Textual's pilot: what each
track of the bundled demo starts from, a session with no GPU, a refused local layer, the binding."""

from __future__ import annotations

import json
import shutil

import pytest
from textual.widgets import DataTable

from l2tui import paths
from l2tui.tui import keymap
from l2tui.tui.screens.known import KnownScreen
from l2tui.tui.screens.main import MainScreen
from l2tui.tui.screens.replay import ReplayScreen

from tui_support import GRID, SIZE, live_app, plain, replay_app

DEMO = paths.DEMO_SESSION
needs_demo = pytest.mark.skipif(not (DEMO / "events.jsonl").is_file(), reason="no bundled demo session")


async def open_known(pilot, app) -> KnownScreen:  # noqa: ANN001 - a textual Pilot and L2App
    """Press the key of the view and wait until its worker has filled it."""
    for _ in range(4):
        await pilot.pause(0.05)
    await pilot.press("K")
    await pilot.pause(0.05)
    assert isinstance(app.screen, KnownScreen)
    for worker in [w for w in app.workers if w.group == "known"]:   # a live app's loop runs on
        await worker.wait()
    for _ in range(4):
        await pilot.pause(0.05)
    return app.screen


def rows(scr: KnownScreen) -> dict[str, list[str]]:
    """The table's rows by shape, every cell as plain text."""
    table = scr.query_one(DataTable)
    return {str(r[0]): [str(c.plain if hasattr(c, "plain") else c) for c in r]
            for r in (table.get_row_at(i) for i in range(table.row_count))}


@needs_demo
async def test_the_demo_lists_every_track_with_what_it_starts_from():
    app = replay_app(DEMO, start=10**6)
    async with app.run_test(size=SIZE) as pilot:
        scr = await open_known(pilot, app)
        title = str(scr.query_one("#known-title").content)
        assert "NVIDIA H200" in title and "fp16" in title and "accumulator f32" in title
        summary = plain(scr.query_one("#known-summary"))
        assert "kernels known for this GPU" in summary and "bundled h200:" in summary and "local: 0" in summary
        assert not scr.query_one("#known-problems").display
        got = rows(scr)
        assert len(got) == len(scr.model.tracks) == 24
        row = got["128x128x128"]
        # the bundled H200 layer knows the shape: its configuration, speedup and layer
        assert row[1] == "f32" and row[3] == "known"
        assert row[4] == "tiny-16x32x128-w1x2x4-a2-nopdl"
        assert row[5].endswith("× vs cublaslt_autotune") and row[6] == "bundled h200"
        # the session's best over the same baseline, and whether it beat the known kernel
        tr = scr.model.tracks["128x128x128-f32"]
        assert row[7].startswith(f"{tr.speedup_vs('cublaslt_autotune'):.2f}×")
        assert row[7].endswith((" beats it", " below it"))
        assert {r[3] for r in got.values()} <= {"known", "from neighbours", "nothing known"}


@needs_demo
async def test_escape_closes_the_view_and_the_replay_goes_on():
    app = replay_app(DEMO, start=10**6)
    async with app.run_test(size=SIZE) as pilot:
        await open_known(pilot, app)
        await pilot.press("escape")
        await pilot.pause(0.05)
        assert isinstance(app.screen, ReplayScreen)


async def test_a_session_with_no_gpu_says_so_in_one_line(tmp_path):
    src = tmp_path / "nogpu"
    _rewrite_start(GRID, src, lambda ev: ev.pop("gpu", None))
    app = replay_app(src, start=10**6)
    async with app.run_test(size=SIZE) as pilot:
        scr = await open_known(pilot, app)
        assert "no GPU recorded" in str(scr.query_one("#known-title").content)
        summary = plain(scr.query_one("#known-summary")).strip()
        assert summary.startswith("this session has recorded no GPU") and "\n" not in summary
        assert not scr.query_one(DataTable).display


async def test_a_corrupt_local_layer_is_one_line_and_the_bundled_kernels_still_show(tmp_path, monkeypatch):
    known = tmp_path / "known"
    known.mkdir()
    (known / "known.json").write_text("{oops")
    monkeypatch.setenv("L2TUI_KNOWN_DIR", str(known))
    app, _ = live_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        scr = await open_known(pilot, app)
        problems = plain(scr.query_one("#known-problems")).strip()
        assert scr.query_one("#known-problems").display
        assert problems.count("\n") == 0 and "known.json" in problems and "refused" in problems
        assert "bundled h200:" in plain(scr.query_one("#known-summary"))
        got = rows(scr)
        assert got and any(r[3] == "known" and r[6] == "bundled h200" for r in got.values())
        assert (known / "known.json").read_text() == "{oops"      # looked at, never rewritten


def test_the_binding_has_an_id_and_is_in_the_help_and_palette_tables():
    spec = keymap.BY_ID["known"]
    assert (spec.key, spec.action, spec.group, spec.palette) == ("K", "known", "view", True)
    assert spec in MainScreen.PALETTE_SPECS and spec in ReplayScreen.PALETTE_SPECS
    for screen in (MainScreen, ReplayScreen):
        ids = {b.id for b in screen.BINDINGS if not isinstance(b, tuple)}
        assert "known" in ids


@needs_demo
async def test_the_help_screen_and_the_palette_offer_the_view():
    from l2tui.tui.palette import SteeringCommands
    from l2tui.tui.screens.modals import HelpScreen

    app = replay_app(DEMO, start=10**6)
    async with app.run_test(size=SIZE) as pilot:
        for _ in range(3):
            await pilot.pause(0.05)
        under = app.screen
        await pilot.press("question_mark")
        await pilot.pause(0.05)
        assert isinstance(app.screen, HelpScreen)
        assert "Known kernels for this GPU" in plain(app.screen.query_one("#help-table"))
        app.screen.dismiss(None)
        await pilot.pause(0.05)
        entries = SteeringCommands(under)._entries()
        assert ("Known kernels for this GPU", "known", "K") in entries


def _rewrite_start(src, dst, change) -> None:  # noqa: ANN001 - fixture folders and a dict edit
    """A copy of the session ``src`` whose session_started event ``change`` edits."""
    shutil.copytree(src, dst)
    events = (dst / "events.jsonl").read_text().splitlines()
    first = json.loads(events[0])
    assert first["type"] == "session_started"
    change(first)
    (dst / "events.jsonl").write_text("\n".join([json.dumps(first)] + events[1:]) + "\n")


async def test_a_bf16_session_starts_from_the_fp16_twins(tmp_path):
    """No bf16 kernel is bundled for the H200: each bf16 track times the bf16 renders of the fp16
    winners, the shape's own first, and the view says so without a time of their own."""
    src = tmp_path / "bf16"
    _rewrite_start(GRID, src, lambda ev: ev["config"].setdefault("loop", {}).update(dtype="bf16"))
    app = replay_app(src, start=10**6)
    async with app.run_test(size=SIZE) as pilot:
        scr = await open_known(pilot, app)
        assert "bf16" in str(scr.query_one("#known-title").content)
        row = rows(scr)["1024x1024x1024"]
        assert row[3] == "fp16 twins" and row[5] == "no bf16 time yet"
        assert row[6].endswith("fp16 twin")
        assert row[4].split(" (")[0].endswith("-bf16") and "(1024x1024x1024)" in row[4]   # the shape's own first
