"""``python -m harness build FILE``: compile one ABI kernel and show what ptxas said."""

from __future__ import annotations

import argparse
import json

from .build import build_file, default_jobs


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", metavar="FILE", help="kernel .cu files in the l2tui ABI")
    p.add_argument("--arch", help="sm_90a (Hopper), sm_80 (Ampere), ...; default: this GPU's, else sm_90a")
    p.add_argument("--flag", action="append", default=[], dest="flags", metavar="NVCC_FLAG", help="extra nvcc flag (repeatable)")
    p.add_argument("--no-cache", action="store_true", help="rebuild even when a cached library exists")
    p.add_argument("--json", action="store_true", help="print results as JSON")
    p.add_argument("-j", "--jobs", type=int, default=default_jobs(), help="parallel builds")


def main(args: argparse.Namespace) -> int:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(lambda f: build_file(f, arch=args.arch, flags=args.flags, use_cache=not args.no_cache), args.files))
    failed = 0
    for f, r in zip(args.files, results):
        if args.json:
            print(json.dumps({"file": f, **r.to_dict()}))
            continue
        state = "ok" if r.ok else "FAILED"
        extra = " (cached)" if r.cached else f" in {r.seconds:.1f}s"
        print(f"{state:6} {f} [{r.arch}]{extra}")
        if r.ptxas:
            print(f"       {r.ptxas.summary()}")
        if not r.ok:
            failed += 1
            for line in r.error_text().splitlines():
                print(f"       {line}")
    return 1 if failed else 0
