"""``l2tui export SESSION --out DIR``: a session's kernels as a library.

Writes ``DIR/kernels/M_N_K.cu``, ``DIR/manifest.json``, the C dispatcher
sources (``include/l2hgemm.h``, ``src/``, ``l2hgemm.cmake``, ``build.sh``) and,
with ``--build``, ``DIR/lib/libl2hgemm.so``.  See the README, "Export".
"""

from __future__ import annotations

import argparse
import sys

from harness.termtext import visible

NAME = "export"
HELP = "export a session's accepted (or best) kernels as a library with a shape dispatcher"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", metavar="SESSION", help="session folder")
    p.add_argument("--out", required=True, metavar="DIR", help="folder to write (must be empty, or --force)")
    p.add_argument("--shapes", dest="export_shapes", action="append", metavar="SPEC",
                   help="only these shapes (grid, small, sample100, MxNxK, a shapes file); repeatable")
    p.add_argument("--only-accepted", action="store_true",
                   help="only kernels the user accepted (default: else the best kernel that passed every check)")
    p.add_argument("--acc", choices=("any", "f32", "f16"), default="any",
                   help="accumulator of the tracks to export (any: f32 preferred when a shape has both)")
    p.add_argument("--dtype", choices=("fp16", "bf16"), default=None,
                   help="element type of the export's kernels (default: the session's; an export holds one)")
    p.add_argument("--force", action="store_true", help="replace an earlier export in DIR")
    p.add_argument("--build", action="store_true", help="also compile lib/libl2hgemm.so with nvcc")
    p.add_argument("--arch", metavar="SM", help="target for --build (default: the session's GPU, e.g. sm_90a)")
    p.add_argument("--jobs", type=int, metavar="N", help="parallel nvcc processes for --build (default: cores)")
    p.add_argument("--margin", type=float, metavar="PCT", default=None,
                   help="dispatch a kernel only where the session measured it at least PCT %% faster than every "
                        "library; the fallback runs the other shapes (default 2)")


def run(args: argparse.Namespace) -> int:
    from harness.shapes import resolve_shapes
    from l2tui.export import export_session
    from l2tui.export.core import routes_line
    from l2tui.export.manifest import DEFAULT_FALLBACK_MARGIN

    shapes = resolve_shapes(args.export_shapes) if args.export_shapes else None
    progress = (lambda msg: print(f"  {visible(msg)}", file=sys.stderr)) if args.build else None
    res = export_session(args.session, args.out, shapes=shapes, only_accepted=args.only_accepted,
                         acc=args.acc, force=args.force, build=args.build, arch=args.arch, jobs=args.jobs,
                         margin=DEFAULT_FALLBACK_MARGIN if args.margin is None else args.margin / 100.0,
                         progress=progress, dtype=args.dtype)
    for w in res.warnings:
        print(f"l2tui: warning: {visible(w)}", file=sys.stderr)
    ks = res.manifest["kernels"]
    acc = sum(1 for e in ks if e["selected_by"] == "accepted")
    beaten = sum(1 for e in ks if not e.get("fallback") and e.get("slower_than"))
    print(visible(f"exported to {res.out}: {routes_line(res.manifest)}"))
    print(f"kernels chosen: {acc} accepted, {len(ks) - acc} the best that passed every check")
    if beaten:
        print(f"note: on {beaten} shape(s) a library outside the cuBLAS family beat the kernel; the kernel "
              "stays because the dispatcher's cuBLASLt fallback could not match that library")
    for e in ks:
        m, n, k = e["shape"]
        sp = e["speedup"].get(e.get("baseline") or "", None)
        sp_s = f"{sp:.2f}x {e['baseline']}" if sp else "untimed"
        route = f"fallback: {_fallback_text(e.get('fallback_pin'))}" if e.get("fallback") else e["file"]
        print(visible(f"  {m}x{n}x{k} {e['acc']}: {route}  [{e['selected_by']}, {sp_s}]"))
    if res.library:
        print(f"library: {res.library}  header: {res.out / 'include' / 'l2hgemm.h'}  cmake: {res.out / 'l2hgemm.cmake'}")
    return 0


def _fallback_text(pin: dict | None) -> str:
    """What the fallback runs on a shape: the session's measured library (its pin), else tuning."""
    if not pin:
        return "cuBLASLt, tuned at the first call"
    if pin["library"] == "cublas":
        return "cublasGemmEx (measured fastest)"
    return f"cuBLASLt heuristic algorithm {pin['index']} (measured fastest: {pin.get('measured', 'cublaslt')})"
