"""A recording outlives a template text change that keeps the code: aliases, checked by nvcc -E
or, where the translation units differ, by the device code nvcc emits.

The recording and its session are made here from a real catalog configuration; the translation
units come from the real nvcc (``tiny_mma``: no CUTLASS headers, under a second each).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from harness.build import translation_unit
from harness.families import catalog
from harness.shapes import Shape
from l2tui.agent.recorded import NOT_RECORDED, RecordedEvaluator, record_key
from l2tui.session import sha256_text as sha

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import alias_recording  # noqa: E402

pytestmark = pytest.mark.compile   # runs nvcc (tools/test.sh --fast leaves it out)

SHAPE = Shape(64, 64, 64)


def record(ms: float) -> dict:
    return {"status": "ok", "build": None, "check": {"ok": True}, "times_ms": {"candidate": ms}, "spread": {},
            "roofline_ms": None, "message": f"ok: {ms} ms"}


def today() -> str:
    return next(c for c in catalog("f32", "sm_90a") if c.family == "tiny_mma").source()


def test_a_lookup_tries_the_sources_own_key_then_its_alias(tmp_path):
    old, new, other = "// an old comment\n" + today(), today(), today() + "\n__device__ int l2_other_symbol;\n"
    p = tmp_path / "rec.json"
    p.write_text(json.dumps({"meta": {}, "records": {record_key(old, SHAPE, "f32"): record(0.01)},
                             "profiles": {record_key(old, SHAPE, "f32"): {"verdict": "launch-bound"}},
                             "aliases": {sha(new): sha(old)}}))
    ev = RecordedEvaluator(p, arch="sm_90a", build=False)
    got = ev.evaluate(new, SHAPE)
    assert got.status == "ok" and got.times_ms["candidate"] == 0.01
    assert ev.profile(new, SHAPE) == {"verdict": "launch-bound"}
    assert ev.evaluate(new, Shape(128, 64, 64)).status == NOT_RECORDED     # an alias is per source, not per shape
    assert ev.evaluate(other, SHAPE).status == NOT_RECORDED


def test_the_tool_aliases_the_same_translation_unit_only_and_drops_copied_records(tmp_path):
    now = today()
    commented = now.replace("\n", "\n// a comment the template no longer has\n", 1)   # same code
    changed = now + "\n__device__ int l2_other_symbol;\n"                                # other code
    assert sha(commented) != sha(now) and translation_unit(commented, "sm_90a") == translation_unit(now, "sm_90a")
    assert translation_unit(changed, "sm_90a") != translation_unit(now, "sm_90a")
    session = tmp_path / "session"
    (session / "kernels").mkdir(parents=True)
    (session / "kernels" / "a.cu").write_text(commented)
    (session / "kernels" / "b.cu").write_text(changed)
    rec = session / "evaluations.json"
    rec.write_text(json.dumps({"meta": {"arch": "sm_90a"}, "records": {
        record_key(commented, SHAPE, "f32"): record(0.01),
        record_key(now, SHAPE, "f32"): record(0.01),            # a copy an earlier re-keying made
        record_key(changed, SHAPE, "f32"): record(0.02)}}))
    assert alias_recording.main([str(session)]) == 0
    doc = json.loads(rec.read_text())
    assert doc["aliases"] == {sha(now): sha(commented)}          # not the changed kernel
    assert record_key(now, SHAPE, "f32") not in doc["records"]   # the copy gave way to the alias
    assert doc["meta"]["aliased"]["aliases"] == 1
    ev = RecordedEvaluator(rec, arch="sm_90a", build=False)
    assert ev.evaluate(now, SHAPE).times_ms["candidate"] == 0.01
    # a second run finds nothing new to do and leaves the file as it is
    before = rec.read_text()
    assert alias_recording.main([str(session)]) == 0 and rec.read_text() == before


def test_the_tool_aliases_another_translation_unit_with_the_same_machine_code(tmp_path):
    """A line the preprocessor keeps but the compiler drops (as a new knob whose default keeps the
    old code paths): other translation unit, the same device code, so the alias is made."""
    now = today()
    asserted = now + '\nstatic_assert(sizeof(int) == 4, "a check the template no longer has");\n'
    assert translation_unit(asserted, "sm_90a") != translation_unit(now, "sm_90a")
    session = tmp_path / "session"
    (session / "kernels").mkdir(parents=True)
    (session / "kernels" / "a.cu").write_text(asserted)
    rec = session / "evaluations.json"
    rec.write_text(json.dumps({"meta": {"arch": "sm_90a"}, "records": {record_key(asserted, SHAPE, "f32"): record(0.03)}}))
    assert alias_recording.main([str(session)]) == 0
    assert json.loads(rec.read_text())["aliases"] == {sha(now): sha(asserted)}
    assert RecordedEvaluator(rec, arch="sm_90a", build=False).evaluate(now, SHAPE).times_ms["candidate"] == 0.03


def test_every_configuration_of_the_bundled_demo_is_recorded_under_todays_render():
    """Else its replay compiles them for real and finds nothing: run tools/alias_recording.py
    (or record the demo again where the kernel itself changed)."""
    root = Path(__file__).resolve().parents[1] / "sessions" / "demo-h200"
    ev = RecordedEvaluator(root / "evaluations.json", arch="sm_90a", build=False)
    recorded = {k.split(":", 1)[0] for k in ev.records}
    missing = []
    for p in sorted((root / "kernels").glob("*.cu")):
        src = p.read_text()
        now = alias_recording.todays_render(src)
        if sha(src) in recorded and now is not None and sha(now) not in recorded and sha(now) not in ev.aliases:
            missing.append(p.name)
    assert not missing, f"today's render of {len(missing)} recorded configurations is not in the recording: " \
                        f"python tools/alias_recording.py sessions/demo-h200 ({missing[:3]})"
