"""tools/pick_vs_bench.py: bench/pick ratios per winner family and close runners-up."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _tool():
    spec = importlib.util.spec_from_file_location("pick_vs_bench", ROOT / "tools" / "pick_vs_bench.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


PICK = {"timings": [
    {"shape": [64, 64, 64], "winner": "tiny-a", "times_ms": {"tiny-a": 2.0, "sm90-b": 2.01, "cublaslt_autotune": 4.0}},
    {"shape": [128, 64, 64], "winner": "sm90-b", "times_ms": {"sm90-b": 1.0, "tiny-a": 1.2, "torch": 1.001}},
    {"shape": [256, 64, 64], "winner": "sm90-b", "times_ms": {"sm90-b": 1.0}},   # not in the bench
]}
BENCH = {"rows": [
    {"m": 64, "n": 64, "k": 64, "times_ms": {"l2": 1.8, "cublaslt_autotune": 3.0}},
    {"m": 128, "n": 64, "k": 64, "times_ms": {"l2": 1.1, "cublaslt_autotune": 2.0}},
]}


def test_ratios_per_family_and_runner_up_gaps():
    out = _tool().compare(PICK, BENCH)
    assert out["shapes"] == 2
    assert out["families"]["tiny"]["geomean"] == pytest.approx(0.9)
    assert out["families"]["sm90"]["geomean"] == pytest.approx(1.1)
    assert out["baseline"] == {"name": "cublaslt_autotune", "shapes": 1, "geomean": pytest.approx(0.75)}
    # 64x64x64: runner-up 0.5 % behind; 128x64x64: 20 % (torch is a baseline, not a runner-up)
    assert out["runner_up_within"] == {"1%": 1, "2%": 1, "5%": 1, "10%": 1}
    assert out["ratio_range"] == [pytest.approx(0.9), pytest.approx(1.1)]


def test_cli_prints_and_bad_input_is_one_line(tmp_path, capsys):
    (tmp_path / "p.json").write_text(json.dumps(PICK))
    (tmp_path / "b.json").write_text(json.dumps(BENCH))
    assert _tool().main([str(tmp_path / "p.json"), str(tmp_path / "b.json")]) == 0
    assert "2 shapes" in capsys.readouterr().out
    assert _tool().main([str(tmp_path / "p.json"), str(tmp_path / "b.json"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["shapes"] == 2
    (tmp_path / "torn.json").write_text("{")
    with pytest.raises(SystemExit, match="cannot read"):
        _tool().main([str(tmp_path / "torn.json"), str(tmp_path / "b.json")])
    with pytest.raises(SystemExit, match="no shape"):
        _tool().main([str(tmp_path / "p.json"), str(tmp_path / "b.json"), "--label", "other"])
    assert math.isnan(_tool().compare({"timings": []}, BENCH)["half_range"])
