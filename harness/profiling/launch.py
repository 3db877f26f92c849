"""The one-launch driver: the program ncu runs (``python -m harness.profiling.launch``).

For each item of a spec file it creates inputs with cupy on a fresh stream, warms
the call up (so first-call allocations, cuBLAS heuristics and clock ramp-up
happen outside the profiled region), then runs **one** call inside an NVTX
push/pop range named after the item, which ncu selects with
``--nvtx --nvtx-include "<range>/"``.  Every kernel of that call (split-K +
reduce, padding copies) is therefore captured, and input generation and
warm-up kernels are not.  Several items in one process amortise ncu's start-up.

Spec (JSON): ``{"nvtx": "cupy"|"torch"|"profiler", "items": [{"range": str,
"kind": "so"|"torch"|"cublaslt_heuristic"|"cublaslt_autotune", "so_path": str|null,
"symbol": str (default l2_hgemm),
"shape": [m, n, k], "acc": "f32"|"f16", "warmup": int}]}``.  ``nvtx: "profiler"``
brackets the call with cudaProfilerStart/Stop instead (for ``--profile-from-start off``).
Result (JSON): per item ``{"range", "status": ok|unsupported|error, "rc", "message"}``.
This module imports cupy only when run; never import it into the UI process.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
import traceback
from typing import Callable

from ..cupy_types import CudaStream, DeviceArray
from .items import ItemResult, LaunchItem, LaunchSpec


class _Nvtx:
    def __init__(self, backend: str) -> None:
        self.backend = backend
        if backend == "torch":
            import torch  # noqa: F401  (fail early, before any range is open)

    def push(self, name: str) -> None:
        if self.backend == "cupy":
            import cupy.cuda.nvtx as nvtx

            nvtx.RangePush(name)
        elif self.backend == "torch":
            import torch

            torch.cuda.nvtx.range_push(name)
        else:
            import cupy

            cupy.cuda.runtime.profilerStart()

    def pop(self) -> None:
        if self.backend == "cupy":
            import cupy.cuda.nvtx as nvtx

            nvtx.RangePop()
        elif self.backend == "torch":
            import torch

            torch.cuda.nvtx.range_pop()
        else:
            import cupy

            cupy.cuda.runtime.profilerStop()


def _make_call(item: LaunchItem, A: DeviceArray, B: DeviceArray, C: DeviceArray, stream: CudaStream) -> Callable[[], int]:
    m, n, k = item["shape"]
    kind = item["kind"]
    if kind == "so":
        lib = ctypes.CDLL(item["so_path"])
        f = getattr(lib, item.get("symbol") or "l2_hgemm")
        f.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 3 + [ctypes.c_void_p]
        f.restype = ctypes.c_int
        args = (A.data.ptr, B.data.ptr, C.data.ptr, m, n, k, stream.ptr)
        return lambda: int(f(*args))
    if kind == "torch":
        import torch

        ta, tb, tc = torch.from_dlpack(A), torch.from_dlpack(B), torch.from_dlpack(C)
        ts = torch.cuda.ExternalStream(stream.ptr)

        def call() -> int:
            with torch.cuda.stream(ts):
                torch.matmul(ta, tb, out=tc)
            return 0

        return call
    if kind in ("cublaslt_heuristic", "cublaslt_autotune"):
        return _lt_call(item, A, B, C, stream)
    raise ValueError(f"unknown item kind {kind!r}")


def _lt_call(item: LaunchItem, A: DeviceArray, B: DeviceArray, C: DeviceArray, stream: CudaStream) -> Callable[[], int]:
    """cuBLASLt through the baseline shim's C entry points, as the bench calls it.

    Heuristic: the heuristic's first algorithm. Autotuned: each of the heuristic's candidates
    (up to ``AUTOTUNE_MAX_CANDIDATES``) is timed here with CUDA events (one warm-up, then the
    median of five calls) and the fastest is selected; the bench screens them with its own
    timing method, so on a near tie the two may keep different algorithms (the profile names
    the kernel it measured)."""
    import cupy

    from ..baselines import AUTOTUNE_MAX_CANDIDATES

    m, n, k = item["shape"]
    f16 = int(item.get("acc") == "f16")
    shim = ctypes.CDLL(item["so_path"])
    for name in ("l2_hgemm_lt_heur", "l2_hgemm_lt_auto", "l2_hgemm_lt_heur_f16", "l2_hgemm_lt_auto_f16"):
        fn = getattr(shim, name)
        fn.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 3 + [ctypes.c_void_p]
        fn.restype = ctypes.c_int
    count = int(shim.l2_lt_plan(m, n, k, f16, AUTOTUNE_MAX_CANDIDATES))
    if count <= 0:
        raise RuntimeError(f"cuBLASLt heuristic returned no algorithm for {m}x{n}x{k} (shim status {count})")
    auto = item["kind"] == "cublaslt_autotune"
    entry = getattr(shim, ("l2_hgemm_lt_auto" if auto else "l2_hgemm_lt_heur") + ("_f16" if f16 else ""))
    args = (A.data.ptr, B.data.ptr, C.data.ptr, m, n, k, stream.ptr)
    if auto:
        timed: list[tuple[float, int]] = []
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        for idx in range(count):
            if shim.l2_lt_select(m, n, k, f16, 1, idx) != 0 or entry(*args) != 0:
                continue
            ms = []
            for _ in range(5):
                start.record(stream)
                entry(*args)
                end.record(stream)
                end.synchronize()
                ms.append(cupy.cuda.get_elapsed_time(start, end))
            timed.append((sorted(ms)[2], idx))
        if not timed:
            raise RuntimeError(f"no cuBLASLt algorithm ran on {m}x{n}x{k}")
        shim.l2_lt_select(m, n, k, f16, 1, min(timed)[1])
    return lambda: int(entry(*args))


def run_items(spec: LaunchSpec) -> list[ItemResult]:
    import cupy

    nvtx = _Nvtx(spec.get("nvtx", "cupy"))
    pool = cupy.get_default_memory_pool()
    out: list[ItemResult] = []
    for item in spec["items"]:
        res: ItemResult = {"range": item["range"], "status": "error", "rc": None, "message": ""}
        try:
            m, n, k = item["shape"]
            stream = cupy.cuda.Stream(non_blocking=True)       # one stream per call (see parse.split_by_range)
            with stream:
                A = cupy.random.standard_normal((m, k), dtype=cupy.float32).astype(cupy.float16)
                B = cupy.random.standard_normal((k, n), dtype=cupy.float32).astype(cupy.float16)
                C = cupy.zeros((m, n), dtype=cupy.float16)
            stream.synchronize()
            call = _make_call(item, A, B, C, stream)
            rc = 0
            for _ in range(max(1, int(item.get("warmup", 2)))):
                rc = call()
                if rc != 0:
                    break
            stream.synchronize()
            res["rc"] = rc
            if rc != 0:
                res["status"], res["message"] = "unsupported", f"l2_hgemm returned {rc}"
            else:
                nvtx.push(item["range"])
                try:
                    call()
                    stream.synchronize()
                finally:
                    nvtx.pop()
                res["status"] = "ok"
            del A, B, C, call
        except Exception as e:  # reported per item; the next item still runs
            res["message"] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
            traceback.print_exc(file=sys.stderr)
        pool.free_all_blocks()
        out.append(res)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--spec", required=True)
    ap.add_argument("--result", required=True)
    a = ap.parse_args(argv)
    with open(a.spec) as fh:
        spec = json.load(fh)
    results = run_items(spec)
    with open(a.result, "w") as fh:
        json.dump({"nvtx": spec.get("nvtx", "cupy"), "items": results}, fh, indent=1)
    # statuses travel in the result file: a non-zero exit would only make ncu print a second,
    # less precise error ("The application returned an error code")
    return 0


if __name__ == "__main__":
    sys.exit(main())
