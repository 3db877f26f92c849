"""``l2tui build --catalog``: a cold cache filled by parallel real nvcc builds, with a progress
bar, into a folder another machine uses through ``L2TUI_CACHE_DIR``.

A small subset of the catalog (the sm80_mma family with fp16 accumulation, built for sm_80:
seconds of nvcc each), so CI stays quick; the CUTLASS configurations build the same way.
"""

from __future__ import annotations

import json
import time

import pytest

from harness.families import catalog


def subset():
    return [c for c in catalog("f16", "sm_80") if c.family == "sm80_mma"]


def planned_sources(shape: str) -> list[str]:
    """What a sweep's picks time on ``shape`` among ``subset``'s family: what --prebuild-only builds."""
    from harness.shapes import parse_shape
    from l2tui.agent.sweep import Sweep, SweepConfig

    cfg = SweepConfig(shapes=[parse_shape(shape)], accs=("f16",), arch="sm_80", families=["sm80_mma"])
    return Sweep(cfg, progress=lambda line: None).planned_sources()


@pytest.mark.compile
def test_build_catalog_out_dir_is_a_cache_another_machine_points_to(tmp_path, monkeypatch, capsys):
    from l2tui.cli import main

    out = tmp_path / "prebuilt"
    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path / "this-machine"))
    argv = ["build", "--catalog", "--out", str(out), "--families", "sm80_mma", "--acc", "f16", "--arch", "sm_80",
            "--jobs", "2"]
    assert main(argv) == 0
    cap = capsys.readouterr()
    n = len(subset())
    assert n >= 2
    assert f"{n} of {n} configurations built for sm_80 ({n} compiled now, 0 were cached)" in cap.out
    assert f"export L2TUI_CACHE_DIR={out}" in cap.out
    # the progress bar (stderr): a line per finished build in a log, the last one complete
    bars = [ln for ln in cap.err.splitlines() if ln.startswith("catalog [")]
    assert bars and f"{n}/{n}" in bars[-1] and "#" * 24 in bars[-1]
    manifest = json.loads((out / "catalog.json").read_text())
    assert manifest["arch"] == "sm_80" and manifest["nvcc"] and manifest["nvcc_s"] > 0
    assert set(manifest["configs"]) == {c.name for c in subset()}
    assert all(v["ok"] and not v["cached"] for v in manifest["configs"].values())
    assert not (tmp_path / "this-machine").exists()          # --out, not this machine's cache

    # "the GPU machine": pointed at the folder, a build of the same sources needs no nvcc
    monkeypatch.setenv("L2TUI_CACHE_DIR", str(out))
    from harness.build import build

    for c in subset():
        r = build(c.source(), arch="sm_80")
        assert r.ok and r.cached and str(out) in str(r.so_path)
    assert main(argv[:2] + argv[4:]) == 0                     # the same command again: all cached
    assert f"0 compiled now, {n} were cached" in capsys.readouterr().out


def test_build_without_catalog_or_with_a_bad_family_is_one_line(capsys):
    from l2tui.cli import main

    for argv, needle in ((["build"], "add --catalog"),
                         (["build", "--catalog", "--families", "nope"], "unknown kernel family 'nope'"),
                         (["build", "--catalog", "--jobs", "0"], "--jobs must be 1 or more")):
        assert main(argv) != 0
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0], (argv, err)


def test_the_progress_bar_is_one_updating_line_with_an_eta_from_real_builds():
    """On a terminal: redrawn in place (\\r), one final newline; the ETA is '?' until a real build
    (not a cache hit) has finished, then a time."""
    import io
    from types import SimpleNamespace

    from l2tui.executors.progress import BuildProgress

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Tty()
    bar = BuildProgress("catalog", stream=out)
    bar(1, 3, SimpleNamespace(cached=True, ok=True, seconds=0.0))
    assert "ETA ?" in out.getvalue() and "1 cached" in out.getvalue()
    bar(2, 3, SimpleNamespace(cached=False, ok=False, seconds=4.0))
    last = out.getvalue().split("\r")[-1]
    assert "ETA ?" not in last and "ETA " in last and "1 failed" in last
    bar(3, 3, SimpleNamespace(cached=False, ok=True, seconds=5.0))
    text = out.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n") and text.count("\r") == 3
    assert "3/3" in text.split("\r")[-1] and "nvcc 9s in all" in text


class _BuildClock:
    """A ``time`` module for the sweep and the build driver whose ``monotonic()`` moves only when
    a real nvcc build finishes, by ``build_s`` seconds: a time limit then falls between builds
    by construction, not by how fast the machine compiles."""

    MODULES = ("harness.build", "l2tui.agent.sweep", "l2tui.commands.sweep")

    def __init__(self, monkeypatch: pytest.MonkeyPatch, build_s: float) -> None:
        import harness.build as build_mod

        self.now, self.builds = 1000.0, 0
        real_build = build_mod.build

        def timed_build(*args, **kwargs):
            try:
                return real_build(*args, **kwargs)
            finally:
                self.builds += 1
                self.now += build_s

        monkeypatch.setattr(build_mod, "build", timed_build)
        for name in self.MODULES:
            monkeypatch.setattr(f"{name}.time", self)

    def monotonic(self) -> float:
        return self.now

    def __getattr__(self, name: str):
        return getattr(time, name)


@pytest.mark.compile
def test_a_time_limited_prebuild_stops_between_builds_and_a_second_run_finishes_it(tmp_path, monkeypatch, capsys):
    """``--max-seconds`` bounds the catalog build too: builds go in rounds as wide as ``--jobs``
    and none starts after the limit, so a cold sweep on a time budget stops between real nvcc
    builds, keeping each finished one in the cache, instead of being killed inside one."""
    from l2tui.cli import main

    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path / "cache"))
    argv = ["sweep", "--prebuild-only", "--shapes", "64x64x64", "--families", "sm80_mma", "--acc", "f16",
            "--arch", "sm_80", "--jobs", "1", "--no-known"]
    n = len(planned_sources("64x64x64"))
    assert n >= 2
    # the sweep's clock stands still except that each real nvcc build takes an hour of it, so
    # the first round (one build: --jobs 1) starts inside the limit and ends past it, whatever
    # this machine's pace
    with pytest.MonkeyPatch.context() as mp:
        clock = _BuildClock(mp, build_s=3600.0)
        assert main(argv + ["--max-seconds", "60"]) == 0
    assert clock.builds == 1
    out = capsys.readouterr().out
    assert f"prebuild: 1 of {n} kernels built for sm_80 (what the picks time on 1 track); {n - 1} not started " \
        "before --max-seconds" in out
    assert f"time limit: {n - 1} of {n} builds not started" in out
    # the same command without a limit: the finished build is a cache hit, the rest compile now
    assert main(argv) == 0
    cap = capsys.readouterr()
    assert f"prebuild: {n} of {n} kernels built for sm_80" in cap.out and "not started" not in cap.out
    bars = [ln for ln in cap.err.splitlines() if ln.startswith("catalog [")]
    assert bars and f"{n}/{n}" in bars[-1] and "1 cached" in bars[-1]
