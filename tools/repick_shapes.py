"""Write the list of shapes a device call should re-pick (``PICK_SHAPES`` of tools/h200_final.sh).

    python tools/repick_shapes.py --bench results/h200/kernels-offline.json --slower-than cublaslt_autotune \
        --min-tiles 33 --max-k 1024 --why "after 192-column tiles joined the catalog" \
        --out results/h200/runs/repick4.shapes

Why: a catalog change only matters for some shapes, and a re-pick of those (then
tools/merge_picks.py) costs a fraction of a full grid pick on the lent GPU. Criteria combine with
AND; ``--or-min-side-at-most`` widens ``--max-k`` to "K <= max-k OR min(M, N) <= value".
Tiles are counted in 128x128 output tiles; ``--min-us``/``--max-us`` bound the label's own time
(e.g. leave out the power-bound shapes over ~150 us, which need a pick in long bursts) and
``--speedup-below X`` keeps shapes whose speedup over ``--slower-than`` is under X (1.0 is plain
"slower than"). ``--changed-from EARLIER_PICK --changed-to LATER_PICK`` lists instead the shapes
whose winner differs between two pick files (what a bench after a re-pick must time again).
The first line of the file records the criteria.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from jsonio import read_json  # noqa: E402


def select(rows: list[dict], *, slower_than: str | None = None, label: str = "l2", min_tiles: int = 0,
           max_tiles: int | None = None, min_k: int = 0, max_k: int | None = None,
           or_min_side_at_most: int | None = None, min_us: float = 0.0, max_us: float | None = None,
           speedup_below: float = 1.0) -> list[tuple[int, int, int]]:
    out = []
    for r in rows:
        m, n, k = r["m"], r["n"], r["k"]
        t = r.get("times_ms", {})
        tiles = math.ceil(m / 128) * math.ceil(n / 128)
        if tiles < min_tiles or (max_tiles is not None and tiles > max_tiles) or k < min_k:
            continue
        if max_k is not None and k > max_k and not (or_min_side_at_most is not None and min(m, n) <= or_min_side_at_most):
            continue
        mine = t.get(label)
        if mine is not None and not min_us <= mine * 1e3 < (max_us if max_us is not None else float("inf")):
            continue
        if slower_than is not None:
            theirs = t.get(slower_than)
            if mine is not None and theirs is not None and theirs >= mine * speedup_below:
                continue  # already fast enough (a shape without a time is re-picked)
        out.append((m, n, k))
    return out


def changed(earlier: dict, later: dict) -> list[tuple[int, int, int]]:
    """Shapes of ``later`` (a pick file) whose winner differs from ``earlier``'s, in later's order."""
    old = {tuple(r["shape"]): r.get("winner") for r in earlier.get("timings", [])}
    return [tuple(r["shape"]) for r in later.get("timings", [])
            if r.get("winner") and old.get(tuple(r["shape"])) != r.get("winner")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", help="a bench result file (harness bench / l2tui bench JSON)")
    ap.add_argument("--changed-from", help="a pick file: list the shapes whose winner --changed-to changed")
    ap.add_argument("--changed-to", help="the later pick file (with --changed-from)")
    ap.add_argument("--label", default="l2")
    ap.add_argument("--slower-than", help="keep shapes where --label is slower than this baseline")
    ap.add_argument("--min-tiles", type=int, default=0)
    ap.add_argument("--max-tiles", type=int)
    ap.add_argument("--min-k", type=int, default=0)
    ap.add_argument("--max-k", type=int)
    ap.add_argument("--or-min-side-at-most", type=int)
    ap.add_argument("--min-us", type=float, default=0.0, help="keep shapes the label takes at least this long")
    ap.add_argument("--max-us", type=float, help="keep shapes the label takes less than this long")
    ap.add_argument("--speedup-below", type=float, default=1.0,
                    help="with --slower-than: keep shapes whose speedup over it is below this")
    ap.add_argument("--why", default="", help="recorded in the header line")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)

    def read(path: str) -> dict:
        try:
            return read_json(path)  # plain or .gz, like the other pick tools
        except (OSError, ValueError) as e:  # one line, not a traceback
            raise SystemExit(f"cannot read {path}: {e}") from None

    if args.changed_from or args.changed_to:
        if not (args.changed_from and args.changed_to):
            raise SystemExit("--changed-from and --changed-to go together")
        shapes = changed(read(args.changed_from), read(args.changed_to))
        header = f"# {len(shapes)} shapes whose winner {args.changed_to} changed from {args.changed_from}"
    else:
        if not args.bench:
            raise SystemExit("give --bench (or --changed-from/--changed-to)")
        doc = read(args.bench)
        shapes = select(doc["rows"], slower_than=args.slower_than, label=args.label, min_tiles=args.min_tiles,
                        max_tiles=args.max_tiles, min_k=args.min_k, max_k=args.max_k,
                        or_min_side_at_most=args.or_min_side_at_most, min_us=args.min_us, max_us=args.max_us,
                        speedup_below=args.speedup_below)
        rev = doc.get("meta", {}).get("git_rev", "?")
        skip = ("bench", "out", "why", "changed_from", "changed_to")
        crit = [f"{k}={v}" for k, v in vars(args).items()
                if k not in skip and v not in (None, 0, "") and not (k == "speedup_below" and v == 1.0)]
        header = f"# {len(shapes)} shapes from {args.bench} (git {rev}): {' '.join(crit)}"
    header += f"; {args.why}" if args.why else ""
    Path(args.out).write_text(header + "\n" + "".join(f"{m},{n},{k}\n" for m, n, k in shapes))
    print(header)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
