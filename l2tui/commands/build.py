"""``l2tui build --catalog``: prebuild the seed catalog, e.g. on a machine without a GPU.

    l2tui build --catalog                               # into this machine's build cache
    l2tui build --catalog --out prebuilt/ --jobs 32     # a cache folder to copy to the GPU box
    # on the GPU box:
    L2TUI_CACHE_DIR=$PWD/prebuilt l2tui sweep --shapes grid

Why: a cold sweep spends its time in nvcc (a CUTLASS configuration takes 30-60 s), and a build
machine with many cores (or a Ray cluster: ``--executor ray``) does that faster than the GPU box.
The libraries are cached by content hash (source, flags, nvcc version, arch, CUTLASS version),
so the GPU box finds them only when it has the same nvcc and CUTLASS as the build machine;
``catalog.json`` in the folder records both, and what was built, so a mismatch can be seen.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

NAME = "build"
HELP = "prebuild the seed catalog into a build cache (no GPU needed); --out DIR for another machine"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--catalog", action="store_true", help="build every configuration of the seed catalog")
    p.add_argument("--out", metavar="DIR", default=None,
                   help="write a build cache folder (point L2TUI_CACHE_DIR at it on the GPU machine); "
                        "default: this machine's cache")
    p.add_argument("--jobs", type=int, default=None, help="parallel nvcc builds (default: one per core)")
    p.add_argument("--arch", default=None, help="target GPU arch (default: this GPU's, else sm_90a)")
    p.add_argument("--acc", nargs="+", choices=("f32", "f16"), default=None, help="accumulators (default: both)")
    p.add_argument("--families", nargs="+", metavar="FAMILY", default=None, help="only these seed families")
    p.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="build on this machine's cores (default) or as CPU tasks on a Ray cluster")
    p.add_argument("--ray-address", metavar="HOST:PORT", default=None,
                   help="the Ray cluster to use (default: $RAY_ADDRESS, else a cluster of this machine)")


def catalog_configs(arch: str, accs: tuple[str, ...], families: list[str] | None) -> list:
    from harness.families import catalog, get_family

    for f in families or ():
        get_family(f)   # one line for an unknown family
    fams = set(families) if families else None
    return [c for acc in accs for c in catalog(acc, arch) if fams is None or c.family in fams]


def run(args: argparse.Namespace) -> int:
    from ..errors import UserError

    if not args.catalog:
        raise UserError("nothing to build: add --catalog (kernel files: python -m harness build FILE)")
    if args.jobs is not None and args.jobs < 1:
        raise UserError(f"--jobs must be 1 or more, not {args.jobs}")
    if args.out:
        out = Path(args.out).expanduser().resolve()
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UserError(f"cannot create {out}: {e.strerror}; choose another --out") from None
        os.environ["L2TUI_CACHE_DIR"] = str(out)   # harness.paths reads it at every build
    arch = args.arch
    if arch is None:
        try:
            from harness.gpuinfo import detect_arch

            arch = detect_arch()
        except Exception:  # noqa: BLE001 - no GPU here: the project's target
            arch = None
    arch = arch or "sm_90a"
    accs = tuple(args.acc or ("f32", "f16"))
    configs = catalog_configs(arch, accs, args.families)
    if not configs:
        raise UserError(f"no catalog configuration runs on {arch} for those families")

    from harness.build import _cutlass_identity, nvcc_version
    from harness.paths import cache_dir

    from ..agent.sweep import Sweep, SweepConfig
    from ..executors.local import LocalExecutor
    from ..executors.progress import BuildProgress
    from ..executors.ray_executor import RayExecutor

    executor: LocalExecutor | RayExecutor
    if args.executor == "ray":

        executor = RayExecutor(address=args.ray_address, arch=arch, gpus=0)
    else:
        executor = LocalExecutor(None, jobs=args.jobs)
    t0 = time.monotonic()
    try:
        cfg = SweepConfig(shapes=[], accs=accs, arch=arch, jobs=args.jobs, families=args.families)
        results = Sweep(cfg, executor=executor, progress=lambda line: print(line, flush=True),
                        build_progress=BuildProgress).prebuild()
    finally:
        executor.close()
    wall = time.monotonic() - t0
    root = cache_dir()
    bad = sorted(n for n, r in results.items() if not r.ok)
    manifest = {"arch": arch, "accs": list(accs), "nvcc": nvcc_version(), "cutlass": _cutlass_identity(),
                "families": sorted({c.family for c in configs}), "wall_s": round(wall, 1),
                "nvcc_s": round(sum(r.seconds for r in results.values() if not r.cached), 1),
                "configs": {n: {"key": r.key, "ok": r.ok, "cached": r.cached} for n, r in sorted(results.items())}}
    (root / "catalog.json").write_text(json.dumps(manifest, indent=1))
    built = sum(1 for r in results.values() if r.ok and not r.cached)
    print(f"catalog: {len(results) - len(bad)} of {len(results)} configurations built for {arch} "
          f"({built} compiled now, {len(results) - len(bad) - built} were cached) in {wall:.0f} s; "
          f"nvcc {manifest['nvcc']}, CUTLASS {manifest['cutlass']}", flush=True)
    for n in bad:
        r = results[n]
        first = next((str(e) for e in r.errors if e.severity != "warning"), "build failed")
        print(f"  FAILED {n}: {first}", flush=True)
    if args.out:
        print(f"cache folder: {root}  (on the GPU machine: export L2TUI_CACHE_DIR={root})", flush=True)
    return 1 if bad else 0
