"""Write a pick's winners as a committed kernels folder: one source per configuration.

    python tools/commit_winners.py --pick results/h200/runs/pick-f32.json \
        --prebuilt .carry/prebuilt-new --out results/h200/kernels-f32

``<out>/configs/<config>.cu`` holds each winning configuration's source once and
``<out>/M_N_K.cu`` is a relative symlink to it, so ``l2tui bench --kernels <out>`` (and a
reader) sees one ABI kernel per shape while the repository stores a handful of files.
An existing folder is replaced.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pick", required=True, help="pick JSON written by tools/sweep_gpu.py pick")
    ap.add_argument("--prebuilt", required=True, help="folder with <config>.cu sources")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    doc = json.loads(Path(args.pick).read_text())
    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    (out / "configs").mkdir(parents=True)
    n = 0
    for row in doc["timings"]:
        name = row.get("winner")
        if not name:
            continue
        cfg = out / "configs" / f"{name}.cu"
        if not cfg.exists():
            shutil.copyfile(Path(args.prebuilt) / f"{name}.cu", cfg)
        m, nn, k = row["shape"]
        os.symlink(Path("configs") / cfg.name, out / f"{m}_{nn}_{k}.cu")
        n += 1
    print(f"{n} shapes, {len(list((out / 'configs').iterdir()))} configurations in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
