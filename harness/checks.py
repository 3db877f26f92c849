"""Correctness checks, run inside the GPU worker (cupy is passed in, never imported here at module level).

Every subject (candidate or baseline) writes the same guarded buffers, so the
checks are identical for all.  Named checks, in the order a failure is reported:

``runs``          the call returned 0 and raised nothing (non-zero -> status ``unsupported``), and
                  left nothing running on the GPU off the caller's stream (harness.shape_eval.
                  device_busy_ms: probed after every check call and before timed calls)
``written``       C is poisoned with NaN before every run; every element must be overwritten
``guards``        64 KiB sentinel regions before and after A, B, Bt and C must stay untouched
``inputs``        A and B must be bit for bit what they were before the call (a kernel that marks its
                  inputs could recognise them on the next call and replay a cached C)
``stale``         fresh inputs written into the SAME buffers must change the output
                  (catches kernels that cache results by pointer or by shape)
``accuracy``      relative Frobenius error vs an fp32-accumulated reference of the upcast
                  inputs (TF32 off; float64 for small problems), per seed, must be <= bound
``exact``         0/1 inputs with at most 2048 non-zero terms per dot product (sums are exact
                  integers in fp16): output must match the exact reference bit for bit
``deterministic`` a second run on the same inputs agrees bit for bit (or, for a source marked
                  ``// l2: nondeterministic``, within the accuracy bound)
``graph_replay``  after timing, C is poisoned and the timed CUDA graph replayed twice (the second
                  replay's calls follow an unpoisoned C, as timed calls do); the output must again
                  pass written/guards/inputs/accuracy
``timed_calls``   every timed call is verified (per call and server modes, every subject): it follows a
                  change of one element of A (server mode: and, on a random half of the calls, C
                  poisoned) and rows of its C are checked right after it on the GPU (Freivalds, see
                  :class:`Verifier`): the changed row and VERIFY_ROWS - 1 others. A kernel that
                  skips work on some calls, memoizes, or only computes when C is poisoned fails
``fresh``         memoization by content (candidates, offline mode; back to back only, where the
                  timed calls repeat the same inputs; with ``--timing both``, the per-call time
                  against the back-to-back one): (1) a few elements of A are
                  changed in place, C poisoned, the timed graph replayed: its output must follow
                  (catches a kernel that hashes a sample of the inputs and replays a cached C);
                  (2) a graph whose every call follows a one-element change of A (a tiny kernel,
                  its own time measured apart and subtracted) must not be much slower per call
                  than the timed graph replayed in the same rounds (each time right after an
                  untimed replay of itself, so on unchanged inputs as when it was timed): catches
                  a kernel that hashes all of A and B and copies a cached C whenever they did not
                  change, as in every timed replay;
                  (3) every mode: calls that each follow a dense change of A (the signs of a fresh
                  random half of its elements flipped, :class:`SignFlipper`) must not be much
                  slower per call than calls that each follow a one-element change, timed in the
                  same rounds (per call: the headline's own rounds and per-call time), every call
                  of both verified: catches a kernel that keeps a copy of
                  its last inputs and product and only updates the rows a change touched, which is
                  right on every verified call but as cheap as a diff while one element changes
                  at a time (``harness/kernels/testbad_delta.cu``)

Bounds (see the README, "Checking and timing kernels"):
  f32:  max(2 * e32, 1e-6)             e32 = the cuBLAS shim's own error (CUBLAS_COMPUTE_32F)
  f16:  max(2 * e16, 2 * e32, 1e-3)    e16 = the cuBLAS shim's error with CUBLAS_COMPUTE_16F
  bf16: the same rule, e32 from the shim's bf16 GEMM and the floor scaled by the unit roundoff
        (2^-8 against fp16's 2^-11: max(2 * e32, 8e-6)); the exact check keeps partial sums <= 256

bf16 data lives in uint16 buffers on the worker (cupy has no bfloat16): :func:`to_float32` widens
the bits (the high half of an fp32) and :func:`from_float32` rounds to nearest even, both as plain
array operations, so the same code runs under cupy and numpy.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .cupy_types import CudaKernel, CudaStream, CupyDtype, CupyModule, DeviceArray, DeviceRandom
from .paths import KERNELS_DIR

if TYPE_CHECKING:
    import random

    import numpy as np
    from numpy.typing import NDArray

#: the CUDA of the checks' own kernels (package data); cupy compiles each text with NVRTC as it is
CHECK_KERNELS_DIR = KERNELS_DIR / "checks"


def _check_kernel(name: str) -> str:
    """One check kernel's source, read once at import: the file's text with nothing added (NVRTC
    compiles exactly what the file holds; tests/test_kernel_sources.py pins each digest)."""
    return (CHECK_KERNELS_DIR / name).read_text(encoding="utf-8")


GUARD_BYTES = 64 << 10
SENTINEL = 0xA5
CHECK_ORDER = ("runs", "written", "guards", "inputs", "stale", "accuracy", "exact", "deterministic", "timed_calls",
               "graph_replay", "fresh")
EXACT_MAX_TERMS = 2048          # integers up to 2048 are exact in fp16
F32_FLOOR = 1e-6
F16_FLOOR = 1e-3
F64_REF_MAX_MNK = 1 << 30       # float64 reference below this many multiply-adds
FRESH_SPARSE = 64               # elements of A changed before the sparse replay
FRESH_VALUE = 64.0              # their new magnitude: a stale C misses by ~ 64 * 8 / sqrt(M K) (0.03 at 16384^2)
FRESH_MAX_REPS = 200            # calls per fresh-input graph (per-call times; keeps the capture short)
FRESH_REPLAYS = 5
# A call after a change may cost this much more than a timed call before it counts as memoized:
# the PDL overlap of back-to-back calls is lost behind the perturbing kernel, launch latency is
# not amortized the same way. Calibrated on the H200 with tools/fresh_calibration.py: against the
# timed graph replayed in the same rounds (same_ms) and with the row verification, 1,000 honest
# winners reach fresh / timed 1.15 above 12 us, 1.13 on the largest (5.8 ms) and <= 2.3 us extra
# below 25 us (a reference timed apart from the fresh graphs, with other clocks and temperature,
# reaches 1.22 above 25 us and 3.9 us extra below). At 1.35x + 3 us every one of them keeps
# >= 16 % headroom. A kernel that
# memoizes by content gains at most about FRESH_RATIO x before it fails.
FRESH_RATIO = 1.35
FRESH_SLACK_MS = 0.003
# The values the perturbing kernel writes (each with either sign): large against unit-normal
# inputs, so the call that should follow the change moves a row of C by ~ |v| / sqrt(K) of its
# norm (>= 0.1 at K = 16384) and a skipped call is plain in the verification below
PERTURB_VALUES = (16.0, 24.0, 32.0)
# Every call of the fresh graph is verified on the GPU right after it (Freivalds on sampled rows:
# C[r] x against A[r] (B x) for a random +-1 vector x, relative to |C[r]|), on VERIFY_ROWS rows:
# the row the perturbing kernel just changed and rows drawn from a counter. A row may be off by
# max(VERIFY_ROW_FACTOR x the accuracy bound, VERIFY_ROW_FLOOR[acc]); fp16 rounding of an honest C
# puts rows at ~3e-4 (f32 accumulation) to ~1e-2 (f16, long K). With f32 accumulation the limit is
# ~3.3e-3 (the bound is ~4.1e-4): the 1,000 committed winners' worst verified row was 9.6e-4
# (2.3x the bound, kernels-offline.json), and a kernel that accumulates in fp16 on the timed calls
# only (it can tell them by C not being poisoned) leaves rows at ~5e-3 from K ~ 512 up, ~1e-2 at
# long K: the fp16 floor of 0.02 would let it through. B x is computed once (B does not change;
# recomputed after the graph to be sure): verifying every row each step read all of A, B and C
# between calls, evicted the operands from L2 and made honest calls on 32 MB operands look 2-3x
# slower in the fresh graph (false rejections of honest kernels)
VERIFY_ROWS = 8
VERIFY_THREADS = 1024   # per verified row: a row of 16,384 fp16 is two 16-byte loads per thread
VERIFY_ROW_FACTOR = 8.0
VERIFY_ROW_FLOOR = {"f32": 2e-3, "f16": 0.02}

PERTURB_SOURCE = _check_kernel("perturb.cu")

FLIP_SOURCE = _check_kernel("flip.cu")
FLIP_THREADS = 256
FLIP_MAX_BLOCKS = 1056   # eight blocks of 256 per SM of an H200: enough to stream A at full bandwidth

VERIFY_SOURCE = _check_kernel("verify.cu")


# What a kernel under test must not be able to predict: Freivalds' +-1 vector x (knowing it, C[r] =
# (A[r] B x / N) x passes a row's test at the cost of a matrix-vector product), which rows are
# verified (knowing them, after a change of all of A only those rows need computing) and the flip
# masks. The worker's random.Random is seeded from the shape, so that a run's order of timing
# rounds can be repeated; these come from the OS's entropy instead, per verifier, and reach the GPU
# as kernel arguments or as x (the device arrays a kernel could read are x, y = B x and counters).
def secret_signs(n: int) -> NDArray[np.float32]:
    """``n`` float32 values of +-1, each sign from the OS's entropy."""
    import numpy as np

    return np.random.default_rng(secrets.randbits(128)).choice(np.array([-1.0, 1.0], dtype=np.float32), n)


def secret_salt() -> int:
    """A 32-bit salt from the OS's entropy (the verified rows' hash, the flip masks)."""
    return secrets.randbits(32)


SEPARATE_ROWS = 4        # rows of C the separator verifies after each per-call timed call
SEPARATE_THREADS = 256

# The per-call timing's separator (harness.timing): one ordinary kernel of one block between two
# timed calls. It verifies the call before it on SEPARATE_ROWS rows of C (the row it changed before
# that call and rows drawn from its step counter and a secret salt; Freivalds, as l2_verify_rows), then changes one
# element of A for the call after it, and counts the step. The first step of a graph replay has no
# call before it in the graph (another subject may have written C since), so it only changes A; a
# tail launch (perturb = 0) at the end of every graph verifies the graph's last call. Verifying
# inside the separator means the timed calls are the verified ones: no call can tell a timed step
# from a verified one by the time between calls. verify.cu comes first: the separator calls its
# l2_salted_row and l2_row_residual.
SEPARATE_SOURCE = VERIFY_SOURCE + _check_kernel("separate.cu")


class Separator:
    """Launches ``l2_separate`` (kernels/checks/separate.cu) on ``stream``: ``step()`` between two
    timed calls (verify the last, change A for the next), ``tail()`` after a graph's last call. ``results()`` gives the
    verified error of every call so far, in call order (inf where a row was NaN or a call was not
    verified). ``steps`` is the number of calls per graph replay."""

    _kernels: dict[tuple[int, str], tuple[CudaKernel, CudaKernel]] = {}

    def __init__(self, cp: CupyModule, a: DeviceArray, b: DeviceArray, c: DeviceArray, stream: CudaStream,
                 capacity: int, steps: int, dtype: str = "fp16") -> None:
        self.cp, self.a, self.c, self.stream = cp, a, c, stream
        key = (id(cp), dtype)
        if key not in Separator._kernels:
            mod = cp.RawModule(code=SEPARATE_SOURCE)
            Separator._kernels[key] = (mod.get_function(kernel_name("l2_gemv", dtype)),
                                       mod.get_function(kernel_name("l2_separate", dtype)))
        gemv, self.kernel = Separator._kernels[key]
        self.m, self.k = int(a.shape[0]), int(a.shape[1])
        self.n = int(b.shape[1])
        self.steps = int(steps)
        self.salt = secret_salt()
        signs = secret_signs(self.n)
        with stream:
            self.x = cp.asarray(signs)
            self.y = cp.zeros(self.k, dtype=cp.float32)
            gemv(((self.k + 7) // 8,), (256,), (b, self.x, self.y, cp.uint64(0), cp.int32(self.k), cp.int32(self.n)))
            self.values = cp.asarray(perturb_bits(dtype))
            self.counter = cp.zeros(1, dtype=cp.uint32)
            self.row = cp.zeros(1, dtype=cp.uint32)
            self.capacity = int(capacity)
            self.worst = cp.full(self.capacity, cp.nan, dtype=cp.float32)

    def _launch(self, perturb: int) -> int:
        cp = self.cp
        with self.stream:  # (inside a capture of that stream too)
            self.kernel((1,), (SEPARATE_THREADS,), (self.a, self.c, self.x, self.y, cp.int32(self.m), cp.int32(self.n),
                                                     cp.int32(self.k), self.counter, self.row, self.worst,
                                                     cp.uint32(self.capacity), self.values, cp.int32(self.values.size),
                                                     cp.uint32(self.steps), cp.int32(perturb), cp.uint32(self.salt)))
        return 0

    def step(self) -> int:
        return self._launch(1)

    def tail(self) -> int:
        return self._launch(0)

    def reset(self) -> None:
        with self.stream:
            self.counter.fill(0)
            self.worst.fill(self.cp.nan)

    def calls(self) -> int:
        return int(self.counter.get()[0])

    def results(self) -> list[float]:
        n = min(self.calls(), self.capacity)
        return [float(v) if v == v else math.inf for v in self.worst[:n].get()]


class GuardedBuffer:
    """A device array with sentinel-filled guard regions on both sides."""

    def __init__(self, cp: CupyModule, shape: tuple[int, int], dtype: CupyDtype) -> None:
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

    def bad_guard_bytes(self) -> DeviceArray:
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

    def put(self, name: str, ok: bool, detail: str = "", **extra: object) -> None:
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


#: the element types the checks take, and each one's unit roundoff (half an ulp of 1)
UNIT_ROUNDOFF = {"fp16": 2.0 ** -11, "bf16": 2.0 ** -8}
#: the most non-zero terms per dot product of the exact check: every integer up to it is exact in
#: the element type (fp16: 11 significand bits, bf16: 8)
EXACT_TERMS = {"fp16": EXACT_MAX_TERMS, "bf16": 256}
BF16_NAN_BITS = 0x7FC0


def perturb_bits(dtype: str = "fp16") -> NDArray[np.uint16]:
    """PERTURB_VALUES with either sign as ``dtype`` bits (numpy uint16), what the perturbing
    kernels write into A (every value is exact in fp16 and bf16)."""
    import numpy as np

    vals = np.array([v * sgn for v in PERTURB_VALUES for sgn in (1.0, -1.0)], dtype=np.float32)
    bits: NDArray[np.uint16] = from_float32(np, vals, dtype).view(np.uint16)
    return bits


def kernel_name(name: str, dtype: str = "fp16") -> str:
    """The check kernel's entry for ``dtype``: the fp16 name, or the same with ``_bf16``."""
    return name + "_bf16" if dtype == "bf16" else name


def precision_scale(dtype: str) -> float:
    """How much coarser ``dtype`` rounds than fp16 (1 for fp16, 8 for bf16): the accuracy floors
    and the verified rows' floors, set for fp16, grow by it."""
    if dtype not in UNIT_ROUNDOFF:
        raise ValueError(f"unknown dtype {dtype!r}: choose from {', '.join(UNIT_ROUNDOFF)}")
    return UNIT_ROUNDOFF[dtype] / UNIT_ROUNDOFF["fp16"]


def storage_dtype(cp: CupyModule, dtype: str = "fp16") -> CupyDtype:
    """The array dtype holding ``dtype`` elements: float16, or uint16 bits for bf16."""
    precision_scale(dtype)
    return cp.uint16 if dtype == "bf16" else cp.float16


def to_float32(cp: CupyModule, x: DeviceArray, dtype: str = "fp16") -> DeviceArray:
    """Elements of ``dtype`` (as stored, :func:`storage_dtype`) widened exactly to float32."""
    if dtype == "bf16":
        return (x.astype(cp.uint32) << cp.uint32(16)).view(cp.float32)
    return x.astype(cp.float32)


def from_float32(cp: CupyModule, x: DeviceArray, dtype: str = "fp16") -> DeviceArray:
    """float32 values rounded to ``dtype``'s storage: bf16 by round-to-nearest-even on the bits
    (what __float2bfloat16_rn does; a NaN stays a quiet NaN), fp16 by the array's own cast."""
    if dtype != "bf16":
        return x.astype(cp.float16)
    bits = cp.ascontiguousarray(x, dtype=cp.float32).view(cp.uint32)
    lsb = (bits >> cp.uint32(16)) & cp.uint32(1)
    rounded = ((bits + cp.uint32(0x7FFF) + lsb) >> cp.uint32(16)).astype(cp.uint16)
    return cp.where(cp.isnan(x), cp.uint16(BF16_NAN_BITS), rounded).astype(cp.uint16)


def nan_value(cp: CupyModule, dtype: str = "fp16") -> DeviceArray:
    """The NaN that poisons C before a call, in ``dtype``'s storage."""
    return cp.uint16(BF16_NAN_BITS) if dtype == "bf16" else cp.float16(float("nan"))


def fp16_normal(cp: CupyModule, rs: DeviceRandom, shape: tuple[int, int], dtype: str = "fp16") -> DeviceArray:
    return from_float32(cp, rs.standard_normal(shape, dtype=cp.float32), dtype)


def fill_random(cp: CupyModule, seed: int, a: DeviceArray, b: DeviceArray, dtype: str = "fp16") -> None:
    """Fresh random-normal inputs written into the existing buffers (same pointers every time)."""
    rs = cp.random.RandomState(seed)
    a[...] = fp16_normal(cp, rs, a.shape, dtype)
    b[...] = fp16_normal(cp, rs, b.shape, dtype)


def fill_binary(cp: CupyModule, seed: int, a: DeviceArray, b: DeviceArray, dtype: str = "fp16") -> None:
    """0/1 inputs; when K > EXACT_TERMS[dtype] (2048 in fp16, 256 in bf16) only that many random
    columns of A are non-zero, so every partial sum is an integer exact in the element type
    whatever the summation order."""
    rs = cp.random.RandomState(seed)
    m, k = a.shape
    terms = EXACT_TERMS[dtype]
    a01 = (rs.random_sample((m, k), dtype=cp.float32) < 0.5)
    if k > terms:
        keep = cp.zeros(k, dtype=cp.bool_)
        keep[rs.permutation(k)[:terms]] = True
        a01 &= keep[None, :]
    a[...] = from_float32(cp, a01.astype(cp.float32), dtype)
    b[...] = from_float32(cp, (rs.random_sample(b.shape, dtype=cp.float32) < 0.5).astype(cp.float32), dtype)


def reference(cp: CupyModule, a: DeviceArray, b: DeviceArray, dtype: str = "fp16") -> DeviceArray:
    """fp32-accumulated reference of the upcast inputs (CUPY_TF32 is 0 in the worker);
    float64 for problems small enough that it costs nothing."""
    m, k = a.shape
    n = b.shape[1]
    dt = cp.float64 if m * n * k <= F64_REF_MAX_MNK else cp.float32
    return cp.matmul(to_float32(cp, a, dtype).astype(dt), to_float32(cp, b, dtype).astype(dt))


def ref_norm(cp: CupyModule, ref: DeviceArray) -> float:
    return float(cp.sqrt(cp.sum(cp.square(ref), dtype=cp.float64)))


def rel_err(cp: CupyModule, c: DeviceArray, ref: DeviceArray, norm: float, dtype: str = "fp16") -> float:
    """||C - ref||_F / ||ref||_F (NaN/Inf anywhere -> inf)."""
    d = to_float32(cp, c, dtype).astype(ref.dtype) - ref
    num = float(cp.sqrt(cp.sum(cp.square(d), dtype=cp.float64)))
    if not math.isfinite(num):
        return math.inf
    return num / norm if norm > 0 else (0.0 if num == 0 else math.inf)


#: a bf16 C whose mean error toward zero exceeds cuBLAS's on the same inputs by more than this
#: many units of bf16's roundoff was not rounded to nearest: truncating f32 sums (rounding toward
#: zero) lands about 0.7 below round-to-nearest-even, whose own mean is 0 within 0.02 on 1,024
#: outputs. Measured against cuBLAS's, so what the tensor cores' accumulation does to both cancels.
ROUNDING_BIAS_LIMIT = 0.35
#: fewer outputs than this leave the mean too noisy to judge (the check is then not made)
ROUNDING_MIN_OUTPUTS = 1024


def rounding_bias(cp: CupyModule, c: DeviceArray, ref: DeviceArray, dtype: str = "fp16") -> float | None:
    """The mean signed error of C toward the reference's sign, over the mean magnitude of the
    reference, in units of ``dtype``'s unit roundoff (negative: toward zero); None when C has
    fewer than :data:`ROUNDING_MIN_OUTPUTS` elements or a non-finite one (the accuracy check
    judges those).

    Why: an error bound on the norm cannot tell truncation from rounding (truncating costs about
    twice the error, and the bound is twice cuBLAS's), but truncation's error always points toward
    zero, and over a thousand outputs that mean is far outside rounding's noise."""
    if int(ref.size) < ROUNDING_MIN_OUTPUTS:
        return None
    d = to_float32(cp, c, dtype).astype(ref.dtype) - ref
    num = float(cp.sum(d * cp.sign(ref), dtype=cp.float64))
    den = float(cp.sum(cp.abs(ref), dtype=cp.float64))
    if not math.isfinite(num) or not den > 0:
        return None
    return num / den / UNIT_ROUNDOFF[dtype]


def rounding_verdict(bias: float | None, ref_bias: float | None) -> tuple[bool, str]:
    """Whether C was rounded to nearest, judged against cuBLAS's ``ref_bias`` on the same inputs
    (both from :func:`rounding_bias`); not judged (ok) when either is None."""
    if bias is None or ref_bias is None or abs(bias - ref_bias) <= ROUNDING_BIAS_LIMIT:
        return True, ""
    return False, (f"C is not rounded to nearest: its mean error toward zero is {-bias:.2f} units of "
                   f"roundoff against cuBLAS's {-ref_bias:.2f} (truncated instead of rounded?)")


def bound_for(acc: str, e32: float, e16: float | None, dtype: str = "fp16") -> float:
    """Twice cuBLAS's own error on the same inputs (in the same element type), never below a
    floor scaled by the element type's unit roundoff (:func:`precision_scale`)."""
    scale = precision_scale(dtype)
    if acc == "f16":
        return max(2 * (e16 if e16 is not None else e32), 2 * e32, F16_FLOOR * scale)
    return max(2 * e32, F32_FLOOR * scale)


def count_unwritten(cp: CupyModule, c: DeviceArray, dtype: str = "fp16") -> int:
    return int(cp.count_nonzero(~cp.isfinite(to_float32(cp, c, dtype))))


class Perturber:
    """Launches ``l2_perturb`` on ``stream``: one element of ``a`` changes per launch; ``row``
    (device) holds the row it changed last."""

    _kernels: dict[int, CudaKernel] = {}

    def __init__(self, cp: CupyModule, a: DeviceArray, stream: CudaStream, dtype: str = "fp16") -> None:
        self.cp, self.a, self.stream = cp, a, stream
        key = id(cp)
        if key not in Perturber._kernels:
            Perturber._kernels[key] = cp.RawKernel(PERTURB_SOURCE, "l2_perturb")
        self.kernel = Perturber._kernels[key]
        self.values = cp.asarray(perturb_bits(dtype))
        self.counter = cp.zeros(1, dtype=cp.uint32)
        self.row = cp.zeros(1, dtype=cp.uint32)
        self.n = int(a.size)
        self.cols = int(a.shape[1])

    def step(self) -> int:
        cp = self.cp
        with self.stream:  # (inside a capture of that stream too)
            self.kernel((1,), (1,), (self.a, cp.uint64(self.n), self.counter, self.values,
                                     cp.int32(self.values.size), cp.uint64(self.cols), self.row))
        return 0


class SignFlipper:
    """Launches ``l2_flip_signs`` (kernels/checks/flip.cu) on ``stream``: every launch flips the
    signs of a fresh pseudo-random half of ``a``'s elements (the mask drawn from a launch counter
    and a secret salt, :func:`secret_salt`); ``row`` (device) holds a row drawn with it, which the
    verification after the call takes first (every row changed).

    Why: per call every timed call follows a change of one element of A, so a kernel that keeps a
    copy of its last inputs and product can diff A and update the one row that changed: right on
    every verified call, and as cheap as reading A. After a dense change there is nothing to
    update from; part (3) of ``fresh`` compares the two (:func:`dense_verdict`)."""

    _kernels: dict[int, CudaKernel] = {}

    def __init__(self, cp: CupyModule, a: DeviceArray, stream: CudaStream) -> None:
        self.cp, self.a, self.stream = cp, a, stream
        key = id(cp)
        if key not in SignFlipper._kernels:
            SignFlipper._kernels[key] = cp.RawKernel(FLIP_SOURCE, "l2_flip_signs")
        self.kernel = SignFlipper._kernels[key]
        self.n = int(a.size)
        self.m = int(a.shape[0])
        self.salt = secret_salt()
        self.blocks = max(1, min(FLIP_MAX_BLOCKS, (self.n // 2 + FLIP_THREADS - 1) // FLIP_THREADS))
        with stream:  # zeroed in stream order before the first launch (the stream does not wait for others)
            self.counter = cp.zeros(1, dtype=cp.uint32)
            self.arrived = cp.zeros(1, dtype=cp.uint32)
            self.row = cp.zeros(1, dtype=cp.uint32)

    def step(self) -> int:
        cp = self.cp
        with self.stream:  # (inside a capture of that stream too)
            self.kernel((self.blocks,), (FLIP_THREADS,), (self.a, cp.uint64(self.n), self.counter, self.arrived,
                                                          cp.uint32(self.salt), cp.uint32(self.m), self.row))
        return 0


class Verifier:
    """Checks rows of C = A B after a call, on the GPU and inside a graph (Freivalds' test).

    Why: a kernel could skip work on calls that come in quick succession (it can read the GPU's
    clock or count its calls) and leave the previous C, which is right as long as the inputs do
    not change, as in every timed replay. In the fresh graph each call follows a change of one
    element of A and is verified right after on that element's row and VERIFY_ROWS - 1 others,
    so a skipped call leaves a verified row off by far more than rounding. ``step`` enqueues one
    launch of VERIFY_ROWS blocks writing each row's |C[r] x - A[r] y| / |C[r]| into ``worst``.
    ``y = B x`` is computed once here; ``b_unchanged`` recomputes it after the graph."""

    _kernels: dict[tuple[int, str], tuple[CudaKernel, CudaKernel]] = {}

    def __init__(self, cp: CupyModule, a: DeviceArray, b: DeviceArray, c: DeviceArray, stream: CudaStream, capacity: int, changed_row: DeviceArray,
                 dtype: str = "fp16") -> None:
        self.cp, self.a, self.b, self.c, self.stream = cp, a, b, c, stream
        key = (id(cp), dtype)
        if key not in Verifier._kernels:
            mod = cp.RawModule(code=VERIFY_SOURCE)
            Verifier._kernels[key] = (mod.get_function(kernel_name("l2_gemv", dtype)),
                                      mod.get_function(kernel_name("l2_verify_rows", dtype)))
        self.gemv, self.rows_kernel = Verifier._kernels[key]
        self.m, self.k = int(a.shape[0]), int(a.shape[1])
        self.n = int(b.shape[1])
        self.salt = secret_salt()
        self.x = cp.asarray(secret_signs(self.n))
        self.changed_row = changed_row
        self.y = self._bx()
        self.capacity = int(capacity) * VERIFY_ROWS
        self.worst = cp.full(self.capacity, cp.nan, dtype=cp.float32)
        self.counter = cp.zeros(1, dtype=cp.uint32)

    def _bx(self) -> DeviceArray:
        cp = self.cp
        y = cp.zeros(self.k, dtype=cp.float32)
        with self.stream:
            self.gemv(((self.k + 7) // 8,), (256,), (self.b, self.x, y, cp.uint64(0), cp.int32(self.k),
                                                     cp.int32(self.n)))
        return y

    def b_unchanged(self) -> bool:
        """B x again, bit for bit the same (the same kernel, the same order of sums)?"""
        y2 = self._bx()
        self.stream.synchronize()
        return bool(self.cp.array_equal(self.y, y2))

    def step(self) -> int:
        cp = self.cp
        with self.stream:  # (inside a capture of that stream too)
            self.rows_kernel((VERIFY_ROWS,), (VERIFY_THREADS,), (self.a, self.c, self.x, self.y, cp.int32(self.m),
                                                      cp.int32(self.n), cp.int32(self.k), self.changed_row,
                                                      self.counter, self.worst, cp.uint32(self.capacity),
                                                      cp.uint32(self.salt)))
        return 0

    def reset(self) -> None:
        with self.stream:
            self.counter.fill(0)
            self.worst.fill(self.cp.nan)

    def results(self) -> list[float]:
        """The worst verified row of every step so far (after the stream is synchronised)."""
        n = min(int(self.counter.get()[0]), self.capacity) // VERIFY_ROWS
        vals = self.worst[:n * VERIFY_ROWS].get().reshape(n, VERIFY_ROWS)
        return [max((float(v) if v == v else math.inf) for v in row) for row in vals]


def verify_limit(bound: float, acc: str = "f32", dtype: str = "fp16") -> float:
    """How far one row of C may be off in a timed call's verification (see VERIFY_ROW_*), with
    ``acc`` the accumulation the shape is evaluated for; the floor grows with the element type's
    rounding (:func:`precision_scale`) as the accuracy bound does."""
    return max(VERIFY_ROW_FACTOR * bound, VERIFY_ROW_FLOOR[acc] * precision_scale(dtype))


def verify_verdict(worst: list[float], expected: int, limit: float) -> tuple[bool, str]:
    """Every call of the fresh graph verified, none off by more than ``limit``?"""
    if len(worst) < expected:
        return False, f"only {len(worst)} of {expected} calls of the fresh-input graph were verified"
    bad = [(i, v) for i, v in enumerate(worst) if not (v <= limit)]
    if not bad:
        return True, ""
    i, v = bad[0]
    return False, (f"{len(bad)} of {len(worst)} calls that each followed a change of A left C wrong (first: call {i}, "
                   f"a row off by {v:.3g} of its norm > {limit:.3g}): the kernel skips work on some calls")


def sparse_change(cp: CupyModule, a: DeviceArray, rng: random.Random, count: int = FRESH_SPARSE, value: float = FRESH_VALUE,
                  dtype: str = "fp16") -> int:
    """Set ``count`` random elements of ``a`` (in place, same buffer; elements of ``dtype`` as
    stored) to +-``value``; returns how many."""
    n = int(a.size)
    idx = sorted({rng.randrange(n) for _ in range(count)})
    flat = a.reshape(-1)
    vals = [value if rng.random() < 0.5 else -value for _ in idx]
    flat[cp.asarray(idx, dtype=cp.int64)] = from_float32(cp, cp.asarray(vals, dtype=cp.float32), dtype)
    return len(idx)


def _cost_verdict(ref_ms: float, ms: float, ratio: float, slack_ms: float, unusable: str,
                  over: str) -> tuple[bool, str]:
    """``ms`` <= ``ratio`` x ``ref_ms`` + ``slack_ms``: (True, ""), else (False, ``over``); (False,
    ``unusable``) when either time is not a positive finite number."""
    if not (math.isfinite(ref_ms) and math.isfinite(ms)) or ref_ms <= 0:
        return False, unusable
    return (True, "") if ms <= ratio * ref_ms + slack_ms else (False, over)


def dense_verdict(one_ms: float, dense_ms: float, ratio: float = FRESH_RATIO,
                  slack_ms: float = FRESH_SLACK_MS) -> tuple[bool, str]:
    """Part (3) of ``fresh``: is a call right after a dense change of A (``dense_ms``) within reach
    of a call right after a one-element change (``one_ms``), both timed in the same rounds?"""
    return _cost_verdict(
        one_ms, dense_ms, ratio, slack_ms,
        f"dense-change timing unusable (one-element {one_ms!r} ms, dense {dense_ms!r} ms)",
        f"a call right after every element of A could have changed took {dense_ms * 1e3:.1f} us against "
        f"{one_ms * 1e3:.1f} us right after a one-element change (> {ratio:g}x + {slack_ms * 1e3:g} us): the calls "
        "update their last product where the inputs changed instead of computing it (memoized by content?)")


def fresh_verdict(timed_ms: float, fresh_ms: float, ratio: float = FRESH_RATIO,
                  slack_ms: float = FRESH_SLACK_MS) -> tuple[bool, str]:
    """Is a call right after an input change (``fresh_ms``) within reach of a timed call?"""
    return _cost_verdict(
        timed_ms, fresh_ms, ratio, slack_ms,
        f"fresh-input timing unusable (timed {timed_ms!r} ms, fresh {fresh_ms!r} ms)",
        f"a call right after A changed took {fresh_ms * 1e3:.1f} us against {timed_ms * 1e3:.1f} us in the timed "
        f"graph (> {ratio:g}x + {slack_ms * 1e3:g} us): the timed calls skip work while the inputs stay the same "
        "(memoized by content?)")
