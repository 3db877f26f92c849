"""Correctness checks, run inside the GPU worker (cupy is passed in, never imported here at module level).

Every subject (candidate or baseline) writes the same guarded buffers, so the
checks are identical for all.  Named checks, in the order a failure is reported:

``runs``          the call returned 0 and raised nothing (non-zero -> status ``unsupported``)
``written``       C is poisoned with NaN before every run; every element must be overwritten
``guards``        64 KiB sentinel regions before and after A, B, Bt and C must stay untouched
``stale``         fresh inputs written into the SAME buffers must change the output
                  (catches kernels that cache results by pointer or by shape)
``accuracy``      relative Frobenius error vs an fp32-accumulated reference of the upcast
                  inputs (TF32 off; float64 for small problems), per seed, must be <= bound
``exact``         0/1 inputs with at most 2048 non-zero terms per dot product (sums are exact
                  integers in fp16): output must match the exact reference bit for bit
``deterministic`` a second run on the same inputs agrees bit for bit (or, for a source marked
                  ``// l2: nondeterministic``, within the accuracy bound)
``graph_replay``  after timing, C is poisoned and the timed CUDA graph replayed once; the output
                  must again pass written/guards/accuracy

Bounds (see the README, "Checking and timing kernels"):
  f32:  max(2 * e32, 1e-6)             e32 = the cuBLAS shim's own error (CUBLAS_COMPUTE_32F)
  f16:  max(2 * e16, 2 * e32, 1e-3)    e16 = the cuBLAS shim's error with CUBLAS_COMPUTE_16F
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

GUARD_BYTES = 64 << 10
SENTINEL = 0xA5
CHECK_ORDER = ("runs", "written", "guards", "stale", "accuracy", "exact", "deterministic", "graph_replay")
EXACT_MAX_TERMS = 2048          # integers up to 2048 are exact in fp16
F32_FLOOR = 1e-6
F16_FLOOR = 1e-3
F64_REF_MAX_MNK = 1 << 30       # float64 reference below this many multiply-adds


class GuardedBuffer:
    """A device array with sentinel-filled guard regions on both sides."""

    def __init__(self, cp: Any, shape: tuple[int, int], dtype: Any) -> None:
        self.cp = cp
        itemsize = cp.dtype(dtype).itemsize
        self.nbytes = shape[0] * shape[1] * itemsize
        padded = (self.nbytes + 255) // 256 * 256
        self.raw = cp.empty(GUARD_BYTES + padded + GUARD_BYTES, dtype=cp.uint8)
        self.raw.fill(SENTINEL)
        self.data = self.raw[GUARD_BYTES:GUARD_BYTES + self.nbytes].view(dtype).reshape(shape)
        self.ptr = int(self.data.data.ptr)
        self.head = self.raw[:GUARD_BYTES]
        self.tail = self.raw[GUARD_BYTES + self.nbytes:]

    def bad_guard_bytes(self) -> Any:
        """Device scalar: number of guard bytes that lost the sentinel."""
        cp = self.cp
        return cp.count_nonzero(self.head != SENTINEL) + cp.count_nonzero(self.tail != SENTINEL)

    def reset_guards(self) -> None:
        self.head.fill(SENTINEL)
        self.tail.fill(SENTINEL)


@dataclass
class CheckRecord:
    """Results of every named check for one subject on one shape."""

    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    rel_err: float = 0.0
    bound: float = 0.0
    unsupported: bool = False

    def put(self, name: str, ok: bool, detail: str = "", **extra: Any) -> None:
        prev = self.results.get(name)
        if prev is not None and not prev["ok"]:
            return  # keep the first failure of a check
        self.results[name] = {"ok": bool(ok), "detail": detail, **extra}

    def failed(self) -> str | None:
        for name in CHECK_ORDER:
            r = self.results.get(name)
            if r is not None and not r["ok"]:
                return name
        return None

    def summary(self) -> dict[str, Any]:
        failed = self.failed()
        detail = self.results[failed]["detail"] if failed else "all checks passed"
        return {
            "ok": failed is None and not self.unsupported,
            "failed": failed,
            "detail": detail,
            "rel_err": self.rel_err,
            "bound": self.bound,
            "checks": self.results,
        }


def fp16_normal(cp: Any, rs: Any, shape: tuple[int, int]) -> Any:
    return rs.standard_normal(shape, dtype=cp.float32).astype(cp.float16)


def fill_random(cp: Any, seed: int, a: Any, b: Any) -> None:
    """Fresh random-normal inputs written into the existing buffers (same pointers every time)."""
    rs = cp.random.RandomState(seed)
    a[...] = fp16_normal(cp, rs, a.shape)
    b[...] = fp16_normal(cp, rs, b.shape)


def fill_binary(cp: Any, seed: int, a: Any, b: Any) -> None:
    """0/1 inputs; when K > 2048 only 2048 random columns of A are non-zero, so every
    partial sum is an integer <= 2048 and exact in fp16 whatever the summation order."""
    rs = cp.random.RandomState(seed)
    m, k = a.shape
    a01 = (rs.random_sample((m, k), dtype=cp.float32) < 0.5)
    if k > EXACT_MAX_TERMS:
        keep = cp.zeros(k, dtype=cp.bool_)
        keep[rs.permutation(k)[:EXACT_MAX_TERMS]] = True
        a01 &= keep[None, :]
    a[...] = a01.astype(cp.float16)
    b[...] = (rs.random_sample(b.shape, dtype=cp.float32) < 0.5).astype(cp.float16)


def reference(cp: Any, a: Any, b: Any) -> Any:
    """fp32-accumulated reference of the upcast inputs (CUPY_TF32 is 0 in the worker);
    float64 for problems small enough that it costs nothing."""
    m, k = a.shape
    n = b.shape[1]
    dt = cp.float64 if m * n * k <= F64_REF_MAX_MNK else cp.float32
    return cp.matmul(a.astype(dt), b.astype(dt))


def ref_norm(cp: Any, ref: Any) -> float:
    return float(cp.sqrt(cp.sum(cp.square(ref), dtype=cp.float64)))


def rel_err(cp: Any, c: Any, ref: Any, norm: float) -> float:
    """||C - ref||_F / ||ref||_F (NaN/Inf anywhere -> inf)."""
    d = c.astype(ref.dtype) - ref
    num = float(cp.sqrt(cp.sum(cp.square(d), dtype=cp.float64)))
    if not math.isfinite(num):
        return math.inf
    return num / norm if norm > 0 else (0.0 if num == 0 else math.inf)


def bound_for(acc: str, e32: float, e16: float | None) -> float:
    if acc == "f16":
        return max(2 * (e16 if e16 is not None else e32), 2 * e32, F16_FLOOR)
    return max(2 * e32, F32_FLOOR)


def count_unwritten(cp: Any, c: Any) -> int:
    return int(cp.count_nonzero(~cp.isfinite(c)))
