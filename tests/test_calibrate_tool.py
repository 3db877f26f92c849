"""tools/calibrate_costmodel.py: one-line errors on bad input, and a dry run that writes nothing."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _tool():
    spec = importlib.util.spec_from_file_location("calibrate_costmodel", ROOT / "tools" / "calibrate_costmodel.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_missing_and_empty_timings_are_one_line_errors(tmp_path):
    with pytest.raises(SystemExit, match="cannot read the timings"):
        _tool().main([str(tmp_path / "missing.json")])
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"mode": "pick", "timings": [], "configs": {}}))
    with pytest.raises(SystemExit, match="no timings in"):
        _tool().main([str(empty)])


def test_dry_run_leaves_the_calibration_file_alone(capsys):
    tool = _tool()
    before = tool.CALIBRATED_FILE.read_text()
    fixture = ROOT / "tests" / "fixtures" / "h200_timings" / "swizzle_pairs.json"
    assert tool.main([str(fixture), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "fitted:" in out and "current:" in out and "dry run: nothing written" in out
    assert tool.CALIBRATED_FILE.read_text() == before
