"""Write a sweep's winners as a committed kernels folder: one source per configuration.

    l2tui sweep --shapes grid --session sessions/grid-h200
    python tools/commit_winners.py --winners sessions/grid-h200/winners --out results/h200/kernels-f32

``<out>/configs/<config>.cu`` holds each winning configuration's source once and
``<out>/M_N_K.cu`` is a relative symlink to it, so ``l2tui bench --kernels <out>`` (and a
reader) sees one ABI kernel per shape while the repository stores a handful of files. A winner
that is not a seed-family configuration (edited by hand, or by the LLM) keeps its own file.
An existing folder is replaced.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.families import Config  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--winners", required=True, help="the winners/ folder of an l2tui sweep session (M_N_K.cu)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    src_dir = Path(args.winners)
    files = sorted(src_dir.glob("*.cu"))
    if not files:
        print(f"commit_winners: no M_N_K.cu in {src_dir}: pass the winners/ folder of a sweep session", file=sys.stderr)
        return 1
    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    (out / "configs").mkdir(parents=True)
    n = 0
    for f in files:
        text = f.read_text()
        cfg = Config.from_source(text)
        if cfg is None:
            shutil.copyfile(f, out / f.name)
        else:
            target = out / "configs" / f"{cfg.name}.cu"
            if not target.exists():
                target.write_text(text)
            os.symlink(Path("configs") / target.name, out / f.name)
        n += 1
    print(f"{n} shapes, {len(list((out / 'configs').iterdir()))} configurations in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
