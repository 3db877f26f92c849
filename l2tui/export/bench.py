"""``python -m l2tui.export.bench DIR``: measure an export on the GPU (not a test).

Two measurements, written as JSON (``--out``) and printed as a table:

1. **Exported library vs the best library, every exported shape** (offline
   mode, the harness's own method).  A forwarding kernel whose ``l2_hgemm``
   calls the built library's ``l2hgemm`` goes through
   :class:`harness.evaluate.Evaluator` like any candidate: checked against the
   fp32 reference, then timed by CUDA-graph replay interleaved with every
   baseline (cuBLAS, cuBLASLt heuristic/autotuned, torch).  The ratio
   ``min(baseline ms) / library ms`` must be >= 1.00 on every shape, fallback
   shapes included (there the library *is* cuBLAS, so expect ~1.00).
2. **Dispatcher per-call overhead** (server mode: Poisson arrivals, each call
   host-timed to stream completion, :func:`harness.timing.server`): per shape,
   the kernel's entry called directly through ctypes vs the C dispatcher
   ``l2hgemm`` vs ``runtime.load(DIR).matmul`` with cupy arrays (and torch
   tensors when torch is there), and on a shape without a kernel
   ``matmul``'s cuBLAS path vs ``cupy.matmul`` itself.  Overhead = median
   difference in microseconds.

Needs a GPU, cupy and a library built with ``l2tui export --build`` (or one is
built into a temporary copy).
"""

from __future__ import annotations

import argparse
import ctypes
import datetime as _dt
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

_FORWARDER = r"""
// Forwards the l2tui ABI to an exported library's shape dispatcher (export bench).
#include <dlfcn.h>
typedef int (*l2hgemm_fn)(const void*, const void*, void*, int, int, int, void*);
extern "C" int l2_hgemm(const void* A, const void* B, void* C, int M, int N, int K, void* stream) {
  static l2hgemm_fn fn = nullptr;
  if (fn == nullptr) {
    void* h = dlopen("@LIB@", RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) return 90;
    fn = (l2hgemm_fn)dlsym(h, "l2hgemm");
    if (fn == nullptr) return 91;
  }
  return fn(A, B, C, M, N, K, stream);
}
"""


def _library(root: Path, manifest: dict, arch: str, keep: list[Path]) -> Path:
    """The export's built library for ``arch``; built into a temporary copy when missing."""
    lib = manifest.get("library")
    if lib and lib.get("arch") == arch and (root / lib["file"]).is_file():
        return (root / lib["file"]).resolve()
    from l2tui.export.cdispatch import build_library

    tmp = Path(tempfile.mkdtemp(prefix="l2hgemm-bench-"))
    keep.append(tmp)
    copy = tmp / "export"
    shutil.copytree(root, copy)
    print(f"building the library for {arch} in {copy} ...", file=sys.stderr)
    return build_library(copy, manifest, arch=arch).so_path.resolve()


def library_vs_best(so: Path, manifest: dict, shapes: list[tuple[int, int, int]], *, arch: str,
                    baselines: str, replays: int) -> list[dict]:
    from harness.evaluate import Evaluator
    from harness.shapes import Shape

    source = _FORWARDER.replace("@LIB@", str(so))
    entries = {tuple(e["shape"]): e for e in manifest["kernels"]}
    rows = []
    with Evaluator(arch=arch, baselines=baselines, mode="offline", replays=replays) as ev:
        for s in shapes:
            e = entries.get(s)
            acc = e["acc"] if e else "f32"
            r = ev.evaluate(source, Shape(*s), acc, label="library")
            lib_ms = r.times_ms.get("library")
            base = {k: v for k, v in r.times_ms.items() if k != "library" and v}
            best = min(base, key=base.get) if base else None
            ratio = base[best] / lib_ms if best and lib_ms else None
            rows.append({
                "shape": list(s), "route": ("cublas" if (e is None or e.get("fallback")) else "kernel"),
                "status": r.status, "message": r.message, "library_ms": lib_ms, "baselines_ms": base,
                "best_library": best, "ratio_vs_best": ratio,
                "rel_err": (r.check or {}).get("rel_err"),
            })
            print(f"  {s[0]}x{s[1]}x{s[2]} {rows[-1]['route']:6} {r.status:8} "
                  f"{'%.4f ms' % lib_ms if lib_ms else '-':>11}  best {best} "
                  f"{'%.3fx' % ratio if ratio else '-'}", file=sys.stderr)
    return rows


def dispatch_overhead(root: Path, so: Path, manifest: dict, shapes: list[tuple[int, int, int]], *,
                      qps: float, calls: int, missing: tuple[int, int, int]) -> list[dict]:
    import cupy as cp

    from l2tui import runtime

    lib = runtime.load(root)
    cdll = ctypes.CDLL(str(so))
    disp = runtime._argtypes(cdll.l2hgemm)
    try:
        import torch
    except ImportError:
        torch = None  # type: ignore[assignment]
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        if torch is not None:  # torch's current stream = cupy's, so every subject enqueues on one stream
            prev = torch.cuda.current_stream()
            torch.cuda.set_stream(torch.cuda.ExternalStream(stream.ptr))
        try:
            rows = _overhead_rows(cp, torch, stream, lib, cdll, disp, manifest, shapes, qps, calls, missing)
        finally:
            if torch is not None:
                torch.cuda.set_stream(prev)
    return rows


def _overhead_rows(cp: Any, torch: Any, stream: Any, lib: Any, cdll: Any, disp: Any, manifest: dict,
                   shapes: list[tuple[int, int, int]], qps: float, calls: int,
                   missing: tuple[int, int, int]) -> list[dict]:
    from harness.timing import server
    from l2tui import runtime

    rows = []
    for s in list(shapes) + [missing]:
        m, n, k = s
        a = cp.random.standard_normal((m, k), dtype=cp.float32).astype(cp.float16)
        b = cp.random.standard_normal((k, n), dtype=cp.float32).astype(cp.float16)
        c = cp.empty((m, n), dtype=cp.float16)
        pa, pb, pc, sp = a.data.ptr, b.data.ptr, c.data.ptr, stream.ptr
        subjects: dict[str, Any] = {}
        if s != missing:
            direct = runtime._argtypes(getattr(cdll, manifest_symbol(manifest, s)))
            subjects["direct_ctypes"] = lambda: direct(pa, pb, pc, m, n, k, sp)
        else:
            subjects["cupy_matmul"] = lambda: (cp.matmul(a, b, out=c), 0)[1]
        subjects["c_dispatch"] = lambda: disp(pa, pb, pc, m, n, k, sp)
        subjects["py_matmul_cupy"] = lambda: (lib.matmul(a, b, out=c), 0)[1]
        if torch is not None:
            ta, tb, tc = (torch.as_tensor(x, device="cuda") for x in (a, b, c))
            subjects["py_matmul_torch"] = lambda: (lib.matmul(ta, tb, out=tc), 0)[1]
        res = server(cp, stream, subjects, qps=qps, calls_per_subject=calls)
        ref = "direct_ctypes" if s != missing else "cupy_matmul"
        base = res[ref]["median_ms"]
        row = {"shape": list(s), "route": lib.route(m, n, k).kind, "reference": ref,
               "median_us": {lab: v["median_ms"] * 1e3 for lab, v in res.items()},
               "p90_us": {lab: v["p90_ms"] * 1e3 for lab, v in res.items()},
               "overhead_us": {lab: (v["median_ms"] - base) * 1e3 for lab, v in res.items() if lab != ref}}
        rows.append(row)
        print(f"  {m}x{n}x{k} {row['route']:6} ref {ref} {base * 1e3:.1f} us; overhead "
              + ", ".join(f"{lab} {o:+.1f} us" for lab, o in row["overhead_us"].items()), file=sys.stderr)
    return rows


def manifest_symbol(manifest: dict, s: tuple[int, int, int]) -> str:
    for e in manifest["kernels"]:
        if tuple(e["shape"]) == s:
            return e["symbol"]
    raise KeyError(s)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m l2tui.export.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("dir", metavar="DIR", help="export folder (from l2tui export [--build])")
    p.add_argument("--out", metavar="FILE", help="write the results as JSON here")
    p.add_argument("--baselines", default="cublas,cublaslt_heuristic,cublaslt_autotune,torch")
    p.add_argument("--replays", type=int, default=7, help="offline replays per subject (default 7)")
    p.add_argument("--qps", type=float, default=200.0, help="server mode arrival rate (default 200)")
    p.add_argument("--calls", type=int, default=200, help="server mode calls per subject (default 200)")
    p.add_argument("--overhead-shapes", type=int, default=4, metavar="N",
                   help="exported kernel shapes to measure overhead on (smallest first; default 4)")
    p.add_argument("--missing", default="96x80x48", metavar="MxNxK", help="a shape without a kernel (cuBLAS path)")
    p.add_argument("--skip-offline", action="store_true", help="only the overhead measurement")
    p.add_argument("--shapes", action="append", metavar="SPEC", help="only these exported shapes (MxNxK, a set, a file)")
    args = p.parse_args(argv)

    from harness.errors import HarnessError
    from harness.gpuinfo import require_gpu
    from harness.shapes import parse_shape, resolve_shapes
    from l2tui.export.core import git_revision
    from l2tui.export.manifest import load as load_manifest
    from l2tui.paths import REPO_ROOT

    keep: list[Path] = []
    try:
        root = Path(args.dir).resolve()
        manifest = load_manifest(root)
        gpu = require_gpu()
        so = _library(root, manifest, gpu.arch, keep)
        want = {(x.m, x.n, x.k) for x in resolve_shapes(args.shapes)} if args.shapes else None
        chosen = [e for e in manifest["kernels"] if want is None or tuple(e["shape"]) in want]
        shapes = sorted(tuple(e["shape"]) for e in chosen)
        kernel_shapes = sorted((tuple(e["shape"]) for e in chosen if not e.get("fallback")),
                               key=lambda s: (s[0] * s[1] * s[2], s))
        ms = parse_shape(args.missing)
        missing = (ms.m, ms.n, ms.k)
        doc: dict[str, Any] = {
            "what": "l2tui export bench", "export": str(root), "gpu": gpu.to_dict(),
            "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "git_revision": git_revision(REPO_ROOT), "library": str(so), "command": sys.argv,
        }
        if not args.skip_offline:
            print("library vs best baseline (offline, graph replay, checked):", file=sys.stderr)
            doc["offline"] = library_vs_best(so, manifest, shapes, arch=gpu.arch, baselines=args.baselines,
                                             replays=args.replays)
            ratios = [r["ratio_vs_best"] for r in doc["offline"] if r["ratio_vs_best"]]
            doc["min_ratio_vs_best"] = min(ratios) if ratios else None
            doc["all_ok"] = all(r["status"] == "ok" for r in doc["offline"])
        print(f"dispatcher overhead (server mode, {args.qps:g} QPS, {args.calls} calls/subject):", file=sys.stderr)
        doc["overhead"] = dispatch_overhead(root, so, manifest, kernel_shapes[: args.overhead_shapes],
                                            qps=args.qps, calls=args.calls, missing=missing)
    except HarnessError as e:
        print(f"export-bench: error: {e}", file=sys.stderr)
        return 2
    finally:
        for d in keep:
            shutil.rmtree(d, ignore_errors=True)
    text = json.dumps(doc, indent=2)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    if "min_ratio_vs_best" in doc:
        print(f"min library/best-baseline speed ratio over {len(doc['offline'])} shapes: "
              f"{doc['min_ratio_vs_best']:.3f}x; all checks ok: {doc['all_ok']}")
    for r in doc["overhead"]:
        print(f"{'x'.join(map(str, r['shape']))} ({r['route']}): " +
              ", ".join(f"{k} {v:+.1f} us" for k, v in r["overhead_us"].items()))
    return 0


if __name__ == "__main__":  # pragma: no cover
    os.environ.setdefault("CUPY_TF32", "0")
    sys.exit(main())
