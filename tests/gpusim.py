"""A simulated GPU for CPU tests of the timing-and-checks flow of harness.shape_timing.

numpy arrays stand for device arrays, the check kernels (separator, perturb, verify, flip, gemv)
are redone in Python, a stream runs a launch at once or records it into a graph while it
captures, and one clock, read by the CUDA events, advances by each launch's modelled cost.

Why: which graphs are built, which are timed in which rounds and which verdict is charged to
whom is decided in Python from GPU timings and verifications; a machine without a GPU can run
that bookkeeping end to end with subjects whose cost and output the test chooses (an honest one,
one that updates its last product). What real kernels do and cost is for ``pytest -m gpu``.
"""

from __future__ import annotations

import math
import time
from types import SimpleNamespace
from typing import Any, Callable

import numpy as np

from harness import checks as ck

#: modelled cost of one launch of each check kernel (ms); flips add a term per element
KERNEL_MS = {"l2_separate": 0.003, "l2_perturb": 0.0015, "l2_verify_rows": 0.002, "l2_gemv": 0.002,
             "l2_flip_signs": 0.002}
#: the check kernels' bf16 entries (the same name with ``_bf16``), which read their 16-bit data as bf16
BF16_SUFFIX = "_bf16"


def widen(a: Any, dtype: str) -> np.ndarray:
    """16-bit elements as float32: fp16 as such, bf16 bits through harness.checks' codec."""
    return np.asarray(ck.to_float32(np, np.asarray(a), dtype), dtype=np.float32)
FLIP_MS_PER_ELEMENT = 1e-9


class SimArray(np.ndarray):
    """A numpy array with cupy's ``get()`` (a host copy)."""

    def get(self) -> np.ndarray:
        return np.array(self)


def _sim(a: Any) -> SimArray:
    return np.asarray(a).view(SimArray)


def _mix(x: int) -> int:
    x = (x * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    x ^= x >> 29
    x = (x * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 32)


def _salted_row(salt: int, i: int, m: int) -> int:
    """l2_salted_row of verify.cu: the i-th verified row under ``salt``."""
    h = ((((salt & 0xFFFFFFFF) << 32) | (i & 0xFFFFFFFF)) * 0xD1B54A32D192ED03) & 0xFFFFFFFFFFFFFFFF
    h ^= h >> 31
    h = (h * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    h ^= h >> 29
    return h % m


def _residual(a: Any, c: Any, x: Any, y: Any, r: int, dtype: str = "fp16") -> float:
    """|C[r] x - A[r] y| / |C[r]|, NaN as infinity (l2_row_residual)."""
    cr = widen(c[r], dtype)
    with np.errstate(all="ignore"):
        w = float(cr @ np.asarray(x)), float(np.sqrt(np.sum(cr * cr)))
        z = float(widen(a[r], dtype) @ np.asarray(y))
        d = abs(w[0] - z) / max(w[1], 1e-20)
    return d if d == d else math.inf


class SimGpu:
    """The clock, the streams' capture state and the current stream of ``with stream:``."""

    def __init__(self) -> None:
        self.clock_ms = 0.0
        self.foreign_s = 0.0    # seconds a device-wide synchronise waits for work off the stream
        self.host_delay_s = 0.0  # seconds the host is descheduled during the next one (no GPU work)
        # every check kernel that verifies or changes A launched so far (name, args), by its counter array: what an
        # adversary that could read the harness's counters knows (see ``predictor``)
        self.verifiers: dict[int, tuple[str, tuple[Any, ...]]] = {}
        self.current: list[SimStream] = []
        self.stream = SimStream(self)
        self.null = SimStream(self)   # the legacy default stream, where work off the stream runs
        self.cp = SimCupy(self)

    def on(self) -> SimStream:
        return self.current[-1] if self.current else self.stream

    def run(self, op: Callable[[], float]) -> None:
        self.clock_ms += op()

    def device_synchronize(self) -> None:
        """Waits (in host time) for the work a subject left running off the stream, and for the
        host to be scheduled again."""
        time.sleep(self.foreign_s + self.host_delay_s)
        self.foreign_s = self.host_delay_s = 0.0


class SimStream:
    """A stream: a launch runs at once, or is recorded while the stream captures a graph."""

    def __init__(self, gpu: SimGpu) -> None:
        self.gpu = gpu
        self.ptr = id(self)
        self.captured: list[Callable[[], float]] | None = None

    def __enter__(self) -> SimStream:
        self.gpu.current.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.gpu.current.pop()

    def launch(self, op: Callable[[], float]) -> None:
        """``op`` does the launch's work when it runs and returns its cost in ms."""
        if self.captured is not None:
            self.captured.append(op)
        else:
            self.gpu.run(op)

    def begin_capture(self) -> None:
        self.captured = []

    def end_capture(self) -> SimGraph:
        ops, self.captured = self.captured or [], None
        return SimGraph(self.gpu, ops)

    def synchronize(self) -> None:
        """Every launch ran when it was made."""


class SimGraph:
    """A captured graph: its launches, run again in order on every launch of the graph."""

    def __init__(self, gpu: SimGpu, ops: list[Callable[[], float]]) -> None:
        self.gpu, self.ops = gpu, ops

    def upload(self, stream: SimStream) -> None:
        """Nothing to upload."""

    def launch(self, stream: SimStream) -> None:
        for op in self.ops:
            stream.launch(op)


class SimEvent:
    """A CUDA event: the clock when it was recorded (every launch before it has run); on the
    legacy default stream, once the work left running there is done."""

    def __init__(self, gpu: SimGpu) -> None:
        self.gpu, self.t = gpu, 0.0

    def record(self, stream: SimStream) -> None:
        self.t = self.gpu.clock_ms + (self.gpu.foreign_s * 1e3 if stream is self.gpu.null else 0.0)

    def synchronize(self) -> None:
        """Recorded when made."""


class SimKernel:
    """A check kernel by name: ``kernel(grid, block, args)`` launches its Python twin."""

    def __init__(self, gpu: SimGpu, name: str) -> None:
        self.gpu = gpu
        self.dtype = "bf16" if name.endswith(BF16_SUFFIX) else "fp16"
        self.name = name[: -len(BF16_SUFFIX)] if self.dtype == "bf16" else name
        self.body = getattr(self, "_" + self.name)

    def __call__(self, grid: tuple[int, ...], block: tuple[int, ...], args: tuple[Any, ...]) -> None:
        cost = KERNEL_MS[self.name]
        if self.name in ("l2_separate", "l2_verify_rows", "l2_flip_signs", "l2_perturb"):
            self.gpu.verifiers[id(args[2] if self.name in ("l2_flip_signs", "l2_perturb") else
                                  args[7] if self.name == "l2_separate" else args[8])] = (self.name, args)
        if self.name == "l2_flip_signs":
            cost += int(args[1]) * FLIP_MS_PER_ELEMENT

        def op() -> float:
            if self.name in ("l2_gemv", "l2_verify_rows", "l2_separate"):   # the kernels that read values
                self.body(grid[0], *args, dtype=self.dtype)
            else:
                self.body(grid[0], *args)
            return cost

        self.gpu.on().launch(op)

    @staticmethod
    def _l2_gemv(blocks: int, m: Any, x: Any, out: Any, norms: Any, rows: Any, cols: Any, dtype: str = "fp16") -> None:
        out[: int(rows)] = widen(m, dtype).reshape(int(rows), int(cols)) @ np.asarray(x)

    @staticmethod
    def _l2_verify_rows(blocks: int, a: Any, c: Any, x: Any, y: Any, m: Any, n: Any, k: Any, changed_row: Any,
                        counter: Any, worst: Any, capacity: Any, salt: Any, dtype: str = "fp16") -> None:
        for b in range(blocks):
            slot = int(counter[0])
            counter[0] += 1
            r = int(changed_row[0]) if b == 0 else _salted_row(int(salt), slot, int(m))
            if slot < int(capacity):
                worst[slot] = _residual(a, c, x, y, r if r < int(m) else 0, dtype)

    @staticmethod
    def _l2_perturb(blocks: int, a: Any, n: Any, counter: Any, values: Any, nvalues: Any, cols: Any,
                    row: Any) -> None:
        t = int(counter[0])
        counter[0] += 1
        pos = _mix(t + 1) % int(n)
        a.view(np.uint16).reshape(-1)[pos] = values[t % int(nvalues)]
        row[0] = pos // int(cols)

    @staticmethod
    def _l2_separate(blocks: int, a: Any, c: Any, x: Any, y: Any, m: Any, n: Any, k: Any, counter: Any, row: Any,
                     worst: Any, capacity: Any, values: Any, nvalues: Any, steps: Any, perturb: Any,
                     salt: Any, dtype: str = "fp16") -> None:
        t, m, k = int(counter[0]), int(m), int(k)
        if t > 0 and (not int(perturb) or t % int(steps) != 0):
            rows = [int(row[0])] + [_salted_row(int(salt), t * 4 + i, m) for i in range(1, ck.SEPARATE_ROWS)]
            w = max(_residual(a, c, x, y, r if r < m else 0, dtype) for r in rows)
            if t - 1 < int(capacity):
                worst[t - 1] = w
        if int(perturb):
            pos = _mix(t + 1) % (m * k)
            a.view(np.uint16).reshape(-1)[pos] = values[t % int(nvalues)]
            row[0] = pos // k
            counter[0] = t + 1

    @staticmethod
    def _l2_flip_signs(blocks: int, a: Any, n: Any, counter: Any, arrived: Any, salt: Any, m: Any,
                       row: Any) -> None:
        t = int(counter[0])
        mask = np.random.default_rng([int(salt), t]).integers(0, 2, int(n), dtype=np.uint16) << 15
        a.view(np.uint16).reshape(-1)[...] ^= mask
        row[0] = _mix(t + int(salt)) % int(m)
        counter[0] = t + 1


class SimCupy:
    """The part of cupy that harness.checks, timing and shape_timing use."""

    float16, float32, float64 = np.float16, np.float32, np.float64
    uint8, uint16, uint32, uint64 = np.uint8, np.uint16, np.uint32, np.uint64
    int32, int64, bool_, nan = np.int32, np.int64, np.bool_, np.nan
    dtype = staticmethod(np.dtype)
    sum = staticmethod(np.sum)
    sqrt = staticmethod(np.sqrt)
    square = staticmethod(np.square)
    count_nonzero = staticmethod(np.count_nonzero)
    isfinite = staticmethod(np.isfinite)
    array_equal = staticmethod(np.array_equal)
    where = staticmethod(np.where)
    isnan = staticmethod(np.isnan)
    ascontiguousarray = staticmethod(np.ascontiguousarray)

    def __init__(self, gpu: SimGpu) -> None:
        self.gpu = gpu
        self.cuda = SimpleNamespace(Event=lambda: SimEvent(gpu), Stream=SimpleNamespace(null=gpu.null),
                                    get_elapsed_time=lambda e0, e1: e1.t - e0.t,
                                    runtime=SimpleNamespace(getLastError=lambda: 0,
                                                            deviceSynchronize=gpu.device_synchronize))

    def zeros(self, shape: Any, dtype: Any = np.float64) -> SimArray:
        return _sim(np.zeros(shape, dtype=dtype))

    def full(self, shape: Any, value: Any, dtype: Any = None) -> SimArray:
        return _sim(np.full(shape, value, dtype=dtype))

    def empty(self, shape: Any, dtype: Any = np.float64) -> SimArray:
        return _sim(np.empty(shape, dtype=dtype))

    def asarray(self, a: Any, dtype: Any = None) -> SimArray:
        return _sim(np.asarray(a, dtype=dtype))

    def matmul(self, a: Any, b: Any) -> SimArray:
        return _sim(np.matmul(a, b))

    def RawKernel(self, source: str, name: str) -> SimKernel:  # noqa: N802 (cupy's name)
        return SimKernel(self.gpu, name)

    def RawModule(self, code: str) -> Any:  # noqa: N802
        return SimpleNamespace(get_function=lambda name: SimKernel(self.gpu, name))


def store(x: Any, dtype: str) -> np.ndarray:
    """float32 values in ``dtype``'s storage (fp16, or bf16 bits rounded to nearest even)."""
    return np.asarray(ck.from_float32(np, np.asarray(x, dtype=np.float32), dtype))


def context(gpu: SimGpu, m: int, n: int, k: int, seed: int = 0, dtype: str = "fp16") -> SimpleNamespace:
    """A shape's buffers in ``dtype`` (no guard regions: the guards are not what these tests are about)."""
    rng = np.random.default_rng(seed)
    buf = lambda a: SimpleNamespace(data=_sim(a))  # noqa: E731
    ctx = SimpleNamespace(key=(m, n, k), dtype=dtype, A=buf(store(rng.standard_normal((m, k)), dtype)),
                          B=buf(store(rng.standard_normal((k, n)), dtype)),
                          C=buf(store(np.zeros((m, n)), dtype)))
    ctx.Bt = buf(np.ascontiguousarray(np.asarray(ctx.B.data).T))   # the column-major copy of B
    ctx.reset_guards = lambda: None
    ctx.bad_guards = lambda: 0
    return ctx


def honest(gpu: SimGpu, ctx: SimpleNamespace, cost_ms: float) -> Callable[[], int]:
    """A subject that multiplies on every call at ``cost_ms``."""

    def op() -> float:
        prod = widen(ctx.A.data, ctx.dtype) @ widen(ctx.B.data, ctx.dtype)
        ctx.C.data[...] = store(prod, ctx.dtype)
        return cost_ms

    def call() -> int:
        gpu.stream.launch(op)
        return 0

    return call


def hog(gpu: SimGpu, ctx: SimpleNamespace, cost_ms: float, hog_s: float = 0.05) -> Callable[[], int]:
    """An honest multiply whose host code also leaves a kernel of its own running for ``hog_s``
    on another stream (to load the GPU while other subjects are timed)."""
    inner = honest(gpu, ctx, cost_ms)

    def call() -> int:
        gpu.foreign_s = max(gpu.foreign_s, hog_s)
        return inner()

    return call


def descheduled(gpu: SimGpu, ctx: SimpleNamespace, cost_ms: float, delay_s: float = 0.03) -> Callable[[], int]:
    """An honest multiply after which the host is descheduled for ``delay_s`` during the next
    device-wide synchronise (builds on every core): the GPU is idle all along."""
    inner = honest(gpu, ctx, cost_ms)

    def call() -> int:
        gpu.host_delay_s = max(gpu.host_delay_s, delay_s)
        return inner()

    return call


def delta(gpu: SimGpu, ctx: SimpleNamespace, gemm_ms: float, diff_ms: float, cap: int = 1024) -> Callable[[], int]:
    """testbad_delta's strategy: diff A and B against copies (``diff_ms``), add each changed
    element's contribution to its row of a kept fp32 product while at most ``cap`` changed and B
    did not, else multiply in full (``gemm_ms`` more); all of C written from the kept product."""
    kept: dict[str, Any] = {}

    def op() -> float:
        a, b = np.array(ctx.A.data), np.array(ctx.B.data)
        cost = diff_ms
        if "a" in kept and np.array_equal(b.view(np.uint16), kept["b"].view(np.uint16)):
            rows, cols = np.nonzero(a.view(np.uint16) != kept["a"].view(np.uint16))
        else:
            rows = cols = None
        if rows is not None and len(rows) <= cap:
            for r, j in zip(rows, cols):
                kept["c"][r] += (np.float32(a[r, j]) - np.float32(kept["a"][r, j])) * np.asarray(b[j], np.float32)
        else:
            kept["c"] = np.asarray(a, np.float32) @ np.asarray(b, np.float32)
            cost += gemm_ms
        kept["a"], kept["b"] = a, b
        ctx.C.data[...] = kept["c"].astype(np.float16)
        return cost

    def call() -> int:
        gpu.stream.launch(op)
        return 0

    return call


def memo(gpu: SimGpu, ctx: SimpleNamespace, gemm_ms: float, hash_ms: float) -> Callable[[], int]:
    """testbad_memo's strategy: hash all of A and B (``hash_ms``) and copy the cached C when they
    are what the last multiply saw, else multiply in full (``gemm_ms`` more)."""
    cache: dict[str, Any] = {}

    def op() -> float:
        key = (np.array(ctx.A.data).tobytes(), np.array(ctx.B.data).tobytes())
        if cache.get("key") != key:
            cache["key"] = key
            cache["c"] = (np.asarray(ctx.A.data, np.float32) @ np.asarray(ctx.B.data, np.float32)).astype(np.float16)
            ctx.C.data[...] = cache["c"]
            return hash_ms + gemm_ms
        ctx.C.data[...] = cache["c"]
        return hash_ms

    def call() -> int:
        gpu.stream.launch(op)
        return 0

    return call


def predictor(gpu: SimGpu, ctx: SimpleNamespace, gemm_ms: float, diff_ms: float, salt: int = 0,
              cap: int = 16) -> Callable[[], int]:
    """An adversary that knows every verifying kernel's counters and rows (it reads them: more
    than a real kernel can) but not their salts, which it takes to be ``salt``. On a poisoned C
    (every checked call) it multiplies; otherwise it diffs A against a copy (``diff_ms``), marks
    the rows that changed as stale and recomputes those of a few changed elements (the delta
    strategy) and every stale row it predicts to be verified next (a fraction of ``gemm_ms``).
    Whatever the salt, C is right after every one-element change; after a dense change only the
    predicted rows are."""
    kept: dict[str, Any] = {}

    def due(m: int) -> set[int]:
        # a verifier not launched yet starts at slot 0; block 0 takes the changed row, which
        # after a flip is the flip's
        rows = {_salted_row(salt, b, m) for b in range(1, ck.VERIFY_ROWS)}
        for name, args in gpu.verifiers.values():
            if name in ("l2_flip_signs", "l2_perturb"):   # the row it changed last
                rows.add(int(args[6][0]))
            elif name == "l2_separate":
                t, row = int(args[7][0]), args[8]
                rows.add(int(row[0]))
                rows.update(_salted_row(salt, t * 4 + i, m) for i in range(1, ck.SEPARATE_ROWS))
            else:
                changed, slot = args[7], int(args[8][0])
                rows.add(int(changed[0]))
                rows.update(_salted_row(salt, slot + b, m) for b in range(1, ck.VERIFY_ROWS))
        return {r for r in rows if r < m}

    def op() -> float:
        a = np.array(ctx.A.data)
        b = np.asarray(ctx.B.data, np.float32)
        m = a.shape[0]
        if np.isnan(float(ctx.C.data[0, 0])) or "a" not in kept:
            kept["c"] = np.asarray(a, np.float32) @ b
            kept["a"] = a
            kept["stale"] = set()
            ctx.C.data[...] = kept["c"].astype(np.float16)
            return gemm_ms
        rows, _ = np.nonzero(a.view(np.uint16) != kept["a"].view(np.uint16))
        stale = kept.setdefault("stale", set())
        stale.update(rows.tolist())
        todo = sorted((set(rows.tolist()) if len(rows) <= cap else set()) | (due(m) & stale))
        stale.difference_update(todo)
        for r in todo:
            kept["c"][r] = np.asarray(a[r], np.float32) @ b
        kept["a"] = a
        ctx.C.data[...] = kept["c"].astype(np.float16)
        return diff_ms + gemm_ms * len(todo) / m

    def call() -> int:
        gpu.stream.launch(op)
        return 0

    return call
