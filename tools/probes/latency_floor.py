#!/usr/bin/env python3
"""Measure the latency floor of a chain of tiny dependent kernels, graph-replayed (H200 probe).

    nvcc -O3 -shared -Xcompiler -fPIC -gencode=arch=compute_90a,code=sm_90a \
        tools/probes/latency_floor.cu -o latency_floor.so
    python tools/probes/latency_floor.py --so latency_floor.so --out $OUT/latency-floor.json

Why: a 64x64x64 GEMM takes ~1.6 us per call in the offline bench while an empty kernel costs
~0.5 us; this splits the difference into the launch, the wait on the previous kernel (PDL),
the first global load and the store, with and without PDL, on 1 and 4 CTAs, so a
latency-bound kernel family knows what it can still win. Same method as the harness's offline
timing: R calls captured back to back in one CUDA graph, replays timed with events.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
from pathlib import Path

MODES = {0: "empty", 1: "wait", 5: "wait+store 8KB", 7: "wait+load 16KB+store 8KB",
         15: "trigger first, wait+load+store"}


def main(argv=None) -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--so", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=400)
    ap.add_argument("--replays", type=int, default=15)
    args = ap.parse_args(argv)
    lib = ctypes.CDLL(args.so)
    fn = lib.probe_launch
    fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                   ctypes.c_void_p]
    fn.restype = ctypes.c_int
    a = torch.randn(1 << 16, device="cuda", dtype=torch.float16)
    c = torch.empty(1 << 16, device="cuda", dtype=torch.float16)
    n16 = 16384 // 16
    stream = torch.cuda.Stream()
    rows = []
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    for _ in range(20):  # warm the clocks up
        x @ x
    torch.cuda.synchronize()
    for ctas in (1, 4):
        for pdl in (0, 1):
            for mode, what in MODES.items():
                with torch.cuda.stream(stream):
                    for _ in range(3):
                        assert fn(mode, a.data_ptr(), c.data_ptr(), n16, ctas, pdl, stream.cuda_stream) == 0
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g, stream=stream):
                        for _ in range(args.reps):
                            fn(mode, a.data_ptr(), c.data_ptr(), n16, ctas, pdl, torch.cuda.current_stream().cuda_stream)
                    g.replay()
                    per = []
                    for _ in range(args.replays):
                        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        e0.record()
                        g.replay()
                        e1.record()
                        e1.synchronize()
                        per.append(e0.elapsed_time(e1) * 1e3 / args.reps)
                rows.append({"mode": what, "ctas": ctas, "pdl": bool(pdl), "us_per_call": round(statistics.median(per), 3)})
                print(f"{what:32s} ctas={ctas} pdl={pdl}: {rows[-1]['us_per_call']:.3f} us", flush=True)
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    env = {}
    try:
        from harness.bench import _git_rev
        env["git_rev"] = _git_rev()
    except Exception:  # noqa: BLE001 - the probe stands alone
        pass
    env.update(gpu=torch.cuda.get_device_name(), torch=torch.__version__)
    Path(args.out).write_text(json.dumps({"probe": "latency_floor", "env": env, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
