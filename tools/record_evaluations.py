#!/usr/bin/env python3
"""Record the GPU evaluations the agent-loop CI tests replay, and a demo session.

Run on a GPU (done on the H200 for the committed recordings)::

    python tools/record_evaluations.py \
        --out tests/fixtures/recorded/evaluations.json \
        --session-out tests/fixtures/sessions/demo-h200-scripted

It starts the scripted OpenAI server (tests/openai_server.py), drives the main
agent scenario (tests/fixtures/recorded/scenarios.py: a good patch, a 429, a
malformed reply, a patch that does not apply, a compile-breaking patch that the
debugger first tries to "fix" by shrinking tiles and then fixes, a timeout)
on two shapes through the REAL ``harness.evaluate.Evaluator`` (and NCU
profiles once delayed profiling triggers), and saves

* every ``Evaluation.to_dict()`` and profile, keyed by sha256(source)+shape+acc
  (``--out``; the CI tests replay them with ``RecordedEvaluator``);
* the session itself (``--session-out``): the scripted session the TUI tests replay (and
  ``l2tui`` without a GPU while no real demo session is bundled).

"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _load_scenarios():
    import importlib.util

    p = ROOT / "tests" / "fixtures" / "recorded" / "scenarios.py"
    spec = importlib.util.spec_from_file_location("l2tui_test_scenarios", p)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sc = _load_scenarios()
    ap.add_argument("--out", default=str(sc.RECORDINGS), help="recording file to write")
    ap.add_argument("--session-out", default=str(ROOT / "tests" / "fixtures" / "sessions" / "demo-h200-scripted"),
                    help="where to save the session of the recording run (replaced if it exists)")
    ap.add_argument("--shapes", default=f"{sc.SHAPE_A},{sc.SHAPE_B}", help="comma-separated shapes")
    ap.add_argument("--baselines", default="cublas,cublaslt_heuristic,cublaslt_autotune,torch")
    args = ap.parse_args(argv)

    from l2tui.agent.recorded import RecordingEvaluator
    from tests.openai_server import ScriptedServer

    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    baselines = tuple(b for b in args.baselines.split(",") if b)
    from harness.evaluate import Evaluator
    from harness.gpuinfo import require_gpu

    info = require_gpu()
    inner = Evaluator(baselines=baselines, mode="offline")
    meta = {"provisional": False, "gpu": info.to_dict(), "arch": info.arch}
    rec = RecordingEvaluator(inner, meta=meta, existing=None)
    rec.gpu_info = meta["gpu"]  # type: ignore[attr-defined]
    if not hasattr(inner, "profile"):
        rec.profile = _ncu_profile(rec)  # type: ignore[method-assign]
    sess_dir = Path(args.session_out)
    if sess_dir.exists():
        shutil.rmtree(sess_dir)
    t0 = time.time()
    try:
        with ScriptedServer() as srv:
            session = sc.run_main_scenario(sess_dir, rec, srv, shapes)
    finally:
        rec.close()
    out = rec.save(args.out)
    kinds: dict[str, int] = {}
    for r in session.rewards():
        kinds[r["kind"]] = kinds.get(r["kind"], 0) + 1
    prof = sum(1 for e in session.events if e["type"] == "profiled")
    print(json.dumps({"recordings": str(out), "records": len(rec.records), "profiles": len(rec.profiles),
                      "session": str(sess_dir), "events": len(session.events), "reward_kinds": kinds,
                      "profiled_events": prof, "seconds": round(time.time() - t0, 1),
                      "provisional": bool(meta.get("provisional"))}, indent=1))
    return 0


def _ncu_profile(rec):
    """Profile through harness.profiling when the Evaluator has no profile() (recorded too)."""
    from l2tui.agent.recorded import record_key

    def profile(source, shape, acc="f32"):
        from harness.profiling.api import profile_kernel

        p = profile_kernel(source, shape, acc)
        d = p.to_dict(kernels=False) if hasattr(p, "to_dict") else dict(p)
        rec.profiles[record_key(source, shape, acc)] = d
        return p

    return profile


if __name__ == "__main__":
    from harness.errors import HarnessError

    try:
        sys.exit(main())
    except HarnessError as e:
        print(f"record_evaluations: error: {e}", file=sys.stderr)
        sys.exit(2)
