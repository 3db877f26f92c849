"""``l2tui sweep --executor ray`` on a real local Ray cluster (CPU only), with recorded H200
evaluations in simulated GPU actors (made-up UUIDs) and real nvcc builds as Ray tasks.

What is shown: tracks scheduled over several GPU actors, a track never split across two of
them, a killed actor's track started again on another, the session written by the driver alone
(one events.jsonl, consecutive sequence numbers), the results file naming each track's GPU, and
``--resume`` evaluating nothing again. The sm80_mma family (built for sm_80: seconds of nvcc
per configuration) keeps the builds short on a small CI machine.
"""

from __future__ import annotations

import json
import os
import time

import pytest

ray = pytest.importorskip("ray")

from harness.shapes import Shape  # noqa: E402
from l2tui.agent.sweep import RESULTS_FILE, Sweep, SweepConfig  # noqa: E402
from l2tui.session import Session  # noqa: E402
from tests.sweep_support import TIMINGS, recorded_file  # noqa: E402

pytestmark = [pytest.mark.timeout(1200), pytest.mark.compile,   # runs nvcc (tools/test.sh --fast leaves it out)
              pytest.mark.skipif(not TIMINGS.exists(), reason="H200 timings not recorded yet")]

SHAPES = [Shape(64, 64, 64), Shape(128, 128, 128), Shape(256, 256, 256)]
FAMILIES = ["sm80_mma"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One Ray cluster and one build cache for the module (its builds are paid for once)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")   # no usage report from a test run
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=200_000_000, log_to_driver=False)
    try:
        yield tmp_path_factory.mktemp("ray-build-cache")
    finally:
        ray.shutdown()


def attempts(session: Session) -> dict[str, list[list[dict]]]:
    """Per track, the events of each attempt (a re-queued track has two: each starts at track_added)."""
    out: dict[str, list[list[dict]]] = {}
    for e in session.events:
        t = e.get("track")
        if not t:
            continue
        if e["type"] == "track_added":
            out.setdefault(t, []).append([])
        if t in out:
            out[t][-1].append(e)
    return out


def gpus_of(events: list[dict]) -> set[str]:
    return {e["gpu"] for e in events if e["type"] in ("checked", "timed", "track_added", "track_done")}


def make_sweep(tmp_path, session, executor, steps=1):
    cfg = SweepConfig(shapes=SHAPES, steps=steps, width=1, seeds=2, arch="sm_80", families=FAMILIES)
    return Sweep(cfg, session=session, out_dir=session.path, progress=lambda line: None, executor=executor,
                 gpu_name="NVIDIA H200")


def test_tracks_spread_over_gpu_actors_never_split_and_a_killed_actors_track_is_requeued(cluster, tmp_path,
                                                                                           monkeypatch):
    from l2tui.executors.ray_executor import RayExecutor

    monkeypatch.setenv("L2TUI_CACHE_DIR", str(cluster))
    rec = recorded_file(tmp_path, SHAPES, FAMILIES)
    s = Session.create(tmp_path / "s", config={"sweep": {}}, gpu={"name": "NVIDIA H200"}, versions={})
    ex = RayExecutor(arch="sm_80", recorded=str(rec), simulate=3)
    slots = ex.slots()
    assert [sl.uuid for sl in slots] == ["GPU-recorded-0", "GPU-recorded-1", "GPU-recorded-2"]
    assert len({sl.info["pid"] for sl in slots}) == 3            # one actor process per GPU
    assert ex.build_width == 2                                   # a time-limited prebuild's rounds: the cluster's CPUs
    victim = slots[0]
    killed: list[str] = []
    append = s.append

    def append_and_kill(type, **payload):
        ev = append(type, **payload)
        # the victim dies after its first result reaches the log, in the middle of its track
        if type == "checked" and payload.get("gpu") == victim.uuid and not killed:
            killed.append(payload["track"])
            ray.kill(victim.actor, no_restart=True)
            end = time.monotonic() + 120     # (the kill is asynchronous: wait until the actor is gone)
            while time.monotonic() < end:
                try:
                    ray.get(victim.actor.identity.remote(), timeout=5)
                except ray.exceptions.RayActorError:
                    break
                except ray.exceptions.GetTimeoutError:
                    continue
                time.sleep(0.5)
        return ev

    s.append = append_and_kill
    try:
        out = make_sweep(tmp_path, s, ex).run()
    finally:
        ex.close()
    assert len(killed) == 1
    lost = killed[0]

    done = json.loads((s.path / RESULTS_FILE).read_text())["tracks"]
    assert set(done) == {f"{sh}-f32" for sh in SHAPES} and len(out) == len(SHAPES)
    for row in done.values():
        assert row["best_name"] and row["speedup"] and row["evaluated"] >= 2
        assert row["gpu"] == "NVIDIA H200" and row["gpu_uuid"].startswith("GPU-recorded-")
    # the lost track finished on a live GPU, after a requeued state naming the lost one
    assert done[lost]["gpu_uuid"] != victim.uuid
    req = [e for e in s.events if e["type"] == "track_state" and e.get("requeued")]
    assert all(e["state"] == "queued" and "is gone" in e["reason"] for e in req)
    assert [(e["track"], e["gpu"]) for e in req] == [(lost, victim.uuid)]
    # a track is never split: every attempt's checks and timings come from one GPU, and the
    # finished attempt's GPU is the one in the results file
    per = attempts(s)
    assert len(per[lost]) == 2
    for tid, tries in per.items():
        for evs in tries:
            assert len(gpus_of(evs)) == 1, (tid, gpus_of(evs))
        assert gpus_of(tries[-1]) == {done[tid]["gpu_uuid"]}
    # the survivors shared the work, the dead actor got nothing after its death
    assert {done[t]["gpu_uuid"] for t in done} <= {"GPU-recorded-1", "GPU-recorded-2"}
    # the driver alone wrote the session: one log, sequence numbers without gaps or repeats
    seqs = [e["seq"] for e in Session.open(s.path).events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    # real builds ran as tasks: the refinement step's new configuration was compiled by nvcc
    compiled = [e for e in s.events if e["type"] == "compiled"]
    assert all(e["ok"] for e in compiled)
    kinds = {e["kind"] for e in s.events if e["type"] == "reward"}
    assert "ok" in kinds


def test_the_command_sweeps_on_simulated_gpus_and_resume_evaluates_nothing_again(cluster, tmp_path, monkeypatch,
                                                                                  capsys):
    from l2tui.cli import main

    monkeypatch.setenv("L2TUI_CACHE_DIR", str(cluster))
    rec = recorded_file(tmp_path, SHAPES, FAMILIES)
    sdir = tmp_path / "sweep"
    shapes = [a for sh in SHAPES for a in ("--shapes", str(sh))]
    rc = main(["sweep", *shapes, "--executor", "ray", "--gpus", "2", "--recorded", str(rec), "--families", *FAMILIES,
               "--arch", "sm_80", "--steps", "1", "--width", "1", "--seeds", "2", "--session", str(sdir)])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert "2 x NVIDIA H200 (Ray)" in out.out
    assert "catalog [" in out.err                                 # the build progress bar, on stderr
    done = json.loads((sdir / RESULTS_FILE).read_text())["tracks"]
    assert len(done) == len(SHAPES)
    assert {r["gpu_uuid"] for r in done.values()} <= {"GPU-recorded-0", "GPU-recorded-1"}
    s = Session.open(sdir)
    assert s.gpu.get("executor") == "ray" and s.gpu.get("count") == 2
    n_candidates = sum(1 for e in s.events if e["type"] == "candidate")
    assert n_candidates >= len(SHAPES) * 2
    for tries in attempts(s).values():
        assert len(tries) == 1 and len(gpus_of(tries[0])) == 1
    (run,) = json.loads((sdir / RESULTS_FILE).read_text())["runs"]     # this run's times
    cat = run["catalog"]
    assert run["ended"] == "sweep done" and run["tracks"] == len(SHAPES) and run["wall_s"] > 0
    assert cat["compiled"] + cat["cached"] == cat["configs"] > 0 and cat["not_started"] == 0
    assert f"{len(SHAPES)} tracks" in out.out and "time: " in out.out

    rc = main(["sweep", "--session", str(sdir), "--resume", "--executor", "ray", "--gpus", "2",
               "--recorded", str(rec)])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert f"{len(SHAPES)} of {len(SHAPES)} tracks already done" in out.out
    runs = json.loads((sdir / RESULTS_FILE).read_text())["runs"]
    assert len(runs) == 2 and runs[1]["tracks"] == 0 and runs[1]["catalog"]["compiled"] == 0
    assert "the session's 2 runs" in out.out
    assert sum(1 for e in Session.open(sdir).events if e["type"] == "candidate") == n_candidates
    assert ray.is_initialized()
