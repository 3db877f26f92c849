"""GPU smoke test of the seed families through the harness Evaluator (build + full checks + time).

    python tools/harness_smoke.py [--family small_splitk] [--shapes 64x64x16384 1000x1000x1000]

Prints one line per (configuration, shape) with the status and the times of the baselines, and
writes them as JSON to harness_smoke.json (in ``$HARNESS_SMOKE_DIR``, default the current folder).  Uses the fast-building mma families by default.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.evaluate import Evaluator  # noqa: E402
from harness.families import catalog  # noqa: E402
from harness.shapes import parse_shape  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--family", nargs="+", default=["small_splitk", "sm80_mma"])
    ap.add_argument("--shapes", nargs="+", default=["64x64x16384", "1000x1000x1000", "128x4096x64"])
    ap.add_argument("--baselines", default="cublas,cublaslt_autotune,torch")
    ap.add_argument("--arch", default="sm_90a")
    args = ap.parse_args(argv)
    rows = []
    with Evaluator(arch=args.arch, baselines=args.baselines) as ev:
        for fam in args.family:
            cfg = next(c for c in catalog("f32", args.arch) if c.family == fam)
            for spec in args.shapes:
                t0 = time.time()
                e = ev.evaluate(cfg.source(), parse_shape(spec), "f32")
                rows.append({"config": cfg.name, "shape": spec, "status": e.status, "message": e.message,
                             "times_ms": e.times_ms, "seconds": round(time.time() - t0, 1)})
                print(f"{cfg.name} {spec}: {e.status} {e.message} "
                      + " ".join(f"{k}={v * 1e3:.1f}us" for k, v in sorted(e.times_ms.items())), flush=True)
    out = Path(os.environ.get("HARNESS_SMOKE_DIR", "."))
    (out / "harness_smoke.json").write_text(json.dumps(rows, indent=1))
    return 0 if all(r["status"] in ("ok", "unsupported") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
