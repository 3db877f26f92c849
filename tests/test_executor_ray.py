"""The Ray executor on a real local Ray cluster (CPU only): nvcc builds as remote tasks, the
libraries written into the driver's build cache and shipped to a GPU actor whose cache is not
the driver's, evaluations on that actor (recorded evaluations: no GPU here).

Real parts: Ray 2.x started in this process (``num_cpus=2``, a 200 MB object store, no
dashboard), real nvcc builds of two small sm_80 sources (seconds each), the project's
RecordedEvaluator inside the actor.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from harness.families import catalog  # noqa: E402
from harness.shapes import Shape  # noqa: E402
from tests.sweep_support import recorded_file  # noqa: E402

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def ray_cluster():
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")   # no usage report from a test run
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=200_000_000, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


def small_sources() -> list[str]:
    """Two quick builds (sm80_mma, fp16 accumulate: ~3 s of nvcc each)."""
    return [c.source() for c in catalog("f16", "sm_80") if c.family == "sm80_mma"][:2]


def test_an_address_with_no_cluster_is_one_line(tmp_path, monkeypatch, capsys):
    """No Ray cluster at the given address: one line that says what to do (no traceback)."""
    from l2tui.cli import main

    if ray.is_initialized():
        pytest.skip("a cluster is running in this process")
    rec = recorded_file(tmp_path, [Shape(64, 64, 64)], ["sm80_mma"])
    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path / "cache"))
    rc = main(["sweep", "--executor", "ray", "--ray-address", "127.0.0.1:1", "--recorded", str(rec),
               "--shapes", "64x64x64", "--arch", "sm_80", "--session", str(tmp_path / "s")])
    assert rc != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot reach a Ray cluster at 127.0.0.1:1" in err[0] and "ray start --head" in err[0]
    assert not (tmp_path / "s").exists()
    assert not ray.is_initialized()


@pytest.mark.compile
def test_builds_run_as_tasks_land_in_the_drivers_cache_and_reach_the_actor(ray_cluster, tmp_path, monkeypatch):
    from l2tui.executors.ray_executor import RayExecutor

    driver_cache = tmp_path / "driver-cache"
    monkeypatch.setenv("L2TUI_CACHE_DIR", str(driver_cache))
    shape = Shape(64, 64, 64)
    srcs = small_sources()
    # a recording with one of the two kernels on this shape (the other stays unrecorded)
    rec = tmp_path / "rec.json"
    from l2tui.agent.recorded import record_key

    rec.write_text(json.dumps({"meta": {"gpu": {"name": "NVIDIA H200", "uuid": "GPU-x"}}, "records": {
        record_key(srcs[0], shape, "f16"): {"status": "ok", "build": None, "check": {"ok": True},
                                            "times_ms": {"candidate": 0.01, "cublaslt_autotune": 0.012},
                                            "spread": {}, "roofline_ms": None, "message": "ok"}}}))
    bad = srcs[1].replace("l2_hgemm(", "l2_hgemm(undeclared_thing, ", 1)
    ex = RayExecutor(arch="sm_80", recorded=str(rec), simulate=1, actor_cache_dir=str(tmp_path / "actor-cache"))
    try:
        seen = []
        res = ex.build_many([srcs[0], srcs[1], srcs[0], bad], arch="sm_80", progress=lambda d, t, r: seen.append((d, t)))
        assert [r.ok for r in res] == [True, True, True, False]
        assert res[0] is res[2] or res[0].key == res[2].key           # identical sources built once
        assert seen[-1] == (3, 3)
        assert all(not r.cached and r.seconds > 0 for r in res[:2])   # compiled now, by nvcc
        assert any("undeclared_thing" in e.message or e.line for e in res[3].errors)
        for r in res[:2]:   # in the driver's cache, where a later local build finds them
            assert r.so_path is not None and Path(r.so_path).is_file()
            assert str(driver_cache) in str(r.so_path)
        from harness.build import build

        assert build(srcs[0], arch="sm_80").cached
        again = ex.build_many(srcs, arch="sm_80")
        assert all(r.cached for r in again)                           # no task: the driver's cache answered
        fresh = srcs[1] + "\n// not built yet\n"
        late = ex.build_many([fresh, srcs[0]], arch="sm_80", deadline=time.monotonic())
        assert late[0] is None and late[1].cached                     # no task after the deadline; hits answered

        (slot,) = ex.slots()
        assert slot.uuid == "GPU-recorded-0" and slot.ship              # its cache is not the driver's: shipped
        assert slot.info["cache_dir"] == str(tmp_path / "actor-cache")
        assert slot.info["pid"] != os.getpid()
        ev = slot.evaluate(srcs[0], shape, "f16")
        assert ev.status == "ok" and ev.times_ms["candidate"] == 0.01
        assert ev.build.cached                                          # the actor ran no nvcc: shipped library
        assert str(tmp_path / "actor-cache") in str(ev.build.so_path)
        many = slot.evaluate_many([("a", srcs[0], ()), ("b", srcs[1], ())], shape, "f16")
        assert many["a"].status == "ok" and many["b"].status == "not_recorded"
        assert many["b"].build.cached
    finally:
        ex.close()
    assert ray.is_initialized()   # the executor did not start this cluster, so it leaves it running
