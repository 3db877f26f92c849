"""``profile`` command (``l2tui profile`` and ``python -m harness profile``).

Prints the verdict and the class's filtered metrics; ``--all`` adds every
kernel's full metric table (by ncu section); ``--out FILE`` writes the
Profile as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ..shapes import parse_accumulator, parse_shape
from .metrics import fmt_value, label_of

if TYPE_CHECKING:
    from .api import Profile


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shape", required=True, metavar="MxNxK", help="problem size, e.g. 4096x4096x4096")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--kernel", metavar="FILE", help="kernel source (.cu) or built library (.so) speaking the l2_hgemm ABI")
    g.add_argument("--baseline", metavar="NAME", help="torch, cublas, cublaslt_heuristic or cublaslt_autotune")
    p.add_argument("--acc", default="f32", help="accumulator: f32 (default) or f16")
    p.add_argument("--all", action="store_true", help="also print every kernel's full metric table")
    p.add_argument("--out", metavar="FILE", help="write the profile as JSON")
    p.add_argument("--arch", help="nvcc target when building a .cu (default: the GPU's)")
    p.add_argument("--timeout", type=float, default=120.0, metavar="S", help="time limit for ncu (default 120 s)")
    p.add_argument("--warm-caches", action="store_true",
                   help="keep L2 and L1 as the calls before left them (default: flushed before each pass)")


def render(profile: Profile, all_: bool = False, out: TextIO | None = None) -> None:
    """Print the verdict, its reasons and the filtered metrics (``all_``: every metric, every kernel)."""
    out = out or sys.stdout
    v = profile.verdict
    k = len(profile.kernels)
    print(f"{profile.label} on {profile.shape} ({profile.acc}): {v.cls}"
          + (f"  [{k} kernels in the call]" if k > 1 else ""), file=out)
    for r in v.reasons:
        print(f"  - {r}", file=out)
    print("  thresholds: " + ", ".join(f"{a}={b:.3g}" for a, b in v.thresholds.items()), file=out)
    print("", file=out)
    w = max((len(label_of(key)) for key in profile.filtered), default=10)
    for key, m in profile.filtered.items():
        print(f"  {label_of(key).ljust(w)}  {fmt_value(m)}", file=out)
    if not all_:
        return
    print("", file=out)
    print("all canonical metrics of the call:", file=out)
    w = max((len(label_of(key)) for key in profile.metrics), default=10)
    for key, m in profile.metrics.items():
        print(f"  {label_of(key).ljust(w)}  {fmt_value(m)}", file=out)
    for kr in profile.kernels:
        print("", file=out)
        print(f"kernel {kr.id}: {kr.name}  grid {kr.grid}  block {kr.block}", file=out)
        if kr.sections:
            for sec, ms in kr.sections.items():
                print(f"  [{sec}]", file=out)
                ww = max(len(x) for x in ms)
                for label, m in ms.items():
                    print(f"    {label.ljust(ww)}  {fmt_value(m)}", file=out)
        else:
            ww = max((len(x) for x in kr.metrics), default=10)
            for name, m in sorted(kr.metrics.items()):
                print(f"    {name.ljust(ww)}  {fmt_value(m)}", file=out)


def main(args: argparse.Namespace) -> int:
    from .api import profile_kernel

    shape = parse_shape(args.shape)
    acc = parse_accumulator(args.acc)
    prof = profile_kernel(args.kernel, shape, acc, baseline=args.baseline, timeout_s=args.timeout, arch=args.arch,
                          warm_caches=args.warm_caches)
    render(prof, all_=args.all)
    if args.out:
        Path(args.out).write_text(json.dumps(prof.to_dict(), indent=1))
        print(f"\nwrote {args.out}")
    return 0
