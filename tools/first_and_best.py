"""Each track's first timed result and its best, beside the known kernel for its shape.

    l2tui run --headless --policy search --shapes 64x64x64,4096x4096x4096 --session sessions/known-first
    python tools/first_and_best.py sessions/known-first --gpu "NVIDIA H200" --json results/h200/known-first.json

Why: a track starts from the known kernel for its shape (harness.known), so its first result
should be within one request's noise of that kernel's recorded speedup, and its best at or above
it. The known kernels are the bundled layer's (what the project knew before the run: the run
records its own bests into the local layer). The speedups are over the session's baseline; the known kernel's are over the baseline its
layer records (the bundled H200 layer: cuBLASLt-autotune, per call), so compare a session run
with that baseline (``[harness] baseline = "cublaslt_autotune"``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from harness.known import GpuKey, KNOWN_SMS, KnownStore
from harness.shapes import Shape

#: the session log is read only up to this size (a session of a few tracks is a few MB)
MAX_EVENTS_BYTES = 512 << 20


def read_events(session: Path) -> list[dict]:
    """The session's events (lines that are not JSON objects are skipped)."""
    path = session / "events.jsonl"
    if path.stat().st_size > MAX_EVENTS_BYTES:
        raise SystemExit(f"first_and_best: {path} is over {MAX_EVENTS_BYTES >> 20} MB")
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if isinstance(e, dict):
            out.append(e)
    return out


def per_track(events: list[dict]) -> dict[str, dict]:
    """track -> shape, acc, baseline, first and best speedup (from ``best`` events, in order)."""
    tracks: dict[str, dict] = {}
    for e in events:
        tid = e.get("track")
        if e.get("type") == "track_added" and isinstance(e.get("shape"), list):
            tracks[tid] = {"shape": e["shape"], "acc": e.get("acc"), "baseline": e.get("baseline"),
                           "first": None, "best": None}
        elif e.get("type") == "best" and tid in tracks and isinstance(e.get("speedup"), (int, float)):
            t = tracks[tid]
            t["first"] = e["speedup"] if t["first"] is None else t["first"]
            t["best"] = max(t["best"] or 0.0, e["speedup"])
    return tracks


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("session", type=Path)
    p.add_argument("--gpu", default="NVIDIA H200", help="the GPU model whose known kernels to compare with")
    p.add_argument("--json", type=Path, help="also write the rows here")
    args = p.parse_args(argv)
    key = GpuKey(args.gpu, KNOWN_SMS.get(args.gpu), None)
    # the bundled layer alone: the run itself records its bests into the local layer, and a track
    # must be compared with what was known before it ran, never with its own result
    with tempfile.TemporaryDirectory() as empty:
        known = KnownStore(local=Path(empty) / "known.json").results(key)
    rows = []
    print(f"{'shape':<20} {'first':>7} {'best':>7} {'known':>7}  first/known  baseline")
    for tid, t in per_track(read_events(args.session)).items():
        k = known.get((t["acc"], Shape(*t["shape"])))
        ks = k.speedup if k is not None and k.baseline == t["baseline"] else None
        ratio = t["first"] / ks if t["first"] and ks else None
        rows.append({"track": tid, **t, "known": ks, "known_name": k.name if k else None, "first_over_known": ratio})
        fmt = lambda x: f"{x:.3f}" if isinstance(x, float) else "-"  # noqa: E731
        print(f"{tid:<20} {fmt(t['first']):>7} {fmt(t['best']):>7} {fmt(ks):>7}  {fmt(ratio):>11}  {t['baseline']}")
    if args.json:
        args.json.write_text(json.dumps({"session": str(args.session), "gpu": args.gpu, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
