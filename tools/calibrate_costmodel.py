"""Fit the cost model's per-family constants to recorded H200 timings and save them.

    python tools/calibrate_costmodel.py tests/fixtures/h200_timings/time_*.json
    python tools/calibrate_costmodel.py sessions/grid-h200 --save-timings percall_f32.json

An input is a timing file (the format of tests/fixtures/h200_timings) or a sweep's session folder,
whose pick timed a dozen or more catalog configurations per shape (``timed`` events; per call
unless ``--timing chained``); ``--save-timings FILE`` writes what was read as one timing file.

Writes ``l2tui/agent/policies/costmodel_h200.json`` (loaded by ``CostModel()``) and prints how
well the model ranks: mean Spearman correlation per shape, and the geomean regret (measured time
of the predicted-best configuration / measured best; also for the best of the predicted top 3).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.stats import geomean  # noqa: E402
from l2tui.agent.policies.costmodel import (  # noqa: E402
    CALIBRATED_FILE, DEFAULT_PARAMS, CostModel, fit, load_params, log_error, records_of, spearman)
from l2tui.agent.policies.timings import MODES, from_session  # noqa: E402


def ranking_quality(model: CostModel, records) -> dict:
    by = defaultdict(list)
    for c, s, t in records:
        by[s].append((c, t))
    rho, r1, r3 = [], [], []
    for s, rows in by.items():
        pred = [model.predict(c, s) for c, _ in rows]
        meas = [t for _, t in rows]
        rho.append(spearman(pred, meas))
        order = sorted(range(len(rows)), key=lambda i: pred[i])
        r1.append(meas[order[0]] / min(meas))
        r3.append(min(meas[i] for i in order[:3]) / min(meas))
    return {"spearman": sum(rho) / len(rho), "regret_top1": geomean(r1), "regret_top3": geomean(r3),
            "log2_mse": log_error(model, records), "shapes": len(by), "records": len(records)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("timings", nargs="+", help="timing files in the format of tests/fixtures/h200_timings (config name -> ms "
                                               "per shape), or sweep session folders")
    ap.add_argument("--timing", choices=sorted(MODES), default="isolated",
                    help="which of a session's timings to read (default isolated: per call)")
    ap.add_argument("--save-timings", metavar="FILE", help="also write the timings read as one timing file")
    ap.add_argument("--dry-run", action="store_true", help="print the fit's quality, write nothing")
    args = ap.parse_args(argv)
    paths = args.timings
    try:
        docs = [from_session(p, args.timing) if Path(p).is_dir() else json.loads(Path(p).read_text()) for p in paths]
        records = [r for d in docs for r in records_of(d)]
    except (OSError, ValueError, KeyError) as e:  # one line, not a traceback
        raise SystemExit(f"cannot read the timings: {e}") from None
    if args.save_timings:
        merged = {"mode": docs[0].get("mode"), "env": docs[0].get("env"),
                  "configs": {n: c for d in docs for n, c in d["configs"].items()},
                  "timings": [t for d in docs for t in d["timings"]]}
        Path(args.save_timings).write_text(json.dumps(merged, separators=(",", ":")) + "\n")
        print(f"wrote {args.save_timings}: {len(merged['timings'])} shapes, {len(records)} timings")
    if not records:
        raise SystemExit("no timings in " + ", ".join(paths))
    before = ranking_quality(CostModel(DEFAULT_PARAMS), records)
    current = ranking_quality(CostModel(load_params()), records)
    params = fit(records, DEFAULT_PARAMS)
    after = ranking_quality(CostModel(params), records)
    print("defaults:", json.dumps(before))
    print("current: ", json.dumps(current))   # the committed constants, on the same records
    print("fitted:  ", json.dumps(after))
    if args.dry_run:
        print("dry run: nothing written")
        return 0
    modes = sorted({str(d.get("mode")) for d in docs})
    CALIBRATED_FILE.write_text(json.dumps({**params.to_dict(), "fitted_on": [Path(p).name for p in paths],
                                           "timing": modes[0] if len(modes) == 1 else modes,
                                           "quality": after}, indent=1) + "\n")
    print(f"wrote {CALIBRATED_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
