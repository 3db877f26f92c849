"""tools/merge_picks.py: a re-pick overrides the base shape by shape and nothing else is lost."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _tool():
    spec = importlib.util.spec_from_file_location("merge_picks", ROOT / "tools" / "merge_picks.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _row(shape, winner, t):
    return {"shape": list(shape), "times_ms": {winner: t}, "winner": winner}


def test_later_pick_wins_per_shape_and_order_is_kept(tmp_path):
    base = {"mode": "pick", "hung": ["a@x"], "configs": {"a": {"family": "f"}, "b": {"family": "f"}},
            "timings": [_row((1, 1, 1), "a", 1.0), _row((2, 2, 2), "a", 2.0), _row((3, 3, 3), "b", 3.0)]}
    new = {"mode": "pick", "hung": [], "configs": {"c": {"family": "g"}},
           "timings": [_row((2, 2, 2), "c", 1.5)]}
    (tmp_path / "base.json").write_text(json.dumps(base))
    (tmp_path / "new.json").write_text(json.dumps(new))
    out = tmp_path / "out.json"
    assert _tool().main([str(tmp_path / "base.json"), str(tmp_path / "new.json"), "--out", str(out),
                         "--note", "n", "--part", "p1", "--part", "p2"]) == 0
    doc = json.loads(out.read_text())
    assert [r["shape"] for r in doc["timings"]] == [[1, 1, 1], [2, 2, 2], [3, 3, 3]]
    assert [r["winner"] for r in doc["timings"]] == ["a", "c", "b"]
    assert set(doc["configs"]) == {"a", "b", "c"}
    assert doc["hung"] == ["a@x"] and doc["note"] == "n" and doc["parts"] == ["p1", "p2"]


def test_configs_no_longer_named_by_any_row_are_dropped():
    base = {"timings": [_row((1, 1, 1), "old", 1.0)], "configs": {"old": {}}}
    new = {"timings": [_row((1, 1, 1), "new", 0.5)], "configs": {"new": {}}}
    assert set(_tool().merge([base, new])["configs"]) == {"new"}


def test_earlier_notes_are_kept_as_history(tmp_path):
    first = {"timings": [_row((1, 1, 1), "a", 1.0)], "configs": {"a": {}}, "note": "first pick", "parts": ["p0"]}
    new = {"timings": [_row((1, 1, 1), "b", 0.5)], "configs": {"b": {}}}
    (tmp_path / "first.json").write_text(json.dumps(first))
    (tmp_path / "new.json").write_text(json.dumps(new))
    out = tmp_path / "out.json"
    assert _tool().main([str(tmp_path / "first.json"), str(tmp_path / "new.json"), "--out", str(out),
                         "--note", "second", "--part", "p1"]) == 0
    doc = json.loads(out.read_text())
    assert doc["note"] == "second" and doc["history"] == [{"note": "first pick", "parts": ["p0"]}]
    # a third merge keeps both earlier notes, oldest first, once each
    (tmp_path / "new2.json").write_text(json.dumps({"timings": [], "configs": {}}))
    assert _tool().main([str(out), str(tmp_path / "new2.json"), "--out", str(out), "--note", "third"]) == 0
    doc = json.loads(out.read_text())
    assert [h["note"] for h in doc["history"]] == ["first pick", "second"] and doc["note"] == "third"
