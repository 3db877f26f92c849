"""GPU: ``l2tui bench`` with two kernel sets in one run (run with ``pytest -m gpu``).

Two candidate sets share every timing round with the baselines, each with its own checks: a
good kernel and an adversarial one side by side, and a shape only one set has.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from harness.testkernels import source as kernel_source

pytestmark = pytest.mark.gpu


def test_two_kernel_sets_are_checked_and_timed_side_by_side(tmp_path):
    from harness.gpuinfo import gpu_present

    if not gpu_present():
        pytest.skip("no GPU")
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.mkdir()
    bad.mkdir()
    simple = kernel_source("testgood_simple")
    (good / "64_64_64.cu").write_text(simple)
    (good / "200_136_264.cu").write_text(simple)
    (bad / "200_136_264.cu").write_text(kernel_source("testbad_skiplastrow"))
    out = tmp_path / "r.json"
    p = subprocess.run([sys.executable, "-m", "l2tui.cli", "bench", "--kernels", str(good), "--label", "incumbent",
                        "--kernels", str(bad), "--label", "challenger", "--baselines", "cublas", "--out", str(out)],
                       capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["meta"]["candidates"] == {"incumbent": str(good), "challenger": str(bad)}
    rows = {(r["m"], r["n"], r["k"]): r for r in doc["rows"]}
    assert sorted(rows) == [(64, 64, 64), (200, 136, 264)]
    for shape, row in rows.items():
        assert row["status"]["incumbent"] == "ok" and row["times_ms"]["incumbent"] > 0, (shape, row["status"])
        assert row["status"]["cublas"] == "ok" and row["times_ms"]["cublas"] > 0
    assert rows[(64, 64, 64)]["status"]["challenger"] == "absent"
    odd = rows[(200, 136, 264)]
    assert odd["status"]["challenger"] == "wrong"
    assert odd["checks"]["challenger"]["failed"] == "written", odd["checks"]["challenger"]


def test_a_shapes_files_roles_name_the_rows_and_the_csv(tmp_path):
    """A model's shapes file (roles in its comments) through the real bench: each row and the
    CSV's ``role`` column name the GEMM."""
    import csv

    from harness.gpuinfo import gpu_present

    if not gpu_present():
        pytest.skip("no GPU")
    spec = tmp_path / "decode.txt"
    spec.write_text("16,6144,4096   # llama-3-8b qkv t16\n16x4096x4096  # llama-3-8b o t16\n")
    out = tmp_path / "r.json"
    p = subprocess.run([sys.executable, "-m", "l2tui.cli", "bench", "--shapes", str(spec), "--baselines", "cublas",
                        "--out", str(out)], capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert p.returncode == 0, p.stderr[-2000:]
    rows = {(r["m"], r["n"], r["k"]): r.get("role") for r in json.loads(out.read_text())["rows"]}
    assert rows == {(16, 6144, 4096): "llama-3-8b qkv t16", (16, 4096, 4096): "llama-3-8b o t16"}
    table = list(csv.DictReader(out.with_suffix(".csv").open()))
    assert sorted(r["role"] for r in table) == ["llama-3-8b o t16", "llama-3-8b qkv t16"]
