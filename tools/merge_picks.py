"""Merge pick files (tools/sweep_gpu.py pick): later files override earlier ones shape by shape.

    python tools/merge_picks.py results/h200/runs/pick-f32.json /tmp/r1/final/pick-f32.json \
        --note "..." --part "pick-f32.json of the a583743 device call" --out results/h200/runs/pick-f32.json

Why: a device call re-picks only the shapes a catalog change can affect (BASE_PICK +
PICK_SHAPES in tools/h200_final.sh); the committed pick stays one file that covers every shape.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from jsonio import read_json  # noqa: E402


def merge(docs: list[dict]) -> dict:
    rows: dict[tuple[int, int, int], dict] = {}
    configs: dict[str, dict] = {}
    hung: list[str] = []
    for doc in docs:
        for row in doc["timings"]:
            rows[tuple(row["shape"])] = row
        configs.update(doc.get("configs", {}))
        hung += [h for h in doc.get("hung", []) if h not in hung]
    order = [tuple(r["shape"]) for d in docs for r in d["timings"]]
    seen, timings = set(), []
    for s in order:  # first-appearance order, newest row per shape
        if s not in seen:
            seen.add(s)
            timings.append(rows[s])
    used = {r["winner"] for r in timings if r.get("winner")} | {n for r in timings for n in r.get("times_ms", {})}
    return {"mode": "pick", "timings": timings, "hung": hung,
            "configs": {k: v for k, v in configs.items() if k in used}}


def history(docs: list[dict]) -> list[dict]:
    """Every earlier merge's note and parts, oldest first: each input's own ``history`` and then
    its ``note``/``parts`` (a merged file's note describes only its last merge)."""
    out: list[dict] = []
    for doc in docs:
        for h in doc.get("history", []):
            if h not in out:
                out.append(h)
        if doc.get("note") or doc.get("parts"):
            h = {"note": doc.get("note", ""), "parts": doc.get("parts", [])}
            if h not in out:
                out.append(h)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("picks", nargs="+", help="pick JSON files, oldest first")
    ap.add_argument("--out", required=True)
    ap.add_argument("--note", default="")
    ap.add_argument("--part", action="append", default=[], help="a description of each input (recorded)")
    args = ap.parse_args(argv)
    try:
        docs = [read_json(p) for p in args.picks]
    except (OSError, ValueError) as e:  # one line, not a traceback
        raise SystemExit(f"cannot read {getattr(e, 'filename', None) or 'the input'}: {e}") from None
    out = merge(docs)
    out["history"] = history(docs)
    out["note"] = args.note
    out["parts"] = args.part or list(args.picks)
    Path(args.out).write_text(json.dumps(out))
    print(f"{len(out['timings'])} shapes, {sum(1 for r in out['timings'] if r.get('winner'))} with a winner -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
