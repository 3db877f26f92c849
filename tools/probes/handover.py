#!/usr/bin/env python3
"""Where a per-call GEMM's time goes around the kernel: its duration on the GPU and the gaps before
and after it, from CUPTI's kernel timestamps (H200 probe).

    python tools/probes/handover.py --shape 1024x512x2048 --kernel k.cu --out handover.json

Why: on some mid shapes our kernel ties cuBLASLt's under Nsight Compute (cold or warm caches) yet
trails it in the bench's per-call timing, which times a separator kernel and the call together in
a CUDA graph. ncu times one kernel from its first to its last instruction with its counters
replayed; it does not see the launch or the hand-over between kernels. This replays the bench's
step, a one-block separator that changes one element of A and then the GEMM, R times in a CUDA
graph (and, with --eager, as plain launches) under PyTorch's profiler, and reads every kernel's
start and end as CUPTI recorded them. Per subject it reports the median GEMM duration, the gap
from the separator's end to the GEMM's start (launch), and from the GEMM's end to the next
separator's start (drain), so "the kernel ties, the call does not" can be split into those parts.

Subjects: ``--kernel FILE`` (a .cu speaking the l2_hgemm ABI, built through the harness's cache,
or a built .so) as ``l2``, and the bench's own cuBLAS shim as ``cublas`` and ``cublaslt_heuristic``
(the heuristic's first algorithm). Needs a GPU, PyTorch and nvcc; writes JSON with the GPU,
driver, date, git revision and command.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def _so_for(kernel: str, arch: str) -> str:
    """A .so as given, or the harness's cached build of a .cu (one clear line if it does not build)."""
    if kernel.endswith(".so"):
        return kernel
    from harness.build import build

    res = build(Path(kernel).read_text(), arch=arch)
    if not res.ok:
        raise SystemExit(f"handover: {kernel} does not build: {res.error_text().splitlines()[-1]}")
    return str(res.so_path)


def _subjects(args: argparse.Namespace, m: int, n: int, k: int) -> dict[str, Callable[[int, int, int, int], int]]:
    """label -> call(A, B, C, stream) returning the ABI's status."""
    from harness.baselines import build_shim

    argt = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int,
            ctypes.c_void_p]
    out: dict[str, Callable[[int, int, int, int], int]] = {}
    if args.kernel:
        lib = ctypes.CDLL(_so_for(args.kernel, args.arch))
        fn = lib.l2_hgemm
        fn.argtypes, fn.restype = argt, ctypes.c_int
        out["l2"] = lambda a, b, c, s, fn=fn: fn(a, b, c, m, n, k, s)
    shim = ctypes.CDLL(str(build_shim(args.arch).so_path))
    cub = shim.l2_hgemm
    cub.argtypes, cub.restype = argt, ctypes.c_int
    out["cublas"] = lambda a, b, c, s: cub(a, b, c, m, n, k, s)
    if shim.l2_lt_plan(m, n, k, 0, 8) > 0:
        heur = shim.l2_hgemm_lt_heur
        heur.argtypes, heur.restype = argt, ctypes.c_int
        out["cublaslt_heuristic"] = lambda a, b, c, s: heur(a, b, c, m, n, k, s)
    return out


def _kernels(trace: dict[str, Any]) -> list[dict[str, Any]]:
    evs = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and e.get("cat") == "kernel"]
    return sorted(evs, key=lambda e: float(e["ts"]))


def _split(kernels: list[dict[str, Any]], sep_name: str) -> dict[str, Any]:
    """Median duration of the non-separator kernels and the gaps around them (microseconds)."""
    durs, before, after, steps = [], [], [], []
    for i, e in enumerate(kernels):
        if sep_name in e["name"] or i == 0 or sep_name not in kernels[i - 1]["name"]:
            continue
        prev = kernels[i - 1]
        start, dur = float(e["ts"]), float(e["dur"])
        durs.append(dur)
        before.append(start - (float(prev["ts"]) + float(prev["dur"])))
        if i + 1 < len(kernels):
            after.append(float(kernels[i + 1]["ts"]) - (start + dur))
            steps.append(float(kernels[i + 1]["ts"]) - float(prev["ts"]))
    med = lambda xs: round(statistics.median(xs), 3) if xs else None  # noqa: E731
    names = sorted({e["name"] for e in kernels if sep_name not in e["name"]})
    return {"kernel_us": med(durs), "gap_before_us": med(before), "gap_after_us": med(after),
            "step_us": med(steps), "samples": len(durs), "kernels": [nm[:120] for nm in names]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", required=True, metavar="MxNxK")
    ap.add_argument("--kernel", help="a .cu speaking the l2_hgemm ABI, or its built .so")
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=50, help="steps per graph (default 50)")
    ap.add_argument("--replays", type=int, default=5, help="graph replays traced per subject (default 5)")
    ap.add_argument("--eager", action="store_true", help="also trace the same steps launched without a graph")
    ap.add_argument("--arch", default="sm_90a")
    args = ap.parse_args(argv)
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
    except ImportError:
        print("handover: needs PyTorch (its profiler reads CUPTI's kernel timestamps)", file=sys.stderr)
        return 1
    if not torch.cuda.is_available():
        print("handover: no CUDA GPU visible to PyTorch", file=sys.stderr)
        return 1

    from harness.bench import _git_rev as git_rev
    from harness.shapes import parse_shape

    shp = parse_shape(args.shape)
    m, n, k = shp.m, shp.n, shp.k
    torch.manual_seed(0)
    a = (torch.randn(m, k, device="cuda") * 0.1).half()
    b = (torch.randn(k, n, device="cuda") * 0.1).half()
    c = torch.empty(m, n, device="cuda", dtype=torch.half)
    flat = a.view(-1)
    stream = torch.cuda.Stream()
    subjects = _subjects(args, m, n, k)

    def step(call: Callable[[int, int, int, int], int]) -> None:
        flat[:1].neg_()      # the separator: one block, one element of A changes sign
        rc = call(a.data_ptr(), b.data_ptr(), c.data_ptr(), stream.cuda_stream)
        if rc:
            raise SystemExit(f"handover: the call returned {rc}")

    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="handover-") as tmp:
        for label, call in subjects.items():
            with torch.cuda.stream(stream):
                for _ in range(3):
                    step(call)
                torch.cuda.synchronize()
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, stream=stream):
                    for _ in range(args.reps):
                        step(call)
                g.replay()
                torch.cuda.synchronize()
                modes: dict[str, Callable[[], None]] = {"graph": lambda g=g: [g.replay() for _ in range(args.replays)]}
                if args.eager:
                    modes["eager"] = lambda call=call: [step(call) for _ in range(args.reps * args.replays)]
                for mode, run in modes.items():
                    with profile(activities=[ProfilerActivity.CUDA]) as prof:
                        run()
                        torch.cuda.synchronize()
                    path = Path(tmp) / f"{label}-{mode}.json"
                    prof.export_chrome_trace(str(path))
                    kern = _kernels(json.loads(path.read_text()))
                    sep = next((e["name"] for e in kern if "elementwise" in e["name"] or "vectorized" in e["name"]), "")
                    results.setdefault(label, {})[mode] = _split(kern, sep) if sep else {"error": "no separator kernel traced"}
            print(f"{label}: " + ", ".join(f"{md} {r.get('kernel_us')} us in the kernel, gaps "
                                            f"{r.get('gap_before_us')} / {r.get('gap_after_us')} us"
                                            for md, r in results[label].items()), flush=True)
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,uuid", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip().splitlines()
    name, driver, uuid = (smi[0].split(", ") + ["", "", ""])[:3] if smi else ("", "", "")
    doc = {"meta": {"gpu": name, "driver": driver, "gpu_uuid": uuid, "torch": torch.__version__,
                    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                    "git_rev": git_rev(),
                    "command": "python tools/probes/handover.py " + " ".join(argv if argv is not None else sys.argv[1:]),
                    "shape": f"{m}x{n}x{k}", "reps": args.reps, "replays": args.replays,
                    "mode_label": "in the kernel, per call in a CUDA graph (CUPTI timestamps)",
                    "method": "CUPTI kernel timestamps (torch.profiler) of [separator, call] x reps in a CUDA graph "
                              "(and eagerly with --eager); medians over the steps; the separator is a one-block "
                              "elementwise kernel changing one element of A"},
           "subjects": results}
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
