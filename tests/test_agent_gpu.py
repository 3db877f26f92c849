"""GPU: the scripted server drives the full loop on two shapes through the real Evaluator.

Run on the H200: ``pytest -m gpu tests/test_agent_gpu.py``.  The same code as
tools/record_evaluations.py (which also writes the CI recordings and the demo
session), into temporary paths.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from l2tui.session import Session

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.gpu


def _tool():
    spec = importlib.util.spec_from_file_location("record_evaluations", ROOT / "tools" / "record_evaluations.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def test_full_loop_on_two_shapes_on_the_gpu(tmp_path, scenarios, agent_cache):
    out = tmp_path / "evaluations.json"
    sess = tmp_path / "session"
    assert _tool().main(["--out", str(out), "--session-out", str(sess)]) == 0
    s = Session.open(sess)
    assert s.problems == []
    tracks = {e["track"] for e in s.events if e["type"] == "track_added"}
    assert len(tracks) == 2
    for tid in tracks:
        ev = [e for e in s.events if e.get("track") == tid]
        types = [e["type"] for e in ev]
        for needed in ("candidate", "compiled", "checked", "timed", "reward", "best", "profiling_enabled",
                       "profiled", "track_done"):
            assert needed in types, (tid, needed)
        timed = [e for e in ev if e["type"] == "timed"]
        assert all(e["times_ms"]["candidate"] > 0 and e["times_ms"]["cublas"] > 0 for e in timed)
        prof = [e for e in ev if e["type"] == "profiled"]
        assert prof[0]["in_context"] and prof[0]["metrics"]
    doc = json.loads(out.read_text())
    assert doc["meta"]["provisional"] is False and doc["records"] and doc["profiles"]
    kinds = {r["kind"] for r in s.rewards()}
    assert {"ok", "no_patch", "patch_failed", "compile_error"} <= kinds
