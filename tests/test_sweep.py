"""``l2tui sweep``: tracks, session events, RL rows, winners, resume.

The evaluator is the project's ``RecordedEvaluator`` replaying H200 evaluations; its records
are built from the committed H200 timings (tests/fixtures/h200_timings), not invented.
Builds are skipped here (test_families builds every family with real nvcc).
"""

from __future__ import annotations

import json

import pytest

from harness import families as F
from harness.families import Config
from harness.shapes import Shape, parse_shape
from l2tui.agent.recorded import RecordedEvaluator
from l2tui.agent.sweep import RESULTS_FILE, WINNERS_DIR, Sweep, SweepConfig
from l2tui.session import Session
from tests.sweep_support import FIXTURES, recorded_file


class Counting:
    """An evaluator (harness.evaluator_protocol) that counts its evaluations; one at a time."""

    can_batch = False

    def __init__(self, inner):
        self.inner, self.calls = inner, 0

    def evaluate(self, *a, **kw):
        self.calls += 1
        return self.inner.evaluate(*a, **kw)

    def close(self):
        pass


def make(tmp_path, shapes, ev, session):
    cfg = SweepConfig(shapes=shapes, steps=2, width=2, seeds=3, arch="sm_90a", build_batches=False)
    return Sweep(cfg, ev, session=session, out_dir=session.path, progress=lambda s: None, gpu_name="H200")


@pytest.mark.skipif(not (FIXTURES / "time_f32.json").exists(), reason="H200 timings not recorded yet")
def test_sweep_logs_tracks_picks_winners_and_resumes(tmp_path, monkeypatch):
    shapes = [Shape(4096, 4096, 4096), Shape(64, 64, 16384)]
    rec = recorded_file(tmp_path, shapes)
    # the sweep seeds from the catalog the fixture recorded (configurations added to the catalog
    # later have no replayable H200 evaluation on these shapes)
    import l2tui.agent.policies.search as search

    timed = {name for r in json.loads((FIXTURES / "time_f32.json").read_text())["timings"] for name in r["times_ms"]}
    full = search.catalog
    monkeypatch.setattr(search, "catalog", lambda acc, arch, dtype="fp16": [c for c in full(acc, arch, dtype) if c.name in timed])
    sdir = tmp_path / "session"
    s = Session.create(sdir, config={"sweep": {}}, gpu={"name": "H200"}, versions={})
    ev = Counting(RecordedEvaluator(rec, arch="sm_90a", build=False))
    out = make(tmp_path, shapes[:1], ev, s).run()
    assert len(out) == 1 and out[0].best_name and out[0].speedup
    first_calls = ev.calls
    assert first_calls >= 3                      # the seeds at least
    winner = sdir / WINNERS_DIR / "4096_4096_4096.cu"
    assert winner.exists() and Config.from_source(winner.read_text()).name == out[0].best_name
    # the best is the fastest recorded among what was evaluated
    types = [e["type"] for e in s.events]
    for t in ("track_added", "candidate", "compiled", "checked", "timed", "best", "track_done"):
        assert t in types
    rows = s.rewards()
    assert len(rows) == first_calls
    assert all(r["policy"] == "search" and r["messages"] and r["completion"] for r in rows)

    # resume: the finished track is skipped, the new one runs
    s2 = Session.open(sdir)
    ev2 = Counting(RecordedEvaluator(rec, arch="sm_90a", build=False))
    out2 = make(tmp_path, shapes, ev2, s2).run()
    assert [r.track for r in out2] == ["64x64x16384-f32"]
    done = json.loads((sdir / RESULTS_FILE).read_text())["tracks"]
    assert set(done) == {"4096x4096x4096-f32", "64x64x16384-f32"}
    # every finished track says where its time went (recorded evaluations: no nvcc, no GPU)
    assert all(t["build_s"] == 0 and t["gpu_s"] == 0 and t["seconds"] >= 0 for t in done.values())


@pytest.mark.compile
def test_cli_prebuild_only_builds_what_the_picks_time(capsys, tmp_path, monkeypatch):
    """``--prebuild-only`` compiles the sources the sweep's picks will time on its shapes, every
    one of them, and nothing else: the GPU box then finds each track's builds in the cache."""
    from harness.build import build_key, nvcc_version
    from l2tui.agent.sweep import Sweep, SweepConfig
    from l2tui.cli import main

    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path))
    shapes = [parse_shape("64x64x64"), parse_shape("128x256x64")]
    # one family of quick builds stands for the catalog (the whole of it is minutes of nvcc)
    rc = main(["sweep", "--policy", "search", "--prebuild-only", "--shapes", "64x64x64,128x256x64", "--acc", "f32",
               "--arch", "sm_80", "--jobs", "2", "--families", "skinny_splitk", "--seeds", "2", "--no-known"])
    assert rc == 0
    out = capsys.readouterr().out
    planned = Sweep(SweepConfig(shapes=shapes, accs=("f32",), seeds=2, arch="sm_80", families=["skinny_splitk"]),
                    progress=lambda line: None).planned_sources()
    n = len(planned)
    catalog = [c for c in F.catalog("f32", "sm_80") if c.family == "skinny_splitk"]
    assert 0 < n < len(catalog)      # the picks, not the whole family
    assert f"prebuild: {n} of {n} kernels built for sm_80 (what the picks time on 2 tracks)" in out, out[-500:]
    keys = {build_key(src, "sm_80", (), nvcc_version()) for src in planned}
    built = {p.name for p in (tmp_path / "builds").glob("*/*")}
    assert keys <= built and len(built) == n


def test_for_gpu_goes_with_prebuild_only_in_one_line(capsys, tmp_path):
    from l2tui.cli import main

    rc = main(["sweep", "--shapes", "64x64x64", "--arch", "sm_90a", "--for-gpu", "NVIDIA H100 80GB HBM3",
               "--session", str(tmp_path / "s")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc != 0 and len(err) == 1 and "--for-gpu goes with --prebuild-only" in err[0]
    assert not (tmp_path / "s").exists()


def test_cli_rejects_a_negative_new_builds_in_one_line(capsys, tmp_path):
    from l2tui.cli import main

    rc = main(["sweep", "--policy", "search", "--shapes", "64x64x64", "--arch", "sm_90a", "--new-builds", "-1",
               "--session", str(tmp_path / "s")])
    assert rc != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--new-builds must be 0 or more" in err[0]
    assert not (tmp_path / "s").exists()   # nothing was created for a bad option


@pytest.mark.compile
def test_a_sweep_out_of_time_before_it_starts_ends_its_session_for_resume(capsys, tmp_path, monkeypatch):
    """``--max-seconds 0``: no build and no track starts; the session ends with reason ``time
    limit``, says how to continue, and ``--resume`` runs the track."""
    from l2tui.cli import main

    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path / "cache"))
    shapes = [Shape(64, 64, 64)]
    rec = recorded_file(tmp_path, shapes, ["sm80_mma"])
    sdir = tmp_path / "s"
    rc = main(["sweep", "--shapes", "64x64x64", "--recorded", str(rec), "--steps", "0", "--max-seconds", "0",
               "--families", "sm80_mma", "--arch", "sm_80", "--seeds", "1", "--no-pick-kinds", "--session", str(sdir)])
    out = capsys.readouterr().out
    assert rc == 0
    assert "stopped at --max-seconds (1 track left); continue" in out
    assert f"l2tui sweep --session {sdir} --resume" in out
    events = Session.open(sdir).events
    assert not [e for e in events if e["type"] == "track_added"]
    assert [e.get("reason") for e in events if e["type"] == "session_ended"] == ["time limit"]
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("kernel.so"))
    # the run's times are in sweep.json (a cold sweep resumed over several calls adds them up)
    (run,) = json.loads((sdir / RESULTS_FILE).read_text())["runs"]
    assert run["ended"] == "time limit" and run["tracks"] == 0 and run["gpu_s"] == 0 and run["wall_s"] >= 0
    assert run["catalog"]["compiled"] == 0
    assert "time: " in out and "0 tracks" in out

    # resumed without the limit: the track's builds (real nvcc) and the track itself
    assert main(["sweep", "--session", str(sdir), "--resume", "--recorded", str(rec)]) == 0
    out = capsys.readouterr().out
    runs = json.loads((sdir / RESULTS_FILE).read_text())["runs"]
    assert len(runs) == 2 and runs[1]["ended"] == "sweep done" and runs[1]["tracks"] == 1
    assert runs[1]["catalog"]["compiled"] >= 1 and runs[1]["catalog"]["not_started"] == 0
    assert "the session's 2 runs" in out


@pytest.mark.compile
@pytest.mark.parametrize("libraries", [None, "torch"])
def test_sweep_libraries_reach_the_session_and_the_exports_routes(capsys, tmp_path, monkeypatch, libraries):
    """``--libraries torch``: every track's times hold torch beside the baseline, the session's config
    remembers it, and an export of the session routes 64x64x64 to the fallback because torch was
    faster there (the fixture's H200 timings: sm80 kernel 2.66 us, autotuned cuBLASLt 3.10 us, torch
    2.39 us); without it the export only knows the baseline and keeps the kernel."""
    from l2tui.cli import main
    from l2tui.export import export_session

    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path / "cache"))
    rec = recorded_file(tmp_path, [Shape(64, 64, 64)], ["sm80_mma"], libraries=["torch"] if libraries else ())
    sdir = tmp_path / "s"
    argv = ["sweep", "--shapes", "64x64x64", "--recorded", str(rec), "--steps", "0", "--families", "sm80_mma",
            "--arch", "sm_80", "--seeds", "1", "--no-pick-kinds", "--session", str(sdir)]
    assert main(argv + (["--libraries", libraries] if libraries else [])) == 0
    s = Session.open(sdir)
    assert s.config["sweep"]["libraries"] == ([libraries] if libraries else [])
    timed = [e for e in s.events if e["type"] == "timed"]
    assert timed and all(("torch" in e["times_ms"]) == bool(libraries) for e in timed)
    (entry,) = export_session(sdir, tmp_path / "exp").manifest["kernels"]
    assert entry["fallback"] == ("cublaslt" if libraries else None)
    assert entry["slower_than"] == (["torch"] if libraries else [])


def test_sweep_refuses_an_unknown_library_in_one_line(capsys, tmp_path):
    from l2tui.cli import main

    rc = main(["sweep", "--shapes", "64x64x64", "--arch", "sm_90a", "--libraries", "cublas,mkl",
               "--session", str(tmp_path / "s")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc != 0 and len(err) == 1 and "mkl" in err[0]
    assert not (tmp_path / "s").exists()


@pytest.mark.compile
def test_a_resumed_sweep_keeps_its_libraries(capsys, tmp_path, monkeypatch):
    """A resume without ``--libraries`` times what the sweep started with; another list is one line."""
    from l2tui.cli import main

    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path / "cache"))
    shapes = [Shape(64, 64, 64), Shape(4096, 4096, 4096)]
    rec = recorded_file(tmp_path, shapes, ["sm80_mma"], libraries=["torch"])
    sdir = tmp_path / "s"
    assert main(["sweep", "--shapes", "64x64x64", "--recorded", str(rec), "--steps", "0", "--families", "sm80_mma",
                 "--arch", "sm_80", "--seeds", "1", "--no-pick-kinds", "--libraries", "torch",
                 "--session", str(sdir)]) == 0
    capsys.readouterr()
    rc = main(["sweep", "--session", str(sdir), "--resume", "--recorded", str(rec), "--libraries", "cublas"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc != 0 and len(err) == 1 and "--libraries" in err[0] and "torch" in err[0]
    assert main(["sweep", "--session", str(sdir), "--resume", "--recorded", str(rec)]) == 0
    assert Session.open(sdir).config["sweep"]["libraries"] == ["torch"]


@pytest.mark.compile
def test_a_sweep_scores_with_the_config_files_rewards_and_its_resume_keeps_them(capsys, tmp_path, monkeypatch):
    """The sweep's ``[rewards]`` is the config file's, kept in ``session.toml``: a resume scores with
    the session's own even under another config file, and a damaged section there is one line."""
    from l2tui.cli import main
    from l2tui.session import TOML_FILE

    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path / "cache"))
    shapes = [Shape(64, 64, 64), Shape(4096, 4096, 4096)]
    rec = recorded_file(tmp_path, shapes, ["sm80_mma"])
    doc = json.loads(rec.read_text())
    for r in doc["records"].values():   # ten times the reference error: the penalty is error_weight
        r["check"]["rel_err"] = 5e-3
    rec.write_text(json.dumps(doc))
    first, other = tmp_path / "first.toml", tmp_path / "other.toml"
    first.write_text("[rewards]\nerror_weight = 2.0\nlength_weight = 0.3\n")
    other.write_text("[rewards]\nerror_weight = 0.0\n")
    sdir = tmp_path / "s"
    common = ["--recorded", str(rec), "--steps", "0", "--families", "sm80_mma", "--arch", "sm_80", "--seeds", "1",
              "--no-pick-kinds"]
    assert main(["--config", str(first), "sweep", "--shapes", "64x64x64", *common, "--session", str(sdir)]) == 0
    assert Session.open(sdir).config["rewards"]["error_weight"] == 2.0
    assert main(["--config", str(other), "sweep", "--session", str(sdir), "--resume", "--recorded", str(rec),
                 "--shapes", "64x64x64,4096x4096x4096"]) == 0
    s = Session.open(sdir)
    assert s.config["rewards"]["error_weight"] == 2.0 and s.config["rewards"]["length_weight"] == 0.3
    rows = s.rewards()
    assert {r["track"] for r in rows} == {"64x64x64-f32", "4096x4096x4096-f32"}
    assert all(r["origin"] == "seed" and r["plan"] and "seed_lines" in r for r in rows)
    ok = [r for r in rows if r["kind"] == "ok"]
    assert {r["track"] for r in ok} == {"64x64x64-f32", "4096x4096x4096-f32"}
    assert all(r["parts"]["error_penalty"] == pytest.approx(2.0) for r in ok)
    capsys.readouterr()
    toml = sdir / TOML_FILE
    toml.write_text(toml.read_text().replace("error_weight = 2.0", 'error_weight = "heavy"'))
    rc = main(["sweep", "--session", str(sdir), "--resume", "--recorded", str(rec)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc != 0 and len(err) == 1 and "error_weight" in err[0], err
