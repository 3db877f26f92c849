"""``python -m l2tui.export.bench DIR``: measure an export on the GPU (not a test).

Two measurements, written as JSON (``--out``) and printed as a table:

1. **Exported library vs the best library, every exported shape** (offline
   mode, the harness's own method; per call by default, ``--timing chained``
   for back to back), plus ``--missing`` shapes the export has
   no kernel for.  A forwarding kernel whose ``l2_hgemm`` calls the built
   library's ``l2hgemm`` goes through :class:`harness.evaluate.Evaluator`
   like any candidate: checked against the fp32 reference, then timed by
   CUDA-graph replay interleaved with every baseline (cuBLAS, cuBLASLt
   heuristic/autotuned, torch).  Per shape: which path served it (``kernel``
   or ``fallback``), the ratio ``baseline ms / library ms`` for every
   baseline, and vs the best one, which must be >= 1.00 on every exported
   shape.  On fallback shapes the library is autotuned cuBLASLt (it tunes on
   the checks' first call, before any graph is captured), so expect ~1.00
   against ``cublaslt_autotune`` and >= 1.00 against the rest.
2. **Dispatcher per-call overhead** (server mode: Poisson arrivals, each call
   host-timed to stream completion, :func:`harness.timing.server`): per shape,
   the kernel's entry called directly through ctypes vs the C dispatcher
   ``l2hgemm`` vs ``runtime.load(DIR).matmul`` with cupy arrays (and torch
   tensors when torch is there), and on a shape without a kernel the C
   fallback ``l2hgemm_fallback``, ``l2hgemm`` and ``matmul``'s fallback path
   vs ``cupy.matmul`` itself.  Overhead = median difference in microseconds.

``--fallback`` sets ``L2HGEMM_FALLBACK`` for this process and the harness
worker (both read it once), to compare the fallback paths.

An export is timed in its manifest's element type (``dtype``): a bf16 export's forwarder defines
``l2_hgemm_bf16`` and the harness checks and times it against the bf16 libraries; ``--dtype``, when
given, must name that type (a mismatch is one line, before any GPU work).

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
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Sequence

from harness.cupy_types import CudaStream, CupyModule, DeviceArray

if TYPE_CHECKING:
    from harness.evaluate import Evaluation
    from l2tui.export.runtime import Array, ExportedLibrary, KernelFn


def _library(root: Path, manifest: dict, arch: str, keep: list[Path]) -> Path:
    """The export's built library for ``arch``; built into a temporary copy when missing or out of date.

    A library built before the cuBLASLt fallback existed (no ``l2hgemm_fallback``) would
    measure the old cuBLAS fallback, so it is rebuilt from the current generator too.
    """
    from l2tui.export.cdispatch import FALLBACK_SYMBOL, build_library, exported_symbols

    lib = manifest.get("library")
    why = f"no library for {arch}"
    if lib and lib.get("arch") == arch and (root / lib["file"]).is_file():
        so: Path = (root / lib["file"]).resolve()
        if FALLBACK_SYMBOL in exported_symbols(so):
            return so
        why = f"{so} predates the cuBLASLt fallback"
    tmp = Path(tempfile.mkdtemp(prefix="l2hgemm-bench-"))
    keep.append(tmp)
    copy = tmp / "export"
    shutil.copytree(root, copy)
    print(f"{why}: building it for {arch} in {copy} ...", file=sys.stderr)
    return build_library(copy, manifest, arch=arch).so_path.resolve()


def visible_to_worker(so: Path) -> Path:
    """A copy of the library where the sandboxed GPU worker can read it.

    The worker sees the build cache read-only and not, say, the user's home folder, where an
    export usually lives; the forwarder's ``dlopen`` would fail there and every shape would read
    "unsupported". The copy is content-addressed (``builds/libraries/<sha256>/``), so re-running
    the bench reuses it.
    """
    import hashlib

    from harness.paths import build_cache_dir

    data = so.read_bytes()
    dest = build_cache_dir() / "libraries" / hashlib.sha256(data).hexdigest() / so.name
    if not dest.is_file():
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.chmod(tmp, 0o755)
        os.replace(tmp, dest)
    return dest


def path_of(manifest: dict, s: tuple[int, int, int]) -> str:
    """Which path of the library serves ``s``: "kernel", or "fallback" (a marker, or no kernel exported)."""
    for e in manifest["kernels"]:
        if tuple(e["shape"]) == s:
            return "fallback" if e.get("fallback") else "kernel"
    return "fallback"


def ratio_row(s: tuple[int, int, int], path: str, exported: bool, times_ms: dict[str, float],
              cublas_nn_ms: float | None = None) -> dict:
    """One shape's library time against every baseline: ``baseline ms / library ms`` (>= 1: library faster).

    ``cublas`` is the faster of cuBLAS's two layouts, and its TN form reads a column-major copy of B
    made outside the timed call: a layout the library is not given.  ``cublas_nn_ms`` (cuBLAS on
    the library's own row-major B) gives a second verdict, against the libraries called on the same
    operands (``best_same_layout``), so a report can say which of the two a shape misses."""
    lib_ms = times_ms.get("library")
    base = {k: v for k, v in times_ms.items() if k != "library" and v}
    best = min(base, key=lambda k: base[k]) if base else None
    same = dict(base)
    if cublas_nn_ms and "cublas" in same:
        same["cublas"] = cublas_nn_ms
    best_same = min(same, key=lambda k: same[k]) if same else None
    return {
        "shape": list(s), "path": path, "exported": exported, "library_ms": lib_ms, "baselines_ms": base,
        "ratio_vs": {k: v / lib_ms for k, v in sorted(base.items())} if lib_ms else {},
        "best_library": best, "ratio_vs_best": base[best] / lib_ms if best and lib_ms else None,
        "best_same_layout": best_same,
        "ratio_vs_best_same_layout": same[best_same] / lib_ms if best_same and lib_ms else None,
    }


def cublas_nn_median(runs: list[Evaluation]) -> float | None:
    """cuBLAS's row-major-B (NN) time over the passing runs, median; None when it was not timed."""

    details = [r.extra.get("detail_times_ms") for r in runs if r.status == "ok" and r.extra]
    xs: list[float] = [x for d in details if isinstance(d, dict)
                       for x in [d.get("cublas_nn")] if isinstance(x, float) and x > 0]
    return statistics.median(xs) if xs else None


def _print_ratio_row(row: dict) -> None:
    s, ratio, lib_ms = row["shape"], row["ratio_vs_best"], row["library_ms"]
    each = " ".join(f"{k} {v:.3f}x" for k, v in row["ratio_vs"].items())
    print(f"  {s[0]}x{s[1]}x{s[2]} {row['path']:8}{'' if row['exported'] else ' (not exported)'} "
          f"{row['status']:8} {'%.4f ms' % lib_ms if lib_ms else '-':>11}  "
          f"vs best ({row['best_library']}) {'%.3fx' % ratio if ratio else '-'}  [{each}]", file=sys.stderr)


def median_times(runs: list[dict[str, float]]) -> dict[str, float]:
    """Per subject, the median of its times over repeated evaluations (subjects timed in every one)."""

    labels = set.intersection(*(set(r) for r in runs)) if runs else set()
    return {lab: statistics.median(r[lab] for r in runs) for lab in sorted(labels)}


def bench_dtype(manifest: dict, wanted: str | None, where: str) -> str:
    """The element type the export is timed in: its manifest's; ``wanted`` (``--dtype``) must be the
    same, else one line (bf16 bits timed as fp16 would be numbers, all wrong)."""
    from l2tui.errors import UserError
    from l2tui.export.manifest import manifest_dtype

    have = manifest_dtype(manifest)
    if wanted is not None and wanted != have:
        raise UserError(f"{where} is {'an' if have == 'fp16' else 'a'} {have} export but --dtype is {wanted}: "
                        f"run with --dtype {have} (or leave --dtype out)")
    return have


def _operands(cp: CupyModule, m: int, n: int, k: int, dtype: str, *,
              ones: bool = False) -> tuple[DeviceArray, DeviceArray, DeviceArray]:
    """A, B and C for one call in ``dtype``: cupy float16 arrays, or for bf16 uint16 arrays that hold
    bf16 bit patterns (what the runtime takes; cupy has no bfloat16), random or all ones."""
    def fill(rows: int, cols: int) -> DeviceArray:
        x = cp.ones((rows, cols), dtype=cp.float32) if ones else cp.random.standard_normal((rows, cols), dtype=cp.float32)
        if dtype == "bf16":
            return (x.view(cp.uint32) >> 16).astype(cp.uint16)   # the top half of an f32 is its bf16
        return x.astype(cp.float16)

    return fill(m, k), fill(k, n), cp.empty((m, n), dtype=cp.uint16 if dtype == "bf16" else cp.float16)


def library_vs_best(so: Path, manifest: dict, shapes: list[tuple[int, int, int]], *, arch: str,
                    baselines: str, replays: int, missing: Sequence[tuple[int, int, int]] = (),
                    timing: str = "isolated", repeats: int = 1) -> list[dict]:
    """Offline ratios of the library against every baseline, exported shapes first, then ``missing`` ones.

    ``repeats`` > 1 times every shape that many times, in rounds over all shapes (minutes apart
    on the GPU's clocks and temperature, the same for every shape and subject), and reports each
    subject's median time: one run's per-shape ratio moves by a few per cent between runs."""
    from harness.evaluate import Evaluator
    from harness.shapes import Shape

    from l2tui.events import library_fields
    from l2tui.export.cdispatch import render_bench_forwarder
    from l2tui.export.manifest import manifest_dtype

    dtype = manifest_dtype(manifest)
    source = render_bench_forwarder(visible_to_worker(so), dtype)
    entries = {tuple(e["shape"]): e for e in manifest["kernels"]}
    todo = list(shapes) + [m for m in missing if m not in entries]
    results: dict[tuple[int, int, int], list[Evaluation]] = {s: [] for s in todo}
    with Evaluator(arch=arch, baselines=baselines, mode="offline", replays=replays, timing=timing, dtype=dtype) as ev:
        for _ in range(repeats):
            for s in todo:
                e = entries.get(s)
                # trusted: the forwarder dlopens the library, which the source policy refuses in candidates
                results[s].append(ev.evaluate(source, Shape(*s), e["acc"] if e else "f32", label="library",
                                              trusted=True))
    rows = []
    for s in todo:
        e, runs = entries.get(s), results[s]
        worst = next((r for r in runs if r.status != "ok"), runs[-1])
        ok_times = [r.times_ms for r in runs if r.status == "ok"]
        row = ratio_row(s, path_of(manifest, s), e is not None, median_times(ok_times) if ok_times else {},
                        cublas_nn_median(runs))
        # how this run's libraries ran (its autotune's pick, cuBLAS's layout), beside the pin
        row.update(status=worst.status, message=worst.message, rel_err=(worst.check or {}).get("rel_err"),
                   fallback_pin=e.get("fallback_pin") if e else None, **library_fields(runs[-1].extra))
        if len(runs) > 1:
            row["repeats_ms"] = {lab: [r.times_ms.get(lab) for r in runs] for lab in row["baselines_ms"]}
            row["repeats_ms"]["library"] = [r.times_ms.get("library") for r in runs]
        rows.append(row)
        _print_ratio_row(row)
    return rows


def summarize(rows: list[dict]) -> dict[str, object]:
    """The verdict over exported shapes (the promise), per path, and the shapes that miss it."""
    exported = [r for r in rows if r["exported"]]
    ratios = [r["ratio_vs_best"] for r in exported if r["ratio_vs_best"]]
    same = [r["ratio_vs_best_same_layout"] for r in exported if r.get("ratio_vs_best_same_layout")]
    per_path = {}
    for path in ("kernel", "fallback"):
        xs = [r["ratio_vs_best"] for r in rows if r["path"] == path and r["ratio_vs_best"]]
        per_path[path] = {"shapes": len(xs), "min_ratio_vs_best": min(xs) if xs else None}
    return {
        "min_ratio_vs_best": min(ratios) if ratios else None,
        "min_ratio_vs_best_same_layout": min(same) if same else None,
        "all_ok": all(r["status"] == "ok" for r in rows),
        "per_path": per_path,
        "below_1": [{"shape": r["shape"], "path": r["path"], "best_library": r["best_library"],
                     "ratio_vs_best": r["ratio_vs_best"]} for r in rows
                    if r["ratio_vs_best"] is not None and r["ratio_vs_best"] < 1.0],
    }


def dispatch_overhead(root: Path, so: Path, manifest: dict, shapes: list[tuple[int, int, int]], *,
                      qps: float, calls: int, missing: tuple[int, int, int]) -> list[dict]:
    import cupy as cp

    from l2tui.export import runtime

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


def _overhead_rows(cp: CupyModule, torch: ModuleType | None, stream: CudaStream, lib: ExportedLibrary,
                   cdll: ctypes.CDLL, disp: KernelFn, manifest: dict,
                   shapes: list[tuple[int, int, int]], qps: float, calls: int,
                   missing: tuple[int, int, int]) -> list[dict]:
    """One overhead row per shape, the kernel shapes first and ``missing`` (the fallback path) last."""
    from l2tui.export.manifest import manifest_dtype

    ctx = _OverheadContext(cp=cp, torch=torch, stream=stream, lib=lib, cdll=cdll, disp=disp, manifest=manifest,
                           dtype=manifest_dtype(manifest), qps=qps, calls=calls)
    rows = []
    for s in list(shapes) + [missing]:
        row = _overhead_row(ctx, s, s == missing)
        rows.append(row)
        _print_overhead_row(row)
    return rows


@dataclass(frozen=True)
class _OverheadContext:
    """What every shape of the overhead measurement shares: the array modules, the one stream every
    subject enqueues on, the loaded library three ways (``runtime`` object, ctypes handle, its
    dispatcher entry) and the server-mode settings."""
    cp: CupyModule
    torch: ModuleType | None
    stream: CudaStream
    lib: ExportedLibrary
    cdll: ctypes.CDLL
    disp: KernelFn
    manifest: dict
    dtype: str
    qps: float
    calls: int


def _overhead_row(ctx: _OverheadContext, s: tuple[int, int, int], missing: bool) -> dict:
    """One shape's server-mode medians and each subject's overhead over the reference subject: the
    kernel's own entry on an exported shape, the plainest matmul (or the C fallback) on ``missing``."""
    from harness.timing import server

    m, n, k = s
    subjects = _overhead_subjects(ctx, s, missing)
    res = server(ctx.cp, ctx.stream, subjects, qps=ctx.qps, calls_per_subject=ctx.calls)
    ref = "direct_ctypes" if not missing else next(
        (r for r in ("cupy_matmul", "torch_matmul", "c_fallback") if r in subjects), "c_dispatch")
    base = res[ref]["median_ms"]
    tuned = hasattr(ctx.cdll, "l2hgemm_fallback_tuned")
    return {"shape": list(s), "route": ctx.lib.route(m, n, k).kind, "reference": ref,
            "fallback_tuned": ctx.cdll.l2hgemm_fallback_tuned(m, n, k) if missing and tuned else None,
            "median_us": {lab: v["median_ms"] * 1e3 for lab, v in res.items()},
            "p90_us": {lab: v["p90_ms"] * 1e3 for lab, v in res.items()},
            "overhead_us": {lab: (v["median_ms"] - base) * 1e3 for lab, v in res.items() if lab != ref}}


def _print_overhead_row(row: dict) -> None:
    m, n, k = row["shape"]
    ref = row["reference"]
    tuned = "" if row["fallback_tuned"] is None else f" (fallback tuned over {row['fallback_tuned']} algorithms)"
    print(f"  {m}x{n}x{k} {row['route']:8} ref {ref} {row['median_us'][ref]:.1f} us; overhead "
          + ", ".join(f"{lab} {o:+.1f} us" for lab, o in row["overhead_us"].items()) + tuned, file=sys.stderr)


def _overhead_subjects(ctx: _OverheadContext, s: tuple[int, int, int],
                       missing: bool) -> dict[str, Callable[[], int]]:
    """The calls timed on one shape, each on fresh operands of the export's type: a reference (the
    kernel's entry, or on ``missing`` a plain matmul and the C fallback), the C dispatcher, and
    ``runtime``'s ``matmul`` on cupy arrays and on torch tensors when torch is there. A function of
    its own so that every call binds this shape's operands, not a loop's latest."""
    from l2tui.export import runtime

    cp, torch, cdll, lib = ctx.cp, ctx.torch, ctx.cdll, ctx.lib
    m, n, k = s
    a, b, c = _operands(cp, m, n, k, ctx.dtype)
    pa, pb, pc, sp = a.data.ptr, b.data.ptr, c.data.ptr, ctx.stream.ptr
    subjects: dict[str, Callable[[], int]] = {}
    if not missing:
        direct = runtime._argtypes(getattr(cdll, manifest_symbol(ctx.manifest, s)))
        subjects["direct_ctypes"] = lambda: direct(pa, pb, pc, m, n, k, sp)
    elif ctx.dtype == "fp16":
        subjects["cupy_matmul"] = lambda: (cp.matmul(a, b, out=c), 0)[1]
    elif torch is not None:   # (cupy would multiply bf16 bit patterns as integers)
        ra, rb, rc = _torch_views(ctx, a, b, c)
        subjects["torch_matmul"] = lambda: (torch.matmul(ra, rb, out=rc), 0)[1]
    if missing and hasattr(cdll, "l2hgemm_fallback"):
        fallback = runtime._argtypes(cdll.l2hgemm_fallback)
        subjects["c_fallback"] = lambda: fallback(pa, pb, pc, m, n, k, sp)
    subjects["c_dispatch"] = lambda: ctx.disp(pa, pb, pc, m, n, k, sp)
    subjects["py_matmul_cupy"] = lambda: (lib.matmul(a, b, out=c), 0)[1]
    if torch is not None:
        ta, tb, tc = _torch_views(ctx, a, b, c)
        subjects["py_matmul_torch"] = lambda: (lib.matmul(ta, tb, out=tc), 0)[1]
    return subjects


def _torch_views(ctx: _OverheadContext, *arrays: Array) -> tuple[Array, ...]:
    """Torch tensors on the same memory as the cupy ``arrays``: bfloat16 views of a bf16 export's
    uint16 bit patterns (through int16, torch's 16-bit integer), plain tensors for fp16."""
    torch = ctx.torch
    assert torch is not None, "called only where torch is installed"
    if ctx.dtype == "bf16":
        return tuple(torch.as_tensor(x.view(ctx.cp.int16), device="cuda").view(torch.bfloat16) for x in arrays)
    return tuple(torch.as_tensor(x, device="cuda") for x in arrays)


#: ``l2hgemm_fallback_choice``'s return codes
CHOICES = {0: "not called", 1: "cublaslt pinned", 2: "cublaslt tuned", 3: "cublas pinned", 4: "cublas tuned",
           5: "cublaslt heuristic", -1: "cublaslt failed"}


def fallback_choices(root: Path, so: Path, rows: list[dict]) -> None:
    """Adds ``fallback_choice`` to every fallback row: how the library's fallback chose its algorithm.

    Asked in this process after one ``l2hgemm`` call per shape (the timing ran in the harness's
    worker, whose state is not reachable): a pinned choice is the same in every process; a tuned
    one is this process's tuning, which may differ from the worker's."""
    import cupy as cp

    from l2tui.export import runtime

    cdll = ctypes.CDLL(str(so))
    if not hasattr(cdll, "l2hgemm_fallback_choice"):
        return
    from l2tui.export.manifest import load as load_manifest
    from l2tui.export.manifest import manifest_dtype

    dtype = manifest_dtype(load_manifest(root))
    disp = runtime._argtypes(cdll.l2hgemm)
    choice = cdll.l2hgemm_fallback_choice
    choice.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
    stream = cp.cuda.Stream(non_blocking=True)
    for row in rows:
        if row["path"] != "fallback":
            continue
        m, n, k = row["shape"]
        with stream:
            a, b, c = _operands(cp, m, n, k, dtype, ones=True)
            rc = disp(a.data.ptr, b.data.ptr, c.data.ptr, m, n, k, stream.ptr)
            stream.synchronize()
        index = ctypes.c_int(-1)
        how = choice(m, n, k, ctypes.byref(index)) if rc == 0 else None
        row["fallback_choice"] = {"how": CHOICES.get(how, f"code {how}") if how is not None else f"call failed ({rc})",
                                  "index": index.value if index.value >= 0 else None}
        del a, b, c


def manifest_symbol(manifest: dict, s: tuple[int, int, int]) -> str:
    for e in manifest["kernels"]:
        if tuple(e["shape"]) == s:
            return str(e["symbol"])
    raise KeyError(s)


#: the bench's result document (``--out``): JSON values under fixed keys, written by :func:`_measure`
BenchDoc = dict[str, Any]


def _parser() -> argparse.ArgumentParser:
    """The command line: what to time, how (offline replays and repeats, server-mode rate) and where."""
    from l2tui.export.cdispatch import FALLBACK_ENV, FALLBACK_MODES

    p = argparse.ArgumentParser(prog="python -m l2tui.export.bench", description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("dir", metavar="DIR", help="export folder (from l2tui export [--build])")
    p.add_argument("--out", metavar="FILE", help="write the results as JSON here")
    p.add_argument("--baselines", default="cublas,cublaslt_heuristic,cublaslt_autotune,torch")
    p.add_argument("--replays", type=int, default=7, help="offline replays per subject (default 7)")
    p.add_argument("--repeats", type=int, default=1, metavar="N",
                   help="time every shape N times, in rounds over all shapes, and report each subject's "
                        "median (default 1)")
    p.add_argument("--timing", choices=("isolated", "chained"), default="isolated",
                   help="offline timing: isolated = per call, each call after an unrelated kernel (default, "
                        "the headline); chained = back to back")
    p.add_argument("--qps", type=float, default=200.0, help="server mode arrival rate (default 200)")
    p.add_argument("--calls", type=int, default=200, help="server mode calls per subject (default 200)")
    p.add_argument("--overhead-shapes", type=int, default=4, metavar="N",
                   help="exported kernel shapes to measure overhead on (smallest first; default 4)")
    p.add_argument("--missing", action="append", metavar="MxNxK",
                   help="a shape without a kernel (fallback path), timed offline too and the first one in the "
                        "overhead section; repeatable (default 96x80x48)")
    p.add_argument("--fallback", choices=FALLBACK_MODES,
                   help=f"set {FALLBACK_ENV} for this run (default: as in the environment, else {FALLBACK_MODES[0]})")
    p.add_argument("--skip-offline", action="store_true", help="only the overhead measurement")
    p.add_argument("--shapes", action="append", metavar="SPEC", help="only these exported shapes (MxNxK, a set, a file)")
    p.add_argument("--dtype", choices=("fp16", "bf16"), default=None,
                   help="the element type the export must hold (default: the manifest's; a mismatch is refused)")
    return p


def main(argv: list[str] | None = None) -> int:
    from harness.errors import HarnessError
    from l2tui.export.cdispatch import FALLBACK_ENV

    p = _parser()
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error("--repeats must be 1 or more")
    if args.fallback:  # before anything loads the library or starts the harness worker: both read it once
        os.environ[FALLBACK_ENV] = args.fallback
    keep: list[Path] = []
    try:
        doc = _measure(args, keep)
    except HarnessError as e:
        print(f"export-bench: error: {e}", file=sys.stderr)
        return 2
    finally:
        for d in keep:
            shutil.rmtree(d, ignore_errors=True)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
    _print_summary(doc)
    return 0


@dataclass(frozen=True)
class _ShapePlan:
    """Which shapes each measurement covers: every chosen exported shape offline, the smallest kernel
    shapes for overhead, and the shapes without a kernel (the first of them in the overhead too)."""
    shapes: list[tuple[int, int, int]]
    kernel_shapes: list[tuple[int, int, int]]
    missing: list[tuple[int, int, int]]


def _shape_plan(manifest: dict, args: argparse.Namespace) -> _ShapePlan:
    """The shapes ``--shapes`` and ``--missing`` pick out of the manifest (all exported ones by default)."""
    from harness.shapes import parse_shape, resolve_shapes

    want = {(x.m, x.n, x.k) for x in resolve_shapes(args.shapes)} if args.shapes else None
    chosen = [e for e in manifest["kernels"] if want is None or tuple(e["shape"]) in want]
    kernel_shapes = sorted((tuple(e["shape"]) for e in chosen if not e.get("fallback")),
                           key=lambda s: (s[0] * s[1] * s[2], s))
    return _ShapePlan(shapes=sorted(tuple(e["shape"]) for e in chosen), kernel_shapes=kernel_shapes,
                      missing=[(x.m, x.n, x.k) for x in (parse_shape(t) for t in (args.missing or ["96x80x48"]))])


def _measure(args: argparse.Namespace, keep: list[Path]) -> BenchDoc:
    """Both measurements into one document; a library built on the way goes under a folder added to
    ``keep`` (the caller removes them). The dtype check comes before any GPU work."""
    from harness.gpuinfo import require_gpu
    from harness.timing import MODE_LABELS
    from l2tui.export.cdispatch import fallback_mode
    from l2tui.export.core import git_revision
    from l2tui.export.manifest import load as load_manifest
    from l2tui.paths import REPO_ROOT

    root = Path(args.dir).resolve()
    manifest = load_manifest(root)
    dtype = bench_dtype(manifest, args.dtype, str(root))
    gpu = require_gpu()
    so = _library(root, manifest, gpu.arch, keep)
    plan = _shape_plan(manifest, args)
    doc: BenchDoc = {
        "what": "l2tui export bench", "export": str(root), "gpu": gpu.to_dict(),
        "fallback": fallback_mode(),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "git_revision": git_revision(REPO_ROOT), "library": str(so), "command": sys.argv,
        "timing": args.timing, "mode_label": MODE_LABELS[args.timing], "dtype": dtype,
    }
    if not args.skip_offline:
        print(f"library vs best baseline ({MODE_LABELS[args.timing]}, graph replay, checked):", file=sys.stderr)
        doc["offline"] = library_vs_best(so, manifest, plan.shapes, arch=gpu.arch, baselines=args.baselines,
                                         replays=args.replays, missing=plan.missing, timing=args.timing,
                                         repeats=args.repeats)
        doc["repeats"] = args.repeats
        doc.update(summarize(doc["offline"]))
        fallback_choices(root, so, doc["offline"])
    print(f"dispatcher overhead (server mode, {args.qps:g} QPS, {args.calls} calls/subject):", file=sys.stderr)
    doc["overhead"] = dispatch_overhead(root, so, manifest, plan.kernel_shapes[: args.overhead_shapes],
                                        qps=args.qps, calls=args.calls, missing=plan.missing[0])
    return doc


def _print_summary(doc: BenchDoc) -> None:
    """The verdict on stdout: the offline promise (when measured) and each shape's dispatch overhead."""
    if "min_ratio_vs_best" in doc:
        exported = sum(1 for r in doc["offline"] if r["exported"])
        best = doc["min_ratio_vs_best"]
        print(f"{doc['mode_label']}; fallback: {doc['fallback']}; min library/best-baseline speed ratio over {exported} exported "
              f"shape(s): {'%.3fx' % best if best else '-'}; all checks ok: {doc['all_ok']}")
        same = doc.get("min_ratio_vs_best_same_layout")
        if same:
            print(f"  against the libraries on the library's own layout (cuBLAS NN, not TN's copy of B): "
                  f"min {same:.3f}x")
        for path, v in doc["per_path"].items():
            if v["shapes"]:
                print(f"  {path}: {v['shapes']} shape(s), min ratio vs best {v['min_ratio_vs_best']:.3f}x")
        for r in doc["below_1"]:
            print(f"  below 1.00x: {'x'.join(map(str, r['shape']))} ({r['path']}) "
                  f"{r['ratio_vs_best']:.3f}x vs {r['best_library']}")
    for r in doc["overhead"]:
        print(f"{'x'.join(map(str, r['shape']))} ({r['route']}): " +
              ", ".join(f"{k} {v:+.1f} us" for k, v in r["overhead_us"].items()))


if __name__ == "__main__":  # pragma: no cover
    os.environ.setdefault("CUPY_TF32", "0")
    sys.exit(main())
