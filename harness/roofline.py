"""Roofline per shape: measured peak fp16 tensor rate, copy bandwidth and launch floor.

Measured once per GPU inside the worker and cached in
``harness.paths.roofline_cache_file(uuid)``:

* ``peak_tflops``  best of the cuBLAS shim (fp16 in/out, fp32 accumulate) on 8192^3 and
  12288^3, timed with the offline method (CUDA graph, median of replays);
* ``bw_gbs``       the larger of a 1 GiB copy kernel ((read + write bytes) / time) and a 1 GiB
                   read-only kernel, 16-byte accesses, each in a graph (GEMM traffic is mostly reads);
* ``floor_ms``     an empty kernel launched 1000 times back to back in a graph, per launch.

``roofline_ms(shape) = max(flops / peak, min_bytes / bw, floor)`` where min_bytes reads A
and B once and writes C once in fp16. For decode shapes (M <= 128, N and K >= 1,024) the bench
summary also reports the fraction of the *B-read floor*, the time to read B once at ``bw_read_gbs``
(:func:`b_floor_table`), which a bench file's ``meta["roofline"]`` holds.  The same numbers are used for ``acc=f16`` (Hopper's
dense fp16 tensor rate is the same with fp16 or fp32 accumulation).
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from .cupy_types import CudaStream, CupyModule
from .shapes import Shape

CACHE_VERSION = 3


def roofline_ms(shape: Shape, rf: dict[str, Any] | None) -> float | None:
    if not rf:
        return None
    t_flop = shape.flops / (rf["peak_tflops"] * 1e12) * 1e3
    t_mem = shape.min_bytes / (rf["bw_gbs"] * 1e9) * 1e3
    return float(max(t_flop, t_mem, rf["floor_ms"]))


def load(path: Path) -> dict[str, Any] | None:
    try:
        d = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(d, dict) or d.get("version") != CACHE_VERSION \
            or not all(k in d for k in ("peak_tflops", "bw_gbs", "floor_ms")):
        return None
    return d


def save(path: Path, rf: dict[str, Any]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(rf, indent=1))
    os.replace(tmp, path)


def measure(cp: CupyModule, stream: CudaStream, shim_fn: Callable[..., int], shim_lib: ctypes.CDLL) -> dict[str, Any]:
    """Worker side: measure the three ceilings (about a second of GPU time)."""
    from . import timing

    t0 = time.monotonic()
    peak = 0.0
    for n in (8192, 12288):
        with stream:
            a = cp.random.standard_normal((n, n), dtype=cp.float32).astype(cp.float16)
            b = cp.random.standard_normal((n, n), dtype=cp.float32).astype(cp.float16)
            c = cp.empty((n, n), dtype=cp.float16)
        call = partial(shim_fn, int(a.data.ptr), int(b.data.ptr), int(c.data.ptr), n, n, n, int(stream.ptr))
        g = timing.make_graph(cp, stream, "peak", call, target_ms=5.0)
        r = timing.offline(cp, stream, [g], replays=5)["peak"]
        peak = max(peak, 2.0 * n ** 3 / (r["median_ms"] * 1e-3) / 1e12)
        del a, b, c, g
    nbytes = 1 << 30
    with stream:
        src = cp.ones(nbytes // 4, dtype=cp.float32)
        dst = cp.empty_like(src)
    kcopy = shim_lib.l2_copy
    kcopy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    kcopy.restype = ctypes.c_int
    sptr, dptr = int(src.data.ptr), int(dst.data.ptr)

    def copy() -> int:
        return int(kcopy(dptr, sptr, nbytes, stream.ptr))

    g = timing.make_graph(cp, stream, "copy", copy, target_ms=2.0)
    r = timing.offline(cp, stream, [g], replays=7)["copy"]
    bw_copy = 2.0 * nbytes / (r["median_ms"] * 1e-3) / 1e9
    del g
    kread = shim_lib.l2_read
    kread.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p]
    kread.restype = ctypes.c_int

    def read() -> int:
        return int(kread(sptr, nbytes, dptr, stream.ptr))

    g = timing.make_graph(cp, stream, "read", read, target_ms=2.0)
    r = timing.offline(cp, stream, [g], replays=7)["read"]
    bw_read = nbytes / (r["median_ms"] * 1e-3) / 1e9
    bw = max(bw_copy, bw_read)
    del g
    src = dst = None
    empty = shim_lib.l2_empty
    empty.argtypes = [ctypes.c_void_p]
    empty.restype = ctypes.c_int

    def launch() -> int:
        return int(empty(stream.ptr))

    g = timing.capture(cp, stream, launch, 1000)
    res = timing.offline(cp, stream, [timing.Graph("floor", g, 1000, 0.0)], replays=7)["floor"]
    floor = res["median_ms"]
    return {
        "l2_bytes": _l2_bytes(cp),
        "version": CACHE_VERSION,
        "peak_tflops": round(peak, 2),
        "bw_gbs": round(bw, 1),
        "bw_copy_gbs": round(bw_copy, 1),
        "bw_read_gbs": round(bw_read, 1),
        "floor_ms": floor,
        "measured_s": round(time.monotonic() - t0, 2),
        "method": "peak: cuBLAS shim 8192^3/12288^3 graph-timed; bw: max of a 1 GiB int4 copy kernel (2x bytes)"
                  " and a 1 GiB int4 read-only kernel, each in a graph;"
                  " floor: empty kernel x1000 in a graph",
    }


def _l2_bytes(cp: CupyModule) -> int | None:
    """The GPU's L2 size in bytes (None if the runtime does not say): where B fits, a per-call time
    may find it there from the previous call of the same GEMM."""
    try:
        v = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id).get("l2CacheSize")
    except Exception:
        return None
    return l2_bytes({"l2_bytes": v})


# ---------------------------------------------------------------- the B-read floor of decode shapes

#: decode ("skinny") shapes: few rows of A against a weight matrix B of at least this many rows
#: and columns, where the time to read B once bounds the call
SKINNY_MAX_M = 128
SKINNY_MIN_NK = 1024


def is_skinny(shape: Shape) -> bool:
    """Whether ``shape`` is a decode GEMM: M <= 128 tokens, N and K in the thousands."""
    return shape.m <= SKINNY_MAX_M and shape.n >= SKINNY_MIN_NK and shape.k >= SKINNY_MIN_NK


def read_bandwidth_gbs(rf: Mapping[str, object] | None) -> float | None:
    """The measured read bandwidth of a roofline record (a bench file's ``meta["roofline"]``):
    the read-only kernel's, else the larger of copy and read; None when absent or not a number."""
    if not isinstance(rf, Mapping):
        return None
    for key in ("bw_read_gbs", "bw_gbs"):
        v = rf.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 and v == v and v != float("inf"):
            return float(v)
    return None


def b_read_floor_ms(shape: Shape, rf: Mapping[str, object] | None) -> float | None:
    """The time to read B (K x N fp16) once at the measured read bandwidth: a decode GEMM's floor."""
    bw = read_bandwidth_gbs(rf)
    return None if bw is None else 2.0 * shape.k * shape.n / (bw * 1e9) * 1e3


def b_floor_fractions(rows: Sequence[Mapping[str, Any]], rf: Mapping[str, object] | None,
                      labels: Sequence[str]) -> list[tuple[Shape, float, dict[str, float | None]]]:
    """Per decode shape of ``rows`` (bench result rows): its B-read floor in ms and, per label, the
    fraction of that floor the label's time reached (floor / time; None where it has no time).
    Empty when the record has no bandwidth."""
    out = []
    for r in rows:
        try:
            shape = Shape(int(r["m"]), int(r["n"]), int(r["k"]))
        except (KeyError, TypeError, ValueError):
            continue
        floor = b_read_floor_ms(shape, rf) if is_skinny(shape) else None
        if floor is None:
            continue
        raw_times = r.get("times_ms")
        times: Mapping[str, object] = raw_times if isinstance(raw_times, Mapping) else {}
        fr: dict[str, float | None] = {}
        for lb in labels:
            t = times.get(lb)
            fr[lb] = floor / t if isinstance(t, (int, float)) and not isinstance(t, bool) and t > 0 else None
        out.append((shape, floor, fr))
    return out


def l2_bytes(rf: Mapping[str, object] | None) -> int | None:
    """The L2 size a roofline record holds (files measured before it was recorded have none)."""
    v = rf.get("l2_bytes") if isinstance(rf, Mapping) else None
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def b_fits_in_l2(shape: Shape, rf: Mapping[str, object] | None) -> bool:
    """Whether B (K x N, two bytes an element) fits in the L2 the record names."""
    l2 = l2_bytes(rf)
    return l2 is not None and 2 * shape.k * shape.n <= l2


def b_floor_table(rows: Sequence[Mapping[str, Any]], rf: Mapping[str, object] | None,
                  labels: Sequence[str]) -> list[str]:
    """Lines for a bench summary: per decode shape the B-read floor in microseconds and each
    label's fraction of it (e.g. ``0.87``), then each label's geomean. A shape whose B fits in the
    GPU's L2 is marked, and a last line says why its fractions can pass 1: per call B may still be
    there from the previous call of the same GEMM, which in a model (another layer's weights every
    GEMM) it is not. No lines without decode shapes or a measured bandwidth."""
    per = b_floor_fractions(rows, rf, labels)
    if not per:
        return []
    bw = read_bandwidth_gbs(rf)
    lines = [f"fraction of the B-read floor (decode shapes, M <= {SKINNY_MAX_M}; B read once at {bw:.0f} GB/s)",
             f"{'shape':22}{'floor us':>10}" + "".join(f"{lb[:14]:>15}" for lb in labels)]
    marked = False
    for shape, floor, fr in per:
        cells = "".join(f"{v:>15.2f}" if v is not None else f"{'-':>15}" for v in fr.values())
        mark = "*" if b_fits_in_l2(shape, rf) else ""
        marked = marked or bool(mark)
        lines.append(f"{str(shape) + mark:22}{floor * 1e3:>10.1f}" + cells)
    geo = []
    for lb in labels:
        xs = [x for _, _, fr in per if (x := fr[lb])]
        geo.append(f"{math.exp(sum(math.log(x) for x in xs) / len(xs)):>15.2f}" if xs else f"{'-':>15}")
    lines.append(f"{'geomean':22}{'':>10}" + "".join(geo))
    if marked:
        l2 = l2_bytes(rf) or 0
        lines.append(f"* B fits in the L2 ({l2 / 2**20:.0f} MiB): per call it may still be there from the previous "
                     "call, so the fraction can pass 1; in a model each layer's weights come from memory")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m harness.roofline FILE...``: the B-read-floor table of bench result files."""
    import argparse

    from .errors import HarnessError
    from .results import load as load_results

    ap = argparse.ArgumentParser(prog="python -m harness.roofline",
                                 description="fraction of the B-read floor per decode shape of l2tui bench files")
    ap.add_argument("files", nargs="+", help="l2tui bench result files (.json)")
    args = ap.parse_args(argv)
    for path in args.files:
        try:
            rf = load_results(path)
        except HarnessError as e:
            print(f"roofline: {e}", file=sys.stderr)
            return 2
        lines = b_floor_table(rf.rows, rf.meta.get("roofline"), rf.labels())
        print(f"{path}:")
        print("\n".join(lines) if lines else "  no decode shapes (M <= 128, N and K >= 1,024) or no measured bandwidth")
    return 0


if __name__ == "__main__":
    sys.exit(main())
