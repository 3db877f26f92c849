"""Copy only the build-cache entries of a kernels dir's sources into a small cache to carry.

    python tools/winner_cache.py --kernels out/kernels --cache .carry/l2cache --out .carry/l2cache-winners

The harness build cache (``$L2TUI_CACHE_DIR/builds/<k[:2]>/<key>/``, filled by
``tools/prebuild.py``) holds every catalog configuration, more than a device call may carry.
``l2tui bench --kernels DIR`` only needs the winners: entries are matched by their
``kernel.cu`` text, so the harness finds them under the same keys (same nvcc, arch, flags).
Point ``L2TUI_CACHE_DIR`` at ``--out`` on the GPU machine.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", required=True)
    ap.add_argument("--cache", required=True, help="a harness cache dir (holds builds/)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    wanted = {p.read_text() for p in Path(args.kernels).glob("*.cu")}
    found = 0
    for entry in (Path(args.cache) / "builds").glob("*/*"):
        src = entry / "kernel.cu"
        if src.is_file() and (entry / "kernel.so").is_file() and src.read_text() in wanted:
            dst = Path(args.out) / "builds" / entry.parent.name / entry.name
            if not dst.exists():
                shutil.copytree(entry, dst)
                # host symbol tables are not needed to load the library: keep the carry small
                subprocess.run(["strip", "--strip-unneeded", str(dst / "kernel.so")], capture_output=True)
            found += 1
    print(f"{len(wanted)} distinct kernels, {found} cache entries copied to {args.out}")
    return 0 if found >= len(wanted) else 1


if __name__ == "__main__":
    sys.exit(main())
