"""``l2tui doctor`` without a GPU: every line found/missing, with a fix for what is missing."""

from __future__ import annotations

import json
import subprocess
import sys

from harness.doctor import format_checks, run_checks


def test_doctor_reports_each_component():
    checks = run_checks()
    names = [c.name for c in checks]
    for want in ("GPU", "nvcc", "CUTLASS headers", "ncu (Nsight Compute)", "NVML (pynvml)", "cupy", "torch"):
        assert want in names
    by = {c.name: c for c in checks}
    assert by["nvcc"].ok and by["CUTLASS headers"].ok
    for c in checks:
        if not c.ok:
            assert c.fix, f"{c.name} is missing but has no fix"
    text = format_checks(checks)
    assert len(text.splitlines()) == len(checks)


def test_doctor_cli_without_gpu_exits_zero_and_says_no_gpu():
    out = subprocess.run([sys.executable, "-m", "l2tui", "doctor"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    from harness.gpuinfo import gpu_present

    if not gpu_present():
        assert "no NVIDIA GPU found" in out.stdout
    js = subprocess.run([sys.executable, "-m", "harness", "doctor", "--json"], capture_output=True, text=True, timeout=120)
    rows = json.loads(js.stdout)
    assert {r["name"] for r in rows} >= {"GPU", "nvcc"}


def test_l2tui_doctor_also_checks_the_llm_client():
    """The harness's checks plus the openai package the llm policy calls its endpoint through."""
    out = subprocess.run([sys.executable, "-m", "l2tui", "doctor", "--json"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    rows = {r["name"]: r for r in json.loads(out.stdout)}
    assert rows["openai"]["ok"] and rows["nvcc"]["ok"] and "torch" in rows
