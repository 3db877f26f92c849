"""Where the Python dispatcher's per-call time goes: cProfile of ``lib.matmul`` on the GPU.

    python tools/profile_matmul.py EXPORT_DIR [MxNxK] [--calls N]

Prints the top functions by cumulative time over N calls (cupy inputs, ``out=`` given, the
shape's route warmed up first), and the mean wall time per call with and without a stream sync.
A diagnostic for the export benchmark's overhead figures, not a test.
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import time


def main(argv: list[str]) -> int:
    import cupy as cp

    from l2tui.export import runtime

    root = argv[0]
    m, n, k = (int(x) for x in (argv[1] if len(argv) > 1 else "512x128x64").split("x"))
    calls = int(argv[argv.index("--calls") + 1]) if "--calls" in argv else 2000
    lib = runtime.load(root)
    a = cp.random.standard_normal((m, k), dtype=cp.float32).astype(cp.float16)
    b = cp.random.standard_normal((k, n), dtype=cp.float32).astype(cp.float16)
    c = cp.empty((m, n), dtype=cp.float16)
    for _ in range(50):
        lib.matmul(a, b, out=c)
    cp.cuda.get_current_stream().synchronize()
    print(f"route {lib.route(m, n, k)}")
    t0 = time.perf_counter()
    for _ in range(calls):
        lib.matmul(a, b, out=c)
    t1 = time.perf_counter()
    cp.cuda.get_current_stream().synchronize()
    print(f"enqueue only: {(t1 - t0) / calls * 1e6:.1f} us per call")
    t0 = time.perf_counter()
    for _ in range(calls // 4):
        lib.matmul(a, b, out=c)
        cp.cuda.get_current_stream().synchronize()
    print(f"with sync: {(time.perf_counter() - t0) / (calls // 4) * 1e6:.1f} us per call")
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(calls):
        lib.matmul(a, b, out=c)
    pr.disable()
    cp.cuda.get_current_stream().synchronize()
    pstats.Stats(pr).sort_stats("cumulative").print_stats(18)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
