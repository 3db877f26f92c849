"""Render knob variants of one family's template as benchable kernel folders (a development probe).

    python tools/probes/family_variants.py sm90_ksplit --shapes SHAPES_FILE --out variants \
        --variant m64n128s8c2:TILE_M=64,TILE_N=128,STAGES=8,CLUSTER_K=2 \
        --variant m64n64s4c8:TILE_M=64,TILE_N=64,STAGES=4,CLUSTER_K=8 [--build --cache CACHE_DIR]

Writes ``OUT/shapes``, ``OUT/<name>.cu`` (the template with those knobs, rendered by ``harness.families.render``
and so checked by ``validate``) and ``OUT/<name>/M_N_K.cu`` links for every shape, the layout
``harness bench --kernels OUT/<name>`` reads; ``--build`` compiles each variant for sm_90a into
the build cache ``--cache`` (point ``L2TUI_CACHE_DIR`` of the GPU box at it so nothing is rebuilt
there). On the GPU box, ``CFGS="name …" VARIANTS=variants bash tools/probes/family_variants.sh``
benches every variant against cuBLASLt autotuned with every check.
Why a probe and not the pick: while a kernel is being written its variants are not catalog
entries yet, and each one should be seen on the same shapes side by side.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness.errors import HarnessError  # noqa: E402
from harness.families import render  # noqa: E402
from harness.shapes import resolve_shapes  # noqa: E402


def parse_variant(text: str) -> tuple[str, dict[str, str]]:
    """``name:KNOB=V,KNOB=V`` -> (name, knobs)."""
    name, sep, rest = text.partition(":")
    if not sep or not name or "/" in name:
        raise SystemExit(f"bad --variant {text!r}: use NAME:KNOB=VALUE,KNOB=VALUE")
    knobs = {}
    for item in filter(None, rest.split(",")):
        k, eq, v = item.partition("=")
        if not eq:
            raise SystemExit(f"bad knob {item!r} in --variant {name}: use KNOB=VALUE")
        knobs[k.strip()] = v.strip()
    return name, knobs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("family")
    ap.add_argument("--shapes", required=True, help="shapes file or spec (grid, sample100, MxNxK)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--variant", action="append", required=True, help="NAME:KNOB=V,KNOB=V (repeatable)")
    ap.add_argument("--build", action="store_true", help="compile every variant into --cache")
    ap.add_argument("--cache", help="build cache folder (L2TUI_CACHE_DIR) for --build")
    args = ap.parse_args(argv)
    try:
        shapes = resolve_shapes([args.shapes])
        variants = [parse_variant(v) for v in args.variant]
        sources = {name: render(args.family, knobs) for name, knobs in variants}
    except HarnessError as e:
        raise SystemExit(f"family_variants: {e}") from None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "shapes").write_text("".join(f"{s.m},{s.n},{s.k}\n" for s in shapes))  # what the .sh benches
    for name, src in sources.items():
        (out / f"{name}.cu").write_text(src)
        d = out / name
        d.mkdir(exist_ok=True)
        for s in shapes:
            link = d / f"{s.m}_{s.n}_{s.k}.cu"
            if link.is_symlink() or link.exists():
                link.unlink()
            os.symlink(f"../{name}.cu", link)
    print(f"{len(sources)} variants x {len(shapes)} shapes in {out}")
    if args.build:
        if args.cache:
            os.environ["L2TUI_CACHE_DIR"] = str(Path(args.cache).resolve())
        from harness.build import build

        failed = 0
        for name, src in sources.items():
            res = build(src, arch="sm_90a")
            print(f"{name}: {'ok' if res.ok else 'FAILED'}" + ("" if res.ok else f" {res.error_text()}"))
            failed += not res.ok
        return 1 if failed else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
