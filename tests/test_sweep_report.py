"""``python -m harness.report``: summary tables from bench result files (issue 5)."""

from __future__ import annotations

import json
import math

from harness import report
from harness.results import ResultFile


def result_file(rows):
    meta = {"gpu": "NVIDIA H200", "driver": "580.159.04", "cuda": "13.0", "nvcc": "13.0.88", "date": "2026-11-29",
            "git_rev": "abc", "mode": "offline", "acc": "f32", "method": "graph"}
    return ResultFile(meta, [{"m": m, "n": n, "k": k, "times_ms": t, "roofline_ms": roof, "checks": {}}
                             for (m, n, k), t, roof in rows])


def test_summary_numbers_per_baseline_and_size_class():
    rf = result_file([
        ((64, 64, 64), {"l2": 0.002, "cublaslt_autotune": 0.004, "torch": 0.0025}, 0.001),     # small
        ((2048, 2048, 2048), {"l2": 0.030, "cublaslt_autotune": 0.027, "torch": 0.026}, 0.02),  # mid
        ((8192, 8192, 8192), {"l2": 1.5, "cublaslt_autotune": 1.44, "torch": 1.5}, 1.3),          # big
    ])
    s = report.summarize(rf, "l2")
    lt = s["baselines"]["cublaslt_autotune"]
    assert lt["n"] == 3 and lt["wins"] == 1
    assert math.isclose(lt["geomean"], (2.0 * 0.9 * 0.96) ** (1 / 3))
    assert math.isclose(s["baselines"]["best"]["geomean"], (1.25 * 26 / 30 * 1.44 / 1.5) ** (1 / 3))
    assert s["classes"]["small"]["vs_target"] == 2.0 and s["classes"]["small"]["roofline"] == 0.5
    assert s["classes"]["big"]["n"] == 1


def test_markdown_and_cli(tmp_path, capsys):
    rf = result_file([((64, 64, 64), {"l2": 0.002, "cublaslt_autotune": 0.004}, None),
                      ((128, 128, 128), {"l2": None, "cublaslt_autotune": 0.004}, None)])
    p = tmp_path / "kernels-offline.json"
    p.write_text(json.dumps(rf.to_dict()))
    out = tmp_path / "README.md"
    assert report.main([str(p), "-o", str(out)]) == 0
    text = out.read_text()
    assert "| cublaslt_autotune | 2.000x | 100% | 1 |" in text
    assert "(1 without a time)" in text
    assert "| small | 2 | 2.000x |" in text
    assert report.main([str(p)]) == 0
    assert capsys.readouterr().out == text   # deterministic


def test_regimes_split_equal_flops_by_tiles_and_k():
    """16384x16384x256 (many tiles, short K) and 2048x2048x16384 (few tiles per SM, long K) have
    the same flops and land in different regime rows."""
    from harness.shapes import Shape

    assert report.regime(Shape(64, 64, 16384)) == "< 33 tiles, K > 1024"
    assert report.regime(Shape(1024, 1024, 4096)) == "33-131 tiles, K > 1024"
    assert report.regime(Shape(1024, 4096, 1024)) == "132+ tiles, K <= 1024"
    assert report.regime(Shape(16384, 16384, 256)) != report.regime(Shape(2048, 2048, 16384))
    rf = result_file([
        ((64, 64, 16384), {"l2": 0.004, "cublaslt_autotune": 0.006}, 0.001),
        ((128, 64, 8192), {"l2": 0.004, "cublaslt_autotune": 0.003}, 0.001),
        ((1024, 1024, 4096), {"l2": 0.017, "cublaslt_autotune": 0.0136}, 0.009),
    ])
    s = report.summarize(rf, "l2")
    few = s["regimes"]["< 33 tiles, K > 1024"]
    assert few["n"] == 2 and few["wins"] == 1 and math.isclose(few["vs_target"], (1.5 * 0.75) ** 0.5)
    assert math.isclose(s["regimes"]["33-131 tiles, K > 1024"]["vs_target"], 0.8)
    assert "132+ tiles, K <= 1024" not in s["regimes"]      # no shape there: no row
    text = report.markdown([("x.json", rf)])
    assert "| 33-131 tiles, K > 1024 | 1 | 0.800x | 0% |" in text
