"""Recorded evaluations for sweep tests, made from the committed H200 timings (not invented).

``recorded_file(path, shapes, families)`` writes a recording (``l2tui.agent.recorded`` format)
in which every catalog configuration that the fixture timed on a shape has its measured time
and a passing check; the GPU is the fixture's H200 (under a UUID label of its own). Configurations
the fixture did not time stay unrecorded, so a test sees ``not_recorded`` for them, never a
made-up number.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from harness.families import catalog
from harness.shapes import Shape
from l2tui.agent.recorded import record_key

FIXTURES = Path(__file__).parent / "fixtures" / "h200_timings"
TIMINGS = FIXTURES / "time_f32.json"
#: the fixture does not record its GPU's UUID: this label stands for "the H200 of the fixture"
H200_UUID = "GPU-fixture-h200-timings"


def fixture_times() -> dict[tuple[int, int, int], dict[str, float]]:
    data = json.loads(TIMINGS.read_text())
    return {tuple(r["shape"]): r["times_ms"] for r in data["timings"]}


def timed_names() -> set[str]:
    return {n for t in fixture_times().values() for n in t}


def recorded_file(tmp_path: Path, shapes: Sequence[Shape], families: Sequence[str] | None = None,
                  libraries: Sequence[str] = (), extra: dict | None = None) -> Path:
    """``libraries``: other libraries the fixture timed on the shape (e.g. ``torch``), recorded beside
    the baseline as a sweep with ``--libraries`` would time them; ``extra``: what every evaluation
    reports besides (as a GPU worker does: the cuBLASLt autotune record, the cuBLAS layout)."""
    rows = fixture_times()
    data = json.loads(TIMINGS.read_text())
    recs = {}
    for s in shapes:
        times = rows[(s.m, s.n, s.k)]
        base = times.get("cublaslt_autotune") or times.get("torch")
        for c in catalog("f32", "sm_90a"):
            t = times.get(c.name)
            if not t or (families and c.family not in families):
                continue
            recs[record_key(c.source(), s, "f32")] = {
                "status": "ok", "build": None,
                "check": {"ok": True, "failed": None, "detail": "", "rel_err": 1e-4, "bound": 1e-3},
                "times_ms": {"candidate": t, "cublaslt_autotune": base,
                             **{lab: times[lab] for lab in libraries if times.get(lab)}},
                "spread": {}, "roofline_ms": None,
                "message": f"ok: {t:.4g} ms",
                "extra": {"mode": "offline", **(extra or {})}}
    p = tmp_path / "recorded.json"
    gpu = {"name": data["env"]["gpu"], "uuid": H200_UUID, "arch": "sm_90a"}
    p.write_text(json.dumps({"meta": {"gpu": gpu, "arch": "sm_90a", "provisional": False}, "records": recs}))
    return p
