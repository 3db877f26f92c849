"""tools/fresh_calibration.py: bands and headroom from a bench file's recorded fresh-input timings."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

import fresh_calibration as fc  # noqa: E402
from harness import checks as ck  # noqa: E402


def _row(m: int, timed_us: float, fresh_us: float, ok: bool = True) -> dict:
    fresh = {"ok": ok, "detail": "", "timed_ms": timed_us / 1e3, "fresh_ms": fresh_us / 1e3, "perturb_ms": 0.0015}
    return {"m": m, "n": 64, "k": 64, "times_ms": {"l2": timed_us / 1e3},
            "checks": {"l2": {"ok": ok, "checks": {"fresh": fresh}}}}


def _bench() -> dict:
    return {"meta": {"gpu": "NVIDIA H200", "git_rev": "abc1234"},
            "rows": [_row(64, 2.0, 3.5), _row(128, 2.5, 3.0), _row(256, 100.0, 110.0),
                     {"m": 512, "n": 64, "k": 64, "checks": {"l2": {"ok": False, "checks": {}}}}]}


def test_samples_skip_rows_without_fresh_timing_and_compute_headroom():
    rows = fc.samples(_bench())
    assert [r["m"] for r in rows] == [64, 128, 256]
    r = rows[0]
    assert r["ratio"] == pytest.approx(1.75)
    assert r["extra_us"] == pytest.approx(1.5)
    allowed = ck.FRESH_RATIO * 0.002 + ck.FRESH_SLACK_MS
    assert r["headroom"] == pytest.approx((allowed - 0.0035) / allowed)


def test_bands_group_by_timed_call_time():
    b = fc.bands(fc.samples(_bench()))
    assert [x["band_us"] for x in b] == [(0, 3), (50, 200)]
    assert b[0]["n"] == 2 and b[0]["ratio_min"] == pytest.approx(1.2) and b[0]["ratio_max"] == pytest.approx(1.75)
    assert b[1]["extra_us_max"] == pytest.approx(10.0)
    assert b[0]["headroom_min"] == min(r["headroom"] for r in fc.samples(_bench())[:2])


def test_main_prints_bands_and_writes_csv(tmp_path, capsys):
    p = tmp_path / "bench.json"
    p.write_text(json.dumps(_bench()))
    out_csv = tmp_path / "cal.csv"
    assert fc.main([str(p), "--csv", str(out_csv)]) == 0
    text = capsys.readouterr().out
    assert "3 shapes" in text and "git abc1234" in text and "failed 0" in text
    lines = out_csv.read_text().splitlines()
    assert lines[0].startswith("m,n,k,timed_ms,fresh_ms") and len(lines) == 4


def test_main_errors_on_unreadable_or_empty(tmp_path, capsys):
    assert fc.main([str(tmp_path / "missing.json")]) == 2
    p = tmp_path / "empty.json"
    p.write_text(json.dumps({"meta": {}, "rows": []}))
    assert fc.main([str(p)]) == 1
    assert "no 'same' fresh-input timings" in capsys.readouterr().err


def test_the_same_rounds_reference_is_preferred_when_recorded():
    row = _row(64, 2.0, 3.0)
    row["checks"]["l2"]["checks"]["fresh"]["same_ms"] = 0.0025
    r = fc.samples({"rows": [row]})[0]
    assert r["timed_ms"] == 0.0025 and r["ratio"] == pytest.approx(1.2)


def test_the_dense_part_is_read_from_its_own_fields(tmp_path, capsys):
    """--part dense: part (3)'s call after a dense change against the call after a one-element change."""
    row = _row(64, 2.0, 3.0)
    row["checks"]["l2"]["checks"]["fresh"].update(one_ms=0.004, dense_ms=0.005)
    other = _row(128, 2.0, 3.0)                      # recorded before part (3) existed: not a sample of it
    r = fc.samples({"rows": [row, other]}, part="dense")
    assert [x["m"] for x in r] == [64]
    assert r[0]["timed_ms"] == 0.004 and r[0]["fresh_ms"] == 0.005 and r[0]["ratio"] == pytest.approx(1.25)
    p = tmp_path / "bench.json"
    p.write_text(json.dumps({"meta": {}, "rows": [row, other]}))
    assert fc.main([str(p), "--part", "dense"]) == 0
    assert "1 shapes" in capsys.readouterr().out
