"""How far a pick's quick timings agree with the grid bench, shape by shape, for the same winners.

    python tools/pick_vs_bench.py PICK BENCH [--label l2] [--baseline cublaslt_autotune]

Why: the pick (tools/sweep_gpu.py) chooses winners from its own timings; the grid bench
(harness bench) is what gets reported. When the two disagree by more than the gap between the
pick's best candidates, a re-pick swaps winners on noise (tools/confirm_picks.py settles those
by the bench). This prints, per winner family, the geomean and the range of bench time / pick
time of the winner, and how many shapes had a runner-up within that disagreement.
"""

from __future__ import annotations

import argparse
import json
import sys
import math
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from jsonio import read_json  # noqa: E402


def _geo(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else math.nan


def compare(pick: dict, bench: dict, label: str = "l2", baseline: str = "cublaslt_autotune") -> dict:
    """Per family of winner: bench/pick ratios of the winner; shapes whose runner-up was within the spread."""
    bench_t = {(r["m"], r["n"], r["k"]): r.get("times_ms", {}) for r in bench.get("rows", [])}
    ratios: dict[str, list[float]] = defaultdict(list)
    base_ratios: list[float] = []
    gaps: list[float] = []
    for row in pick.get("timings", []):
        shape, win = tuple(row["shape"]), row.get("winner")
        times = {k: v for k, v in row.get("times_ms", {}).items() if v}
        b = bench_t.get(shape, {})
        if not win or win not in times or not b.get(label):
            continue
        ratios[win.split("-")[0]].append(b[label] / times[win])
        if b.get(baseline) and times.get(baseline):
            base_ratios.append(b[baseline] / times[baseline])
        others = sorted(v for k, v in times.items() if k != win and k not in (baseline, "torch", "cublas"))
        if others:
            gaps.append(others[0] / times[win] - 1.0)
    all_r = [x for xs in ratios.values() for x in xs]
    lo, hi = (min(all_r), max(all_r)) if all_r else (math.nan, math.nan)
    spread = (hi - lo) / 2 if all_r else math.nan
    return {
        "shapes": len(all_r),
        "families": {f: {"shapes": len(xs), "geomean": _geo(xs), "min": min(xs), "max": max(xs)}
                     for f, xs in sorted(ratios.items())},
        "baseline": {"name": baseline, "shapes": len(base_ratios), "geomean": _geo(base_ratios)},
        "runner_up_within": {f"{p}%": sum(1 for g in gaps if g <= p / 100) for p in (1, 2, 5, 10)},
        "ratio_range": [lo, hi], "half_range": spread,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pick")
    ap.add_argument("bench")
    ap.add_argument("--label", default="l2")
    ap.add_argument("--baseline", default="cublaslt_autotune")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = ap.parse_args(argv)
    docs = []
    for p in (args.pick, args.bench):
        try:
            docs.append(read_json(p))
        except (OSError, ValueError) as e:
            raise SystemExit(f"cannot read {p}: {e}") from None
    out = compare(docs[0], docs[1], args.label, args.baseline)
    if not out["shapes"]:
        raise SystemExit(f"no shape of {args.pick} has its winner timed in the pick and '{args.label}' in {args.bench}")
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"{out['shapes']} shapes: bench / pick time of the same winner")
    for fam, d in out["families"].items():
        print(f"  {fam:8s} {d['shapes']:4d} shapes  geomean {d['geomean']:.3f}  range {d['min']:.2f} .. {d['max']:.2f}")
    b = out["baseline"]
    if b["shapes"]:
        print(f"  {b['name']} (both timed): geomean {b['geomean']:.3f} over {b['shapes']} shapes")
    print("  shapes whose runner-up in the pick was within "
          + ", ".join(f"{k}: {v}" for k, v in out["runner_up_within"].items()) + " of the winner")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
