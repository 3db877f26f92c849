#!/usr/bin/env python3
"""Make the carry for ``tools/h200_final.sh``: the build-cache entries of the catalog.

    L2TUI_CACHE_DIR=.carry/l2cache python tools/prebuild.py --out .carry/prebuilt   # once, on the CPU box
    python tools/final_carry.py --prebuilt .carry/prebuilt --cache .carry/l2cache --out .carry/final

Why: the device call may carry 64 MiB, and the pick (which loads prebuilt libraries) and the
bench (which asks the harness build cache) need the same libraries.  This copies each catalog
configuration's cache entry once (``cache/builds/<k[:2]>/<key>/``, stripped) plus the prebuilt
manifest restricted to it; on the GPU box the script links a prebuilt folder to those entries.
Configurations outside ``harness.families.catalog`` (the CUTLASS stream-K/split-K schedulers that
hung on the H200) are left out.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.families import catalog  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prebuilt", default=".carry/prebuilt")
    ap.add_argument("--cache", default=".carry/l2cache")
    ap.add_argument("--out", default=".carry/final")
    ap.add_argument("--pack", action="store_true", help="store the cache entries as cache.tar.xz")
    args = ap.parse_args(argv)
    manifest = json.loads((Path(args.prebuilt) / "manifest.json").read_text())
    allowed = {c.name for acc in ("f32", "f16") for c in catalog(acc, "sm_90a")}
    keep = {name: e for name, e in manifest.items() if name in allowed}
    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    missing = []
    for name, e in keep.items():
        key = e["key"]
        src = Path(args.cache) / "builds" / key[:2] / key
        if not (src / "kernel.so").is_file():
            missing.append(name)
            continue
        dst = out / "cache" / "builds" / key[:2] / key
        shutil.copytree(src, dst)
        subprocess.run(["strip", "--strip-unneeded", str(dst / "kernel.so")], capture_output=True)
    (out / "manifest.json").write_text(json.dumps({k: v for k, v in keep.items() if k not in missing}, indent=1))
    if args.pack:  # one xz archive: the stripped libraries shrink about 5x (carry limit 64 MiB)
        subprocess.run(["tar", "-C", str(out), "-cJf", str(out / "cache.tar.xz"), "cache"], check=True,
                       env={**os.environ, "XZ_OPT": "-6 -T0"})
        shutil.rmtree(out / "cache")
    print(f"{len(keep) - len(missing)} configurations in {out} ({len(manifest) - len(keep)} outside the catalog left out)")
    if missing:
        print("not in the cache (run tools/prebuild.py): " + ", ".join(missing), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
