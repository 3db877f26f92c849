"""How close the honest kernels of a grid bench came to the ``fresh`` check's memoization bound.

    python tools/fresh_calibration.py BENCH [--label l2] [--part same|dense] [--csv OUT.csv]

Why: the check's timing part (harness/checks.py, ``fresh_verdict``) fails a candidate whose calls
right after an input change cost more than FRESH_RATIO x the timed call + FRESH_SLACK_MS. Too
tight and an honest kernel is rejected when re-measured on another H200; too loose and a kernel
that hashes its inputs and replays a cached C gains up to about FRESH_RATIO x. Every candidate's
``fresh_ms`` and ``timed_ms`` are kept in the bench file, so this prints, per band of timed call
time, the spread of fresh / timed and the largest extra microseconds, plus the headroom each
honest kernel left under the current bound (the smallest is the margin against noise).
``--part dense`` does the same for part (3), which holds calls after a dense change of A
(``dense_ms``) to the same bound against calls after a one-element change (``one_ms``).
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import checks as ck  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from jsonio import read_json  # noqa: E402

BANDS_US = (0, 3, 6, 12, 25, 50, 200, 1000, float("inf"))


#: per part of the check: (the reference call's field, the checked call's field)
PARTS = {"same": ("timed_ms", "fresh_ms"), "dense": ("one_ms", "dense_ms")}


def samples(bench: dict, label: str = "l2", part: str = "same") -> list[dict]:
    """One row per shape whose candidate recorded the fresh-input timing (``part`` "same": part (2),
    a call after a change against a timed one; "dense": part (3)). ``timed_ms`` is the reference
    call, ``fresh_ms`` the checked one."""
    ref_key, key = PARTS[part]
    out = []
    for r in bench.get("rows", []):
        f = r.get("checks", {}).get(label, {}).get("checks", {}).get("fresh", {})
        if key not in f or not f.get(ref_key):
            continue
        fr = f[key]
        t = (f.get("same_ms") or f["timed_ms"]) if part == "same" else f[ref_key]  # same rounds' reference
        allowed = ck.FRESH_RATIO * t + ck.FRESH_SLACK_MS
        out.append({"m": r["m"], "n": r["n"], "k": r["k"], "timed_ms": t, "fresh_ms": fr,
                    "perturb_ms": f.get("perturb_ms"), "ratio": fr / t, "extra_us": (fr - t) * 1e3,
                    "headroom": (allowed - fr) / allowed, "ok": bool(f.get("ok"))})
    return out


def bands(rows: list[dict]) -> list[dict]:
    """Per band of timed call time: count, min / median / max of fresh / timed, largest extra us."""
    res = []
    for lo, hi in zip(BANDS_US, BANDS_US[1:]):
        xs = sorted((r for r in rows if lo <= r["timed_ms"] * 1e3 < hi), key=lambda r: r["ratio"])
        if not xs:
            continue
        res.append({"band_us": (lo, hi), "n": len(xs), "ratio_min": xs[0]["ratio"],
                    "ratio_median": xs[len(xs) // 2]["ratio"], "ratio_max": xs[-1]["ratio"],
                    "extra_us_max": max(r["extra_us"] for r in xs),
                    "headroom_min": min(r["headroom"] for r in xs)})
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bench")
    ap.add_argument("--label", default="l2")
    ap.add_argument("--part", choices=sorted(PARTS), default="same",
                    help="same: part (2), after a change against a timed call; dense: part (3)")
    ap.add_argument("--csv", help="write the per-shape numbers here")
    args = ap.parse_args(argv)
    try:
        bench = read_json(args.bench)
    except (OSError, ValueError) as e:
        print(f"fresh_calibration: cannot read {args.bench}: {e}", file=sys.stderr)
        return 2
    rows = samples(bench, args.label, args.part)
    if not rows:
        print(f"fresh_calibration: no {args.part!r} fresh-input timings for label {args.label!r} in {args.bench}",
              file=sys.stderr)
        return 1
    meta = bench.get("meta", {})
    print(f"{len(rows)} shapes · {meta.get('gpu', '?')} · git {meta.get('git_rev', '?')} · bound "
          f"{ck.FRESH_RATIO:g}x timed + {ck.FRESH_SLACK_MS * 1e3:g} us · failed {sum(not r['ok'] for r in rows)}")
    print(f"{'timed (us)':>14} {'n':>5} {'ratio min':>9} {'median':>7} {'max':>6} {'extra us max':>12} {'headroom':>8}")
    for b in bands(rows):
        lo, hi = b["band_us"]
        print(f"{lo:>6g}-{hi:<7g} {b['n']:>5} {b['ratio_min']:>9.3f} {b['ratio_median']:>7.3f} {b['ratio_max']:>6.3f} "
              f"{b['extra_us_max']:>12.2f} {b['headroom_min']:>8.1%}")
    if args.csv:
        with open(args.csv, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        print(f"wrote {args.csv}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
