"""``l2tui sweep --executor ray --ray-address`` against a cluster started the documented way,
``ray start --head`` in its own process (CPU only, 2 CPUs, a 200 MB object store), with recorded
H200 evaluations in one simulated GPU actor and real nvcc builds as tasks of that cluster.

The head runs in a process group of its own, which the test ends (by its id) at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

pytest.importorskip("ray")

from harness.shapes import Shape  # noqa: E402
from tests.sweep_support import H200_UUID, TIMINGS, recorded_file  # noqa: E402

pytestmark = [pytest.mark.timeout(900), pytest.mark.compile,   # runs nvcc (tools/test.sh --fast leaves it out)
              pytest.mark.skipif(not TIMINGS.exists(), reason="H200 timings not recorded yet")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, timeout_s: float) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2):
                return True
        except OSError:
            time.sleep(1)
    return False


@pytest.fixture
def ray_head(tmp_path):
    port = _free_port()
    ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    tmp = f"/tmp/l2tui-ray-{os.getpid()}"          # (Ray's socket paths must stay short)
    log = open(tmp_path / "ray-head.log", "w")
    head = subprocess.Popen([ray_bin, "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
                             "--object-store-memory=200000000", "--include-dashboard=false",
                             "--disable-usage-stats", f"--temp-dir={tmp}"],
                            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        if not _wait_port(port, 180):
            pytest.fail(f"ray start --head did not listen on {port}: {(tmp_path / 'ray-head.log').read_text()[-2000:]}")
        yield f"127.0.0.1:{port}"
    finally:
        for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 10)):   # (--block takes long over SIGTERM)
            try:
                os.killpg(head.pid, sig)
            except ProcessLookupError:
                break
            try:
                head.wait(timeout=wait)
                if sig == signal.SIGKILL:
                    break
            except subprocess.TimeoutExpired:
                continue
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


def test_a_sweep_joins_a_running_cluster_by_address_and_resumes(ray_head, tmp_path):
    shape = Shape(64, 64, 64)
    rec = recorded_file(tmp_path, [shape], ["sm80_mma"])
    sdir = tmp_path / "sweep"
    # a cluster that `ray start` made checks a token (ray start says so): the driver sends it
    env = dict(os.environ, L2TUI_CACHE_DIR=str(tmp_path / "cache"), RAY_AUTH_MODE="token",
               RAY_USAGE_STATS_ENABLED="0")
    argv = [sys.executable, "-m", "l2tui.cli", "sweep", "--executor", "ray", "--ray-address", ray_head,
            "--recorded", str(rec), "--gpus", "1", "--families", "sm80_mma", "--arch", "sm_80", "--steps", "0",
            "--seeds", "2", "--shapes", str(shape), "--session", str(sdir)]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-2000:])
    assert "1 x NVIDIA H200 (Ray)" in p.stdout
    row = json.loads((sdir / "sweep.json").read_text())["tracks"]["64x64x64-f32"]
    assert row["gpu_uuid"] == "GPU-recorded-0" and row["best_name"].startswith("sm80-") and row["speedup"]
    assert row["gpu_uuid"] != H200_UUID          # the actor's own (simulated) GPU, not the recording's label
    # what the pick named was built by the cluster's tasks into this driver's cache
    builds = list((tmp_path / "cache" / "builds").glob("*/*/kernel.so"))
    (run,) = json.loads((sdir / "sweep.json").read_text())["runs"]
    assert run["catalog"]["compiled"] == run["catalog"]["configs"] == len(builds) == row["picked"] >= 2
    p = subprocess.run(argv[:-2] + ["--session", str(sdir), "--resume"], capture_output=True, text=True,
                       timeout=600, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "1 of 1 tracks already done" in p.stdout
