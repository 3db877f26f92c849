"""Deriving a baselines-only result file from a run that also timed candidates."""

from __future__ import annotations

import json
from pathlib import Path

from harness import results

SMOKE = Path(__file__).resolve().parent.parent / "results" / "h200" / "harness-smoke-offline.json"


def test_subset_keeps_only_the_asked_labels_and_says_where_it_came_from(tmp_path):
    src = results.load(SMOKE)
    assert "candidate" in src.labels()
    out = tmp_path / "baselines.json"
    assert results.main(["subset", str(SMOKE), str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["meta"]["derived_from"] == str(SMOKE)
    for r in d["rows"]:
        assert set(r["times_ms"]) <= set(results.BASELINE_LABELS)
        assert "candidate" not in r["checks"] and "candidate" not in r.get("status", {})
    # the numbers are the run's own, untouched
    r0, s0 = d["rows"][0], src.rows[0]
    assert r0["times_ms"]["cublas"] == s0["times_ms"]["cublas"]
    assert (tmp_path / "baselines.csv").is_file()


def test_subset_of_a_broken_file_is_a_one_line_error(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{\"meta\": {}}")
    assert results.main(["subset", str(bad), str(tmp_path / "o.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("harness.results: error:") and "\n" not in err
