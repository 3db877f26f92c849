"""Write the list of shapes a device call should re-pick (``PICK_SHAPES`` of tools/h200_final.sh).

    python tools/repick_shapes.py --bench results/h200/kernels-offline.json --slower-than cublaslt_autotune \
        --min-tiles 33 --max-k 1024 --why "after 192-column tiles joined the catalog" \
        --out results/h200/runs/repick4.shapes

Why: a catalog change only matters for some shapes, and a re-pick of those (then
tools/merge_picks.py) costs a fraction of a full grid pick on the lent GPU. Criteria combine with
AND; ``--or-min-side-at-most`` widens ``--max-k`` to "K <= max-k OR min(M, N) <= value".
Tiles are counted in 128x128 output tiles. The first line of the file records the criteria.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path


def select(rows: list[dict], *, slower_than: str | None = None, label: str = "l2", min_tiles: int = 0,
           max_tiles: int | None = None, min_k: int = 0, max_k: int | None = None,
           or_min_side_at_most: int | None = None) -> list[tuple[int, int, int]]:
    out = []
    for r in rows:
        m, n, k = r["m"], r["n"], r["k"]
        t = r.get("times_ms", {})
        tiles = math.ceil(m / 128) * math.ceil(n / 128)
        if tiles < min_tiles or (max_tiles is not None and tiles > max_tiles) or k < min_k:
            continue
        if max_k is not None and k > max_k and not (or_min_side_at_most is not None and min(m, n) <= or_min_side_at_most):
            continue
        if slower_than is not None:
            mine, theirs = t.get(label), t.get(slower_than)
            if mine is not None and theirs is not None and mine <= theirs:
                continue  # already as fast (a shape without a time is re-picked)
        out.append((m, n, k))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", required=True, help="a bench result file (harness bench / l2tui bench JSON)")
    ap.add_argument("--label", default="l2")
    ap.add_argument("--slower-than", help="keep shapes where --label is slower than this baseline")
    ap.add_argument("--min-tiles", type=int, default=0)
    ap.add_argument("--max-tiles", type=int)
    ap.add_argument("--min-k", type=int, default=0)
    ap.add_argument("--max-k", type=int)
    ap.add_argument("--or-min-side-at-most", type=int)
    ap.add_argument("--why", default="", help="recorded in the header line")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    try:
        doc = json.loads(Path(args.bench).read_text())
    except (OSError, ValueError) as e:  # one line, not a traceback
        raise SystemExit(f"cannot read {getattr(e, 'filename', None) or 'the input'}: {e}") from None
    shapes = select(doc["rows"], slower_than=args.slower_than, label=args.label, min_tiles=args.min_tiles,
                    max_tiles=args.max_tiles, min_k=args.min_k, max_k=args.max_k,
                    or_min_side_at_most=args.or_min_side_at_most)
    rev = doc.get("meta", {}).get("git_rev", "?")
    crit = [f"{k}={v}" for k, v in vars(args).items() if k not in ("bench", "out", "why") and v not in (None, 0, "")]
    header = f"# {len(shapes)} shapes from {args.bench} (git {rev}): {' '.join(crit)}" + (f"; {args.why}" if args.why else "")
    Path(args.out).write_text(header + "\n" + "".join(f"{m},{n},{k}\n" for m, n, k in shapes))
    print(header)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
