"""tools/probes: the latency probe builds with real nvcc and exports what its driver calls."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_latency_probe_builds_for_sm90a_and_exports_its_entry_points(tmp_path):
    so = tmp_path / "latency_floor.so"
    p = subprocess.run(["nvcc", "-O3", "-shared", "-Xcompiler", "-fPIC", "-gencode=arch=compute_90a,code=sm_90a",
                        str(ROOT / "tools" / "probes" / "latency_floor.cu"), "-o", str(so)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-2000:]
    syms = subprocess.run(["nm", "-D", "--defined-only", str(so)], capture_output=True, text=True).stdout
    assert "probe_launch" in syms and "tiny64_launch" in syms
    driver = (ROOT / "tools" / "probes" / "latency_floor.py").read_text()
    assert "lib.probe_launch" in driver and "lib.tiny64_launch" in driver


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_launch_cost_probe_builds_and_says_in_one_line_when_there_is_no_gpu(tmp_path, capsys):
    """The per-call launch-cost probe: its driver builds it with real nvcc; on a machine without a
    GPU the probe's first CUDA call fails and the driver says so in one line and writes nothing."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("launch_cost", ROOT / "tools" / "probes" / "launch_cost.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    from harness.gpuinfo import gpu_present

    if gpu_present():
        pytest.skip("a GPU is present: this test is about a machine without one")
    out = tmp_path / "lc.json"
    rc = mod.main(["--out", str(out), "--reps", "2", "--rounds", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and not out.exists()
    assert len(err) == 1 and err[0].startswith("launch_cost: ") and "nvcc build failed" not in err[0]
