"""Recorded-evaluation files are read as bounded, checked data (issue 51): one line, no traceback."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from l2tui.agent.recorded import MAX_RECORDING_BYTES, RecordedEvaluator, RecordingEvaluator, load_recording
from l2tui.errors import UserError

FIXTURE = Path(__file__).parent / "fixtures" / "recorded" / "evaluations.json"
SHA = "ab" * 32


def _record(**over: object) -> dict:
    rec = {"status": "ok", "build": None, "check": {"ok": True, "failed": None}, "times_ms": {"candidate": 0.02},
           "spread": {"candidate": 0.01}, "roofline_ms": 0.001, "message": "ok", "extra": {"label": "candidate"}}
    rec.update(over)
    return rec


def _write(tmp_path: Path, doc: object) -> Path:
    p = tmp_path / "evaluations.json"
    p.write_text(json.dumps(doc))
    return p


def _refused(path: Path) -> str:
    with pytest.raises(UserError) as ei:
        RecordedEvaluator(path, arch="sm_90a", build=False)
    line = str(ei.value)
    assert line.startswith(f"cannot read recorded evaluations {path}:") and "\n" not in line
    return line


def test_the_committed_recordings_still_load():
    for p in (FIXTURE, Path(__file__).parent.parent / "sessions" / "demo-h200" / "evaluations.json"):
        assert load_recording(p)["records"]


def test_a_huge_file_is_refused_before_it_is_read(tmp_path):
    p = tmp_path / "evaluations.json"
    with open(p, "wb") as f:
        f.truncate(MAX_RECORDING_BYTES + 1)          # sparse: no disk, but its size says it all
    assert "more than the limit" in _refused(p)


@pytest.mark.parametrize("doc, match", [
    ("{not json", "not JSON"),
    ([1, 2], "expected an object"),
    ({"records": {f"{SHA}:64x64x64:f32": _record(times_ms={"candidate": "fast"})}}, "times_ms.candidate"),
    ({"records": {f"{SHA}:64x64x64:f32": _record(times_ms={"candidate": -3.0})}}, "times_ms.candidate"),
    ({"records": {f"{SHA}:64x64x64:f32": _record(status=["ok"])}}, ".status"),
    ({"records": {f"{SHA}:64x64x64:f32": _record(build={"ok": True, "key": SHA, "ptxas": {"evil": 1}})}},
     "unexpected key 'evil'"),
    ({"records": {f"{SHA}:64x64x64:f32": _record(message="x" * 100_000)}}, "more than"),
    ({"records": {f"{SHA}:64x64x64:f32": _record(build={"ok": True, "key": "../../cache-escape"})}}, "build.key"),
    ({"meta": {"arch": "sm_90a -Xcompiler -fplugin=/tmp/x.so"}}, "meta.arch"),
    ({"aliases": {SHA: "../../etc/passwd"}}, "aliases"),
    ({"profiles": {"k": [[[[[[[[[[[1]]]]]]]]]]]}}, "nested deeper"),
])
def test_a_malformed_recording_is_one_line_naming_the_field(tmp_path, doc, match):
    p = tmp_path / "evaluations.json"
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    assert match in _refused(p)


def test_a_time_of_infinity_is_refused(tmp_path):
    p = _write(tmp_path, {"records": {f"{SHA}:64x64x64:f32": _record(times_ms={"candidate": math.inf})}})
    assert "expected a finite number" in _refused(p)


def test_a_recorder_refuses_a_malformed_existing_file_too(tmp_path):
    p = _write(tmp_path, {"records": {"k": {"status": 3}}})
    with pytest.raises(UserError, match="records.k.status"):
        RecordingEvaluator(RecordedEvaluator(FIXTURE, build=False), existing=p)


def test_the_command_line_prints_one_line_for_a_malformed_recording(tmp_path):
    p = _write(tmp_path, {"records": {"k": {"status": "ok", "times_ms": {"candidate": "x"}}}})
    out = subprocess.run([sys.executable, "-m", "l2tui", "run", "--headless", "--recorded", str(p), "--shapes",
                          "64x64x64", "--session", str(tmp_path / "s"), "--policy", "search", "--max-steps", "1"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode != 0
    assert "Traceback" not in out.stderr, out.stderr
    lines = [ln for ln in out.stderr.splitlines() if "cannot read recorded evaluations" in ln]
    assert len(lines) == 1 and "times_ms.candidate" in lines[0], out.stderr
