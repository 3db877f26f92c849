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
