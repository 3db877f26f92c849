"""Deriving a baselines-only result file from a run that also timed candidates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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


def test_merge_joins_parts_of_one_method_and_refuses_other_methods(tmp_path):
    src = results.load(SMOKE)
    a = results.ResultFile(dict(src.meta), src.rows[:10])
    b = results.ResultFile(dict(src.meta, date="later", git_rev="abc"), src.rows[8:])
    results.save(a, tmp_path / "a.json")
    results.save(b, tmp_path / "b.json")
    assert results.main(["merge", str(tmp_path / "m.json"), str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    m = results.load(tmp_path / "m.json")
    assert len(m.rows) == len(src.rows)
    assert [p["rows"] for p in m.meta["merged_from"]] == [10, len(src.rows) - 8]
    assert "abc" in m.meta["git_rev"]
    other = results.ResultFile(dict(src.meta, mode="server"), src.rows[:2])
    results.save(other, tmp_path / "o.json")
    with pytest.raises(results.ResultFormatError, match="mode differs"):
        results.merge([("a", a), ("o", other)])


def test_a_merge_is_complete_when_earlier_runs_fill_what_a_partial_one_missed():
    """A run stopped by its time limit, merged over rows of every shape of its shape list, is
    complete; over only some of them it is still partial."""
    src = results.load(SMOKE)
    spec = [f"{r['m']}x{r['n']}x{r['k']}" for r in src.rows]
    whole = results.ResultFile(dict(src.meta, complete=True, shapes=["other.shapes"]), src.rows)
    cut = results.ResultFile(dict(src.meta, complete=False, shapes=spec, git_rev="late"), src.rows[:3])
    assert results.merge([("whole", whole), ("cut", cut)]).meta["complete"] is True
    some = results.ResultFile(dict(src.meta, complete=True, shapes=["x"]), src.rows[:2])
    assert results.merge([("some", some), ("cut", cut)]).meta["complete"] is False
