"""The GPU worker process (``python -m harness.worker_main``): serves requests from harness.worker.

Everything that touches CUDA lives here or in modules this imports lazily
(checks, timing, baselines, roofline).  A sticky CUDA error (illegal address,
trap, launch failure) poisons the context: the worker answers ``kind="crashed"``
and exits, and the parent starts a fresh one.
"""

from __future__ import annotations

import os

os.environ["CUPY_TF32"] = "0"   # fp32 reference must not use TF32 (set before cupy is imported)

import ctypes
import math
import pickle
import random
import struct
import sys
import time
import traceback
from typing import Any, Callable

_HDR = struct.Struct(">Q")
IDLE_REWARM_S = 2.0          # re-warm the GPU after this much idle time
MAX_LIBS = 256               # exit (parent restarts lazily) after loading this many kernel libraries

STICKY_MARKERS = (
    "IllegalAddress", "illegal memory access", "LaunchFailure", "unspecified launch failure",
    "IllegalInstruction", "illegal instruction", "MisalignedAddress", "misaligned address",
    "HardwareStackError", "InvalidPc", "invalid program counter", "cudaErrorAssert", "device-side assert",
    "LaunchTimeout", "ECCUncorrectable", "uncorrectable ECC", "CUDA_ERROR_ILLEGAL_ADDRESS",
    "CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_ILLEGAL_INSTRUCTION", "CUDA_ERROR_MISALIGNED_ADDRESS",
    "an illegal", "context is destroyed", "CUBLAS_STATUS_EXECUTION_FAILED",
)


class Sticky(Exception):
    """A CUDA error that poisons the context; carries the subject label when known."""

    def __init__(self, message: str, label: str | None = None) -> None:
        super().__init__(message)
        self.label = label


def is_sticky(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}"
    return any(m in text for m in STICKY_MARKERS)


# --------------------------------------------------------------------------- GPU state


class Gpu:
    """Per-process CUDA state: cupy, our non-blocking stream, the shim, caches."""

    def __init__(self) -> None:
        import cupy as cp

        self.cp = cp
        cp.cuda.Device(0).use()
        self.stream = cp.cuda.Stream(non_blocking=True)
        props = cp.cuda.runtime.getDeviceProperties(0)
        self.name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        self.cc = (int(props["major"]), int(props["minor"]))
        self.sms = int(props["multiProcessorCount"])
        raw_uuid = props.get("uuid", b"")
        self.uuid = "GPU-" + _fmt_uuid(raw_uuid) if raw_uuid else f"GPU-{self.name}-{os.getpid()}"
        self.cuda_runtime = _ver(cp.cuda.runtime.runtimeGetVersion())
        self.cuda_driver = _ver(cp.cuda.runtime.driverGetVersion())
        self.libs: dict[str, Any] = {}
        self.autotune: dict[tuple, int] = {}
        self.roofline: dict[str, Any] | None = None
        self.nvml = _Nvml(self.uuid)
        self.warmed = False
        self.last_active = 0.0
        self.ctx: Any = None   # last ShapeContext (buffers reused when the next request is the same shape)

    def lib(self, path: str) -> Any:
        lib = self.libs.get(path)
        if lib is None:
            lib = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
            self.libs[path] = lib
        return lib

    def info(self) -> dict[str, Any]:
        return {
            "name": self.name, "uuid": self.uuid, "cc": f"{self.cc[0]}.{self.cc[1]}", "sms": self.sms,
            "cuda_runtime": self.cuda_runtime, "cuda_driver": self.cuda_driver,
            "driver": self.nvml.driver(), "cupy": self.cp.__version__,
        }

    def warm_up(self, shim_fn: Callable[..., int], min_s: float = 0.2, max_s: float = 1.5) -> None:
        """Run big GEMMs until the SM clock is up (it idles at a few hundred MHz).

        Done when the worker starts and again whenever the GPU sat idle for more than
        IDLE_REWARM_S (an agent thinking between evaluations lets the clock drop).
        """
        now = time.monotonic()
        if self.warmed and now - self.last_active < IDLE_REWARM_S:
            self.last_active = now
            return
        cp, s = self.cp, self.stream
        n = 4096
        with s:
            a = cp.ones((n, n), dtype=cp.float16)
            c = cp.empty((n, n), dtype=cp.float16)
        target = self.nvml.max_sm_mhz()
        t0 = time.monotonic()
        while True:
            for _ in range(10):
                shim_fn(a.data.ptr, a.data.ptr, c.data.ptr, n, n, n, s.ptr)
            s.synchronize()
            el = time.monotonic() - t0
            if el >= max_s:
                break
            if el >= min_s:
                clk = self.nvml.clocks().get("sm_mhz") if target else None
                if not target or clk is None or clk >= 0.9 * target:
                    break
        self.warmed = True
        self.last_active = time.monotonic()


def _fmt_uuid(raw: Any) -> str:
    b = bytes(raw)[:16]
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _ver(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


class _Nvml:
    """Clocks and driver through NVML when pynvml imports; every answer may be None."""

    def __init__(self, uuid: str) -> None:
        self.h = None
        self.mod = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self.mod = pynvml
            try:
                self.h = pynvml.nvmlDeviceGetHandleByUUID(uuid.encode())
            except Exception:
                self.h = pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception:
            self.h = None

    def driver(self) -> str | None:
        if self.mod is None:
            return None
        try:
            v = self.mod.nvmlSystemGetDriverVersion()
            return v.decode() if isinstance(v, bytes) else v
        except Exception:
            return None

    def max_sm_mhz(self) -> int | None:
        if self.h is None:
            return None
        try:
            return int(self.mod.nvmlDeviceGetMaxClockInfo(self.h, self.mod.NVML_CLOCK_SM))
        except Exception:
            return None

    def clocks(self) -> dict[str, Any]:
        if self.h is None:
            return {}
        m = self.mod
        out: dict[str, Any] = {}
        for key, fn in (("sm_mhz", lambda: m.nvmlDeviceGetClockInfo(self.h, m.NVML_CLOCK_SM)),
                        ("mem_mhz", lambda: m.nvmlDeviceGetClockInfo(self.h, m.NVML_CLOCK_MEM)),
                        ("temp_c", lambda: m.nvmlDeviceGetTemperature(self.h, m.NVML_TEMPERATURE_GPU)),
                        ("power_w", lambda: m.nvmlDeviceGetPowerUsage(self.h) / 1000.0)):
            try:
                out[key] = fn()
            except Exception:
                out[key] = None
        return out


_GPU: Gpu | None = None


def gpu() -> Gpu:
    global _GPU
    if _GPU is None:
        try:
            import cupy  # noqa: F401
        except Exception as e:
            raise RuntimeError(f"no NVIDIA GPU found: cupy does not import ({type(e).__name__}: {e}); pip install 'l2tui[gpu]'") from None
        try:
            _GPU = Gpu()
        except Exception as e:
            raise RuntimeError(f"no NVIDIA GPU found: {type(e).__name__}: {e}") from None
    return _GPU


# --------------------------------------------------------------------------- ops


def op_ping(**_: Any) -> dict[str, Any]:
    return {"pid": os.getpid(), "python": sys.version.split()[0]}


def op_debug_segfault(**_: Any) -> None:
    ctypes.string_at(0)          # really dies: SIGSEGV


def op_debug_hang(**_: Any) -> None:
    while True:                  # really hangs
        time.sleep(1)


def op_debug_sleep(seconds: float = 1.0, **_: Any) -> float:
    time.sleep(seconds)
    return seconds


def op_debug_raise(message: str = "boom", **_: Any) -> None:
    raise ValueError(message)


def op_debug_exit(code: int = 3, **_: Any) -> None:
    os._exit(code)


_RETIRE_NEXT = False


def op_debug_retire(**_: Any) -> str:
    """Answer, then retire like a worker that loaded too many libraries (CI test of the restart)."""
    global _RETIRE_NEXT
    _RETIRE_NEXT = True
    return "retiring"


def op_debug_load(path: str, **_: Any) -> str:
    """Load a library with ctypes and call nothing (CPU tests of load-time code: constructors and
    static initialisers run here, as they would before a GPU evaluation)."""
    ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
    return path


def op_gpu_info(**_: Any) -> dict[str, Any]:
    return gpu().info()


def op_debug_sticky(**_: Any) -> None:
    """Launch a kernel that writes through a bad pointer (GPU tests of restart)."""
    g = gpu()
    k = g.cp.RawKernel(r'extern "C" __global__ void l2_bad(int* p) { p[threadIdx.x] = 1; }', "l2_bad")
    with g.stream:
        k((1,), (32,), (g.cp.uint64(16),))
    g.stream.synchronize()


def op_roofline(shim_path: str, force: bool = False, **_: Any) -> dict[str, Any]:
    from . import baselines, roofline
    from .paths import roofline_cache_file

    g = gpu()
    if g.roofline is not None and not force:
        return g.roofline
    path = roofline_cache_file(g.uuid)
    rf = None if force else roofline.load(path)
    if rf is None:
        shim = baselines.ctypes_fn(g.lib(shim_path), "l2_hgemm")
        g.warm_up(shim)
        rf = roofline.measure(g.cp, g.stream, shim, g.lib(shim_path))
        rf["gpu"] = g.name
        rf["uuid"] = g.uuid
        try:
            roofline.save(path, rf)
        except OSError:
            pass
    g.roofline = rf
    return rf


def op_evaluate_shape(**kw: Any) -> dict[str, Any]:
    return evaluate_shape(gpu(), **kw)


OPS: dict[str, Callable[..., Any]] = {
    "ping": op_ping,
    "gpu_info": op_gpu_info,
    "roofline": op_roofline,
    "evaluate_shape": op_evaluate_shape,
    "_debug_segfault": op_debug_segfault,
    "_debug_hang": op_debug_hang,
    "_debug_sleep": op_debug_sleep,
    "_debug_raise": op_debug_raise,
    "_debug_exit": op_debug_exit,
    "_debug_retire": op_debug_retire,
    "_debug_sticky": op_debug_sticky,
    "_debug_load": op_debug_load,
}


def context_poisoned() -> bool:
    """After an exception: is the CUDA context still usable?"""
    if _GPU is None:
        return False
    try:
        _GPU.cp.cuda.runtime.deviceSynchronize()
        return False
    except Exception:
        return True


# --------------------------------------------------------------------------- loop


def _read_exact(fd: int, n: int) -> bytes | None:
    chunks = []
    while n > 0:
        b = os.read(fd, n)
        if not b:
            return None
        chunks.append(b)
        n -= len(b)
    return b"".join(chunks)


def _write(fd: int, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    buf = memoryview(_HDR.pack(len(data)) + data)
    while buf:
        n = os.write(fd, buf)
        buf = buf[n:]


def serve() -> int:
    out_fd = os.dup(1)          # private channel to the parent
    os.dup2(2, 1)               # stray prints (libraries) go to stderr
    sys.stdout = sys.stderr
    in_fd = 0
    _write(out_fd, {"hello": True, "pid": os.getpid()})
    while True:
        hdr = _read_exact(in_fd, _HDR.size)
        if hdr is None:
            return 0
        (n,) = _HDR.unpack(hdr)
        body = _read_exact(in_fd, n)
        if body is None:
            return 0
        req = pickle.loads(body)
        rid, op, args = req.get("id"), req.get("op"), req.get("args") or {}
        if op == "_exit":
            return 0
        fn = OPS.get(op)
        if fn is None:
            _write(out_fd, {"id": rid, "ok": False, "kind": "error", "error": f"unknown op {op!r}", "type": "KeyError"})
            continue
        try:
            result = fn(**args)
            retire = _RETIRE_NEXT or (_GPU is not None and len(_GPU.libs) > MAX_LIBS)
            _write(out_fd, {"id": rid, "ok": True, "result": result, "retire": retire})
            if _GPU is not None:
                _GPU.last_active = time.monotonic()
            if retire:
                return 0      # bound the number of loaded kernel libraries; the parent restarts us lazily

        except BaseException as e:  # noqa: BLE001 - everything goes back to the parent
            sticky = isinstance(e, Sticky) or is_sticky(e)
            if not sticky and not isinstance(e, (KeyboardInterrupt, SystemExit)):
                sticky = _GPU is not None and context_poisoned()
            msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            resp = {
                "id": rid, "ok": False, "kind": "crashed" if sticky else "error", "error": msg[:500],
                "type": type(e).__name__, "traceback": traceback.format_exc()[-4000:],
                "label": getattr(e, "label", None),
            }
            print(resp["traceback"], file=sys.stderr, flush=True)
            _write(out_fd, resp)
            if sticky:
                os._exit(70)



# --------------------------------------------------------------------------- one shape


class ShapeContext:
    """Guarded buffers of one shape, allocated once and reused by every subject and request."""

    def __init__(self, g: Gpu, m: int, n: int, k: int) -> None:
        from .checks import GuardedBuffer

        cp = g.cp
        self.key = (m, n, k)
        with g.stream:
            self.A = GuardedBuffer(cp, (m, k), cp.float16)
            self.B = GuardedBuffer(cp, (k, n), cp.float16)
            self.Bt = GuardedBuffer(cp, (n, k), cp.float16)   # column-major copy of B for cuBLAS TN
            self.C = GuardedBuffer(cp, (m, n), cp.float16)
        self.buffers = (self.A, self.B, self.Bt, self.C)

    def bad_guards(self) -> int:
        total = self.A.bad_guard_bytes()
        for b in self.buffers[1:]:
            total = total + b.bad_guard_bytes()
        return int(total)

    def reset_guards(self) -> None:
        for b in self.buffers:
            b.reset_guards()

    def close(self) -> None:
        """Nothing to release: the shim keeps its cuBLASLt plans (a bounded table) itself."""


def _shape_ctx(g: Gpu, m: int, n: int, k: int) -> ShapeContext:
    if g.ctx is not None and g.ctx.key == (m, n, k):
        return g.ctx
    if g.ctx is not None:
        g.stream.synchronize()
        g.ctx.close()
        g.ctx = None
        g.cp.get_default_memory_pool().free_all_blocks()
    g.ctx = ShapeContext(g, m, n, k)
    return g.ctx


def _lt_plan(shim: Any, m: int, n: int, k: int, acc: str) -> int:
    """cuBLASLt's heuristic algorithms for this shape, planned in the shim; returns how many."""
    from . import baselines as bl

    count = int(shim.l2_lt_plan(m, n, k, int(acc == "f16"), bl.AUTOTUNE_MAX_CANDIDATES))
    if count <= 0:
        raise RuntimeError(f"cuBLASLt heuristic returned no algorithm (shim status {count})")
    return count


def _autotune(g: Gpu, shim: Any, call: Callable[[], int], shape: tuple[int, int, int], acc: str, count: int,
              timing_mode: str, separator: tuple[Callable[[], int], Callable[[], int]],
              budget_s: float) -> tuple[int, dict[str, Any]]:
    """Screen cuBLASLt's heuristic algorithms (in heuristic order) with the headline's method,
    keep the fastest in the shim's autotune slot.

    Cap: at most AUTOTUNE_MAX_CANDIDATES; after ``budget_s`` of wall time no new candidate is
    screened once AUTOTUNE_MIN_CANDIDATES have been. Screening graphs last >= 0.2 ms and get 3
    replays; per call (``isolated``) each screened call follows the separator, whose own graph
    is subtracted, as in the timing. The winner is then checked and timed like every subject."""
    from . import baselines as bl
    from . import timing

    m, n, k = shape
    f16 = int(acc == "f16")
    key = (m, n, k, acc, timing_mode)
    if key in g.autotune:
        shim.l2_lt_select(m, n, k, f16, 1, g.autotune[key])
        return g.autotune[key], {"cached": True}
    cp, s = g.cp, g.stream
    per_call = timing_mode != "chained"
    est = None
    base = None
    results: list[tuple[float, int]] = []
    t0 = time.monotonic()
    tried = 0
    for idx in range(min(count, bl.AUTOTUNE_MAX_CANDIDATES)):
        if tried >= bl.AUTOTUNE_MIN_CANDIDATES and time.monotonic() - t0 > budget_s:
            break
        tried += 1
        if shim.l2_lt_select(m, n, k, f16, 1, idx) != 0:
            continue
        try:
            if est is None:
                est = timing.estimate_ms(cp, s, call)
            elif call() != 0:
                continue
            s.synchronize()
            reps = timing.reps_for(est, 0.2, 200)
            if per_call:
                graphs, gb = timing.isolated_graphs(cp, s, {str(idx): call}, {str(idx): separator}, separator, reps,
                                                    base_label="base")
                t = timing.offline(cp, s, [*graphs, gb], replays=3)
                ms = timing.per_call(t, [str(idx)], "base")[str(idx)]["median_ms"]
            else:
                gr = timing.Graph(str(idx), timing.capture(cp, s, call, reps), reps, est)
                ms = timing.offline(cp, s, [gr], replays=3)[str(idx)]["median_ms"]
            results.append((ms, idx))
        except Exception as e:
            if is_sticky(e):
                raise
            continue
    if not results:
        raise RuntimeError("autotune: no cuBLASLt candidate ran")
    best = min(results)[1]
    shim.l2_lt_select(m, n, k, f16, 1, best)
    g.autotune[key] = best
    return best, {"screened": len(results), "tried": tried, "available": count, "best_index": best,
                  "method": timing.MODE_LABELS["isolated" if per_call else "chained"],
                  "seconds": round(time.monotonic() - t0, 3)}


def _check_fresh(cp: Any, s: Any, ctx: ShapeContext, call: Callable[[], int], gr: Any, timed_ms: float,
                 bound: float, rng: random.Random, nan: Any) -> tuple[bool, str, dict[str, Any]]:
    """The ``fresh`` check of harness.checks for one candidate: (ok, detail, recorded numbers)."""
    from . import checks as ck
    from . import timing

    A, B, C = ctx.A, ctx.B, ctx.C
    with s:
        changed = ck.sparse_change(cp, A.data, rng)
        ref = ck.reference(cp, A.data, B.data)
        norm = ck.ref_norm(cp, ref)
        C.data.fill(nan)
    gr.graph.launch(s)
    s.synchronize()
    with s:
        unwritten = ck.count_unwritten(cp, C.data)
    err = ck.rel_err(cp, C.data, ref, norm)
    del ref
    if unwritten or err > bound:
        what = f"{unwritten} elements of C not written" if unwritten else f"rel. error {err:.3g} > bound {bound:.3g}"
        return False, (f"after {changed} elements of A changed in place, the timed graph's output is stale: {what} "
                       "(memoized on a sample of the inputs?)"), {"sparse_rel_err": err}
    reps = min(gr.reps, ck.FRESH_MAX_REPS)
    steps = reps * (ck.FRESH_REPLAYS + 1)          # the warm-up replay and the timed ones
    with s:
        pert = ck.Perturber(cp, A.data, s)
        seed = rng.randrange(1 << 30)
        ver = ck.Verifier(cp, A.data, B.data, C.data, s, seed, capacity=steps + reps, changed_row=pert.row)
        # the subtracted graph verifies too (the same work on a C the call did not write): ignored
        ver_base = ck.Verifier(cp, A.data, B.data, C.data, s, seed, capacity=steps + reps, changed_row=pert.row)
    # compiles and loads the kernels now, never inside a stream capture; the verification of a
    # call made right after a change must pass (else the check itself is broken on this shape)
    pert.step()
    call()
    ver.step()
    s.synchronize()
    first = ver.results()
    limit = ck.verify_limit(bound)
    if not first or not first[0] <= limit:
        return False, f"the fresh-input verification fails on a plain call (row error {first}): check broken?", {}
    ver.reset()
    gf, gp = timing.fresh_graphs(cp, s, gr.label, call, pert.step, reps, verify=ver.step, verify_base=ver_base.step)
    # the timed graph again, in the same rounds (same clocks and temperature as the fresh one);
    # primed, so its timed calls follow calls on unchanged inputs as in the bench's timing
    t = timing.offline(cp, s, [gr, gf, gp], replays=ck.FRESH_REPLAYS, rng=rng, primed={gr.label})
    fresh_ms = t[gf.label]["median_ms"] - t[gp.label]["median_ms"]
    same_ms = t[gr.label]["median_ms"]
    worst = ver.results()
    fields = {"sparse_rel_err": err, "fresh_ms": fresh_ms, "perturb_ms": t[gp.label]["median_ms"],
              "same_ms": same_ms, "timed_ms": timed_ms, "reps": reps, "verified_calls": len(worst),
              "verified_rows": ck.VERIFY_ROWS, "verify_worst": max(worst) if worst else None, "verify_limit": limit}
    if not ver.b_unchanged():
        return False, "B changed while the fresh-input graph ran (B x differs from before it)", fields
    ok, det = ck.verify_verdict(worst, steps, limit)
    if not ok:
        return False, det, fields
    ok, det = ck.fresh_verdict(same_ms, fresh_ms)
    return ok, det, fields


SEPARATOR_LABEL = "(separator)"
PER_CALL_PREFIX = "(per call) "


class _PerCallGraphs:
    """The per-call (isolated) timing of one shape's subjects: the graphs of harness.timing, one
    separator per subject (harness.checks.Separator: it verifies the call before it and changes
    A for the one after) and one for the base graph, and the checks that read them.

    Why one step count for all: every graph then leaves A changed the same way, so the reference
    of the replay check is computed once per shape, not once per subject."""

    def __init__(self, g: Gpu, ctx: ShapeContext, calls: dict[str, Callable[[], int]], replays: int,
                 rng: random.Random, failed: Callable[[str, Exception], None]) -> None:
        from . import checks as ck
        from . import timing

        self.g, self.ctx, self.calls = g, ctx, dict(calls)
        cp, s = g.cp, g.stream
        A, B, C = ctx.A, ctx.B, ctx.C
        self.graphs: list[Any] = []
        self.base: Any = None
        est: dict[str, float] = {}
        for label, call in list(self.calls.items()):
            try:
                est[label] = timing.estimate_ms(cp, s, call)
            except Exception as e:
                failed(label, e)
                self.calls.pop(label)
        if not self.calls:
            return
        self.reps = timing.reps_for(min(est.values()) + 0.003, cap=timing.MAX_ISOLATED_REPS)
        seed = rng.randrange(1 << 30)
        capacity = self.reps * (replays + 3)
        self.seps = {lb: ck.Separator(cp, A.data, B.data, C.data, s, seed, capacity, self.reps) for lb in self.calls}
        self.sep_base = ck.Separator(cp, A.data, B.data, C.data, s, seed, capacity, self.reps)
        # compiles and loads every kernel now, never inside a stream capture
        for label, call in self.calls.items():
            self.seps[label].step()
            call()
            self.seps[label].tail()
        self.sep_base.step()
        s.synchronize()
        for label, call in list(self.calls.items()):
            sep = self.seps[label]
            try:
                # a label of its own: with --timing both the back-to-back graph of the subject is
                # replayed in the same rounds under the subject's own label
                (gr,), _ = timing.isolated_graphs(cp, s, {PER_CALL_PREFIX + label: call},
                                                  {PER_CALL_PREFIX + label: (sep.step, sep.tail)}, None, self.reps)
                gr.subject = label
                self.graphs.append(gr)
            except Exception as e:
                failed(label, e)
                self.calls.pop(label, None)
        _, self.base = timing.isolated_graphs(cp, s, {}, {}, (self.sep_base.step, self.sep_base.tail), self.reps,
                                              base_label=SEPARATOR_LABEL)
        for sp in (*self.seps.values(), self.sep_base):
            sp.reset()
        s.synchronize()

    def all_graphs(self) -> list[Any]:
        return [*self.graphs, self.base] if self.graphs else []

    def per_call(self, raw: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        from . import timing

        per = timing.per_call(raw, [gr.label for gr in self.graphs], self.base.label)
        return {gr.subject: per[gr.label] for gr in self.graphs}

    def verdicts(self, replays: int, limit: float) -> dict[str, tuple[bool, str, dict[str, Any]]]:
        """Every timed call (the warm-up replay's and the timed ones) verified on sampled rows."""
        from . import checks as ck

        self.g.stream.synchronize()
        expected = self.reps * (replays + 1)
        out = {}
        for gr in self.graphs:
            worst = self.seps[gr.subject].results()
            fields = {"verified_calls": len(worst), "verified_rows": ck.SEPARATE_ROWS,
                      "verify_worst": max(worst) if worst else None, "verify_limit": limit, "reps": self.reps}
            ok, det = ck.verify_verdict(worst, expected, limit)
            out[gr.subject] = (ok, det, fields)
        return out

    def _reset(self, a0: Any, sep: Any) -> None:
        with self.g.stream:
            self.ctx.A.data[...] = a0
        sep.reset()

    def replay_checks(self, a0: Any, nan: Any, written_guards: Callable[..., None], inputs: dict[str, Any],
                      bound: float) -> dict[str, tuple[bool, str]]:
        """Each per-call graph replayed once more from the same start on poisoned C: C must be
        fully written, the guards and inputs untouched, and C right for the inputs the graph's
        last call saw (one reference for all: every graph changes A the same way)."""
        from . import checks as ck

        cp, s, A, C = self.g.cp, self.g.stream, self.ctx.A, self.ctx.C
        self._reset(a0, self.sep_base)
        self.base.graph.launch(s)
        s.synchronize()
        with s:
            a_final = A.data.copy()
            ref = ck.reference(cp, A.data, self.ctx.B.data)
            norm = ck.ref_norm(cp, ref)
        saved, inputs["A"] = inputs.get("A"), a_final
        out = {}
        try:
            for gr in self.graphs:
                self._reset(a0, self.seps[gr.subject])
                self.ctx.reset_guards()
                with s:
                    C.data.fill(nan)
                try:
                    gr.graph.launch(s)
                    s.synchronize()
                except Exception as e:
                    if is_sticky(e):
                        raise Sticky(f"{gr.subject}: {e}", gr.subject) from e
                    raise
                written_guards(gr.subject, "per-call graph replay", "graph_replay", "graph_replay")
                err = ck.rel_err(cp, C.data, ref, norm)
                out[gr.subject] = (err <= bound, f"after the per-call graph: rel. error {err:.3g} > bound {bound:.3g}"
                                 if err > bound else "")
        finally:
            del ref
            if saved is not None:
                inputs["A"] = saved
            with s:
                A.data[...] = a0
        return out

    def close(self) -> None:
        self.graphs.clear()
        self.base = None
        self.seps = {}


class _ServerVerification:
    """What surrounds every timed server call: before it, one element of A changed and, on a
    random half of the calls, C poisoned (untimed, synchronised); after it, the changed row and
    others verified on the GPU. So a kernel that skips work when C holds its last result, or
    computes only when C is poisoned, or memoizes by content, fails its own subject."""

    def __init__(self, g: Gpu, ctx: ShapeContext, labels: list[str], calls_per_subject: int,
                 rng: random.Random, nan: Any) -> None:
        from . import checks as ck

        cp, s = g.cp, g.stream
        self.cp, self.s, self.C, self.nan = cp, s, ctx.C, nan
        self.calls_per_subject = calls_per_subject
        seed = rng.randrange(1 << 30)
        with s:
            self.pert = ck.Perturber(cp, ctx.A.data, s)
            self.vers = {lb: ck.Verifier(cp, ctx.A.data, ctx.B.data, ctx.C.data, s, seed,
                                         capacity=calls_per_subject + 2, changed_row=self.pert.row) for lb in labels}
        self.pert.step()
        for v in self.vers.values():
            v.step()
        s.synchronize()
        for v in self.vers.values():
            v.reset()

    def before(self, label: str, poison: bool) -> None:
        self.pert.step()
        if poison:
            with self.s:
                self.C.data.fill(self.nan)

    def after(self, label: str) -> None:
        self.vers[label].step()

    def verdicts(self, limit: float) -> dict[str, tuple[bool, str, dict[str, Any]]]:
        from . import checks as ck

        self.s.synchronize()
        out = {}
        for label, v in self.vers.items():
            worst = v.results()
            ok, det = ck.verify_verdict(worst, self.calls_per_subject, limit)
            if not ok:
                det = "server mode: " + det
            out[label] = (ok, det, {"verified_calls": len(worst), "verify_worst": max(worst) if worst else None,
                                    "verify_limit": limit})
        return out


def evaluate_shape(g: Gpu, *, m: int, n: int, k: int, shim_path: str, acc: str = "f32",
                   candidates: list[dict[str, Any]] = (), baselines: list[str] = (),  # type: ignore[assignment]
                   mode: str = "offline", checks: str = "full", seeds: tuple[int, ...] = (1, 2, 3),
                   replays: int = 7, qps: float = 100.0, server_calls: int = 20, seed: int = 0,
                   autotune_budget_s: float | None = None, timing: str = "isolated", **_: Any) -> dict[str, Any]:
    """Check and time candidates and baselines on one shape (see harness.checks / harness.timing).

    ``timing`` (offline mode): "isolated" (per call, the headline), "chained" (back to back) or
    "both" (each subject both ways in the same interleaved rounds; ``times_ms`` is per call)."""
    from . import baselines as bl
    from . import checks as ck
    from . import roofline, timing as tm
    from .shapes import Shape

    timing_mode = tm.parse_timing(timing)
    timing = tm
    cp, s = g.cp, g.stream
    t_start = time.monotonic()
    rng = random.Random(f"{seed}:{m}x{n}x{k}")
    shim = g.lib(shim_path)
    fn32 = bl.ctypes_fn(shim, "l2_hgemm")
    fn16 = bl.ctypes_fn(shim, "l2_hgemm_f16")
    g.warm_up(fn32)
    rf = op_roofline(shim_path)
    ctx = _shape_ctx(g, m, n, k)
    A, B, Bt, C = ctx.A, ctx.B, ctx.Bt, ctx.C
    sp = int(s.ptr)
    suffix = "" if acc == "f32" else "_f16"

    # ---- subjects ---------------------------------------------------------------
    subjects: dict[str, bl.Subject] = {}
    status: dict[str, str] = {}
    absent: dict[str, str] = {}
    errors: dict[str, str] = {}
    extra: dict[str, Any] = {}
    for c in candidates:
        label = c["label"]
        fn = bl.ctypes_fn(g.lib(c["so_path"]), "l2_hgemm")
        subjects[label] = bl.abi_subject(label, fn, A.ptr, B.ptr, C.ptr, m, n, k, sp, kind="candidate",
                                         nondeterministic=bool(c.get("nondeterministic")))
    light = checks == "fast"
    for name in baselines:
        try:
            if name == "cublas":
                subjects["cublas_nn"] = bl.abi_subject("cublas_nn", bl.ctypes_fn(shim, "l2_hgemm" + suffix),
                                                       A.ptr, B.ptr, C.ptr, m, n, k, sp, light=light)
                subjects["cublas_tn"] = bl.abi_subject("cublas_tn", bl.ctypes_fn(shim, "l2_hgemm_tn" + suffix),
                                                       A.ptr, Bt.ptr, C.ptr, m, n, k, sp, light=light)
            elif name in ("cublaslt_heuristic", "cublaslt_autotune"):
                if "lt_count" not in extra:
                    extra["lt_count"] = _lt_plan(shim, m, n, k, acc)
                entry = "l2_hgemm_lt_heur" if name == "cublaslt_heuristic" else "l2_hgemm_lt_auto"
                subjects[name] = bl.abi_subject(name, bl.ctypes_fn(shim, entry + suffix), A.ptr, B.ptr, C.ptr,
                                                m, n, k, sp, light=light)
                if name == "cublaslt_autotune":
                    extra["autotune_pending"] = True
            elif name == "torch":
                if acc == "f16":
                    absent[name] = "torch.matmul has no fp16-accumulate mode"
                    continue
                why = bl.torch_available()
                if why:
                    absent[name] = why
                    continue
                import torch

                torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
                subjects[name] = bl.torch_subject(name, A.data, B.data, C.data, sp, light=light)
            else:
                absent[name] = "unknown baseline"
        except Exception as e:
            if is_sticky(e):
                raise Sticky(str(e), name) from e
            errors[name] = f"{type(e).__name__}: {e}"[:300]

    # autotune before checking so the checked algorithm is the timed one
    if extra.pop("autotune_pending", False):
        with s:   # time on random data, never on constants
            ck.fill_random(cp, seeds[-1], A.data, B.data)
        try:
            budget = bl.AUTOTUNE_SCREEN_BUDGET_S if autotune_budget_s is None else autotune_budget_s
            # screened per call behind the same separator as the timing (its verifications unread)
            sep = ck.Separator(cp, A.data, B.data, C.data, s, 0, 1, 1 << 30)
            _, info = _autotune(g, shim, subjects["cublaslt_autotune"].call, (m, n, k), acc, extra["lt_count"],
                                timing_mode, (sep.step, sep.tail), budget)
            extra["autotune"] = info
        except Exception as e:
            if is_sticky(e):
                raise Sticky(str(e), "cublaslt_autotune") from e
            subjects.pop("cublaslt_autotune", None)
            errors["cublaslt_autotune"] = f"{type(e).__name__}: {e}"[:300]
    extra.pop("lt_count", None)

    phases = {"setup": round(time.monotonic() - t_start, 4)}
    t_phase = time.monotonic()
    recs = {label: ck.CheckRecord() for label in subjects}
    alive = dict(subjects)
    nan = cp.float16(float("nan"))

    def run(subj: bl.Subject) -> int | None:
        ctx.reset_guards()   # whatever an earlier call did to them was charged to it (or to nobody), not to this one
        with s:
            C.data.fill(nan)
        try:
            rc = subj.call()
            s.synchronize()
        except Exception as e:
            if is_sticky(e):
                raise Sticky(f"{subj.label}: {e}", subj.label) from e
            recs[subj.label].put("runs", False, f"raised {type(e).__name__}: {str(e)[:200]}")
            alive.pop(subj.label, None)
            return None
        if rc:
            recs[subj.label].put("runs", False, f"l2_hgemm returned {rc} (unsupported shape)")
            recs[subj.label].unsupported = True
            alive.pop(subj.label, None)
            return None
        recs[subj.label].put("runs", True)
        return 0

    inputs: dict[str, Any] = {}   # copies of A and B as last filled: a call must leave them as they are

    def keep_inputs() -> None:
        with s:
            inputs["A"], inputs["B"] = A.data.copy(), B.data.copy()

    def written_guards(label: str, tag: str, name_w: str = "written", name_g: str = "guards") -> None:
        rec = recs[label]
        with s:
            unwritten = ck.count_unwritten(cp, C.data)
            bad = ctx.bad_guards()
            changed = {nm: int(cp.count_nonzero(buf.data.view(cp.uint16) != inputs[nm].view(cp.uint16)))
                       for nm, buf in (("A", A), ("B", B)) if nm in inputs}
            for nm, buf in (("A", A), ("B", B)):
                if changed.get(nm):
                    buf.data[...] = inputs[nm]   # restore, so the next subject sees the same inputs
        if bad:
            ctx.reset_guards()
        rec.put(name_w, unwritten == 0, f"{unwritten} of {m * n} elements of C not written ({tag})" if unwritten else "")
        rec.put(name_g, bad == 0, f"{bad} guard bytes around A/B/C overwritten ({tag})" if bad else "")
        moved = ", ".join(f"{v} elements of {nm}" for nm, v in changed.items() if v)
        rec.put("inputs", not moved, f"the call wrote its inputs: {moved} changed ({tag})" if moved else "")

    prev: dict[str, Any] = {}

    def check_stale(label: str, tag: str) -> None:
        p = prev.get(label)
        if p is None:
            return
        with s:
            same = bool(cp.array_equal(C.data, p))
        recs[label].put("stale", not same, f"output unchanged after new inputs were written into the same buffers ({tag})" if same else "")

    def remember(label: str) -> None:
        with s:
            prev[label] = C.data.copy()

    # baselines-only with light checks: one seed is all anyone looks at
    if all(subj.light for subj in alive.values()):
        seeds = tuple(seeds)[-1:]

    # ---- exact 0/1 --------------------------------------------------------------
    if not all(subj.light for subj in alive.values()):
        with s:
            ck.fill_binary(cp, seeds[0] + 7919, A.data, B.data)
            Bt.data[...] = B.data.T
        keep_inputs()
        with s:
            expect = ck.reference(cp, A.data, B.data).astype(cp.float16)
        for label, subj in list(alive.items()):
            if subj.light:
                continue
            if run(subj) is None:
                continue
            written_guards(label, "0/1 inputs")
            with s:
                bad = int(cp.count_nonzero(C.data != expect))
            recs[label].put("exact", bad == 0, f"{bad} of {m * n} elements differ from the exact result on 0/1 inputs" if bad else "")
            remember(label)
        del expect

    # ---- random seeds -----------------------------------------------------------
    bounds: list[float] = []
    e32s: list[float] = []
    e16s: list[float] = []
    ref = norm = bound = None
    for i, sd in enumerate(seeds):
        last = i == len(seeds) - 1
        with s:
            ck.fill_random(cp, sd, A.data, B.data)
            Bt.data[...] = B.data.T
            ref = None
            ref = ck.reference(cp, A.data, B.data)
            norm = ck.ref_norm(cp, ref)
        keep_inputs()
        # the cuBLAS shim's own error on these inputs sets the bound
        with s:
            C.data.fill(nan)
        if fn32(A.ptr, B.ptr, C.ptr, m, n, k, sp) != 0:
            raise RuntimeError("cuBLAS shim failed on this shape")
        s.synchronize()
        e32 = ck.rel_err(cp, C.data, ref, norm)
        e16 = None
        if acc == "f16":
            with s:
                C.data.fill(nan)
            fn16(A.ptr, B.ptr, C.ptr, m, n, k, sp)
            s.synchronize()
            e16 = ck.rel_err(cp, C.data, ref, norm)
            e16s.append(e16)
        e32s.append(e32)
        bound = ck.bound_for(acc, e32, e16)
        bounds.append(bound)
        for label, subj in list(alive.items()):
            if subj.light and not last:
                continue
            if run(subj) is None:
                continue
            tag = f"seed {sd}"
            written_guards(label, tag)
            check_stale(label, tag)
            err = ck.rel_err(cp, C.data, ref, norm)
            rec = recs[label]
            if err > rec.rel_err or rec.bound == 0:
                rec.rel_err, rec.bound = err, bound
            rec.put("accuracy", err <= bound, f"rel. error {err:.3g} > bound {bound:.3g} ({tag})" if err > bound else "",
                    rel_err=err, bound=bound)
            if subj.kind == "candidate" and i == 0:
                with s:
                    first = C.data.copy()
                if run(subj) is not None:
                    written_guards(label, f"{tag}, second run")
                    if subj.nondeterministic:
                        e2 = ck.rel_err(cp, C.data, ref, norm)
                        ok = e2 <= bound
                        det = "" if ok else f"second run: rel. error {e2:.3g} > bound {bound:.3g}"
                    else:
                        with s:
                            diff = int(cp.count_nonzero(C.data != first))
                        ok = diff == 0
                        det = "" if ok else f"{diff} elements differ between two runs on the same inputs (a race?)"
                    recs[label].put("deterministic", ok, det)
                del first
            remember(label)
    prev.clear()

    for label, rec in recs.items():
        st = "unsupported" if rec.unsupported else ("ok" if rec.failed() is None else "wrong")
        status[label] = st

    # ---- timing -----------------------------------------------------------------
    def timeable(label: str) -> bool:
        subj = subjects[label]
        if label not in alive:
            return False
        return status[label] == "ok" if subj.kind == "candidate" else True

    phases["checks"] = round(time.monotonic() - t_phase, 4)
    t_phase = time.monotonic()
    timed: dict[str, dict[str, Any]] = {}
    chained: dict[str, dict[str, Any]] = {}
    clocks_before = g.nvml.clocks()

    def timing_failed(label: str, e: Exception) -> None:
        if is_sticky(e):
            raise Sticky(f"{label}: {e}", label) from e
        try:
            cp.cuda.runtime.getLastError()
        except Exception:
            pass
        recs[label].put("graph_replay", False, f"CUDA graph capture failed: {type(e).__name__}: {str(e)[:200]}")
        status[label] = "wrong"

    def charge(label: str, name: str, ok: bool, det: str, **fields: Any) -> None:
        recs[label].put(name, ok, det, **fields)
        if not ok and status.get(label) == "ok":
            status[label] = "wrong"

    labels = [lb for lb in subjects if timeable(lb)]
    limit = ck.verify_limit(bound) if bound is not None else 0.0
    if mode == "offline":
        with s:
            a0 = A.data.copy()     # the checks' last inputs: A is restored to them after timing
        graphs: list[Any] = []
        if timing_mode in ("chained", "both"):
            for label in labels:
                try:
                    graphs.append(timing.make_graph(cp, s, label, subjects[label].call))
                except Exception as e:
                    timing_failed(label, e)
        iso = None
        if timing_mode in ("isolated", "both"):
            iso = _PerCallGraphs(g, ctx, {lb: subjects[lb].call for lb in labels},
                                 replays, rng, timing_failed)
        raw = timing.offline(cp, s, graphs + (iso.all_graphs() if iso else []), replays=replays, rng=rng) \
            if graphs or (iso and iso.graphs) else {}
        chained = {gr.label: raw[gr.label] for gr in graphs}
        with s:
            A.data[...] = a0
        # replay each back-to-back graph once more on poisoned C and re-verify
        for gr in graphs:
            ctx.reset_guards()   # whatever the interleaved rounds did is charged to nobody: each replay alone
            with s:
                C.data.fill(nan)
            try:
                gr.graph.launch(s)
                s.synchronize()
            except Exception as e:
                if is_sticky(e):
                    raise Sticky(f"{gr.label}: {e}", gr.label) from e
                raise
            written_guards(gr.label, "graph replay", "graph_replay", "graph_replay")
            err = ck.rel_err(cp, C.data, ref, norm)
            charge(gr.label, "graph_replay", err <= bound,
                   f"after the timed graph: rel. error {err:.3g} > bound {bound:.3g}" if err > bound else "")
        if iso is not None and iso.graphs:
            per = iso.per_call(raw)
            for label, v in list(per.items()):
                if not (v["median_ms"] > 0):   # the separator's own time was not the same with and without the call
                    errors[label] = (f"per-call time not measurable: the step with the call took {v['step_ms'] * 1e3:.2f} us, "
                                     f"the separator alone {v['separator_ms'] * 1e3:.2f} us")
                    per.pop(label)
            for label, (ok, det, fields) in iso.verdicts(replays, limit).items():
                charge(label, "timed_calls", ok, det, **fields)
            for label, (ok, det) in iso.replay_checks(a0, nan, written_guards, inputs, bound).items():
                charge(label, "graph_replay", ok, det)
            timed = per
            iso.close()
        else:
            timed = chained
        # memoization by content. Per call, every timed call followed a change of A and was
        # verified (timed_calls above); back to back, the timed calls repeat the same inputs, so the
        # fresh check compares them with calls that each follow a change
        for label in [lb for lb in labels if subjects[lb].kind == "candidate" and status[lb] == "ok"]:
            if timing_mode == "both":
                if label in chained and label in timed:
                    ok, det = ck.fresh_verdict(chained[label]["median_ms"], timed[label]["median_ms"])
                    charge(label, "fresh", ok, det, fresh_ms=timed[label]["median_ms"],
                           same_ms=chained[label]["median_ms"])
                continue
            if timing_mode != "chained":
                continue
            gr = next((x for x in graphs if x.label == label), None)
            if gr is None:
                continue
            try:
                ok, det, fields = _check_fresh(cp, s, ctx, subjects[label].call, gr, timed[label]["median_ms"],
                                               bound, rng, nan)
            except Exception as e:
                if is_sticky(e):
                    raise Sticky(f"{label}: {e}", label) from e
                ok, det, fields = False, f"fresh-input check failed: {type(e).__name__}: {str(e)[:200]}", {}
            charge(label, "fresh", ok, det, **fields)
        del graphs
    else:
        calls = {lb: subjects[lb].call for lb in labels}
        if calls:
            srv = _ServerVerification(g, ctx, list(calls), server_calls, rng, nan)
            timed = timing.server(cp, s, calls, qps=qps, calls_per_subject=server_calls, rng=rng,
                                  before=srv.before, after=srv.after)
            for label, (ok, det, fields) in srv.verdicts(limit).items():
                charge(label, "timed_calls", ok, det, **fields)
    clocks_after = g.nvml.clocks()
    phases["timing"] = round(time.monotonic() - t_phase, 4)

    # ---- assemble -----------------------------------------------------------------
    def merge_cublas(d: dict[str, Any]) -> None:
        parts = {v: d.pop(f"cublas_{v}") for v in ("nn", "tn") if f"cublas_{v}" in d}
        if parts:
            best = min(parts, key=lambda v: (parts[v] is None, parts[v] if parts[v] is not None else 0))
            d["cublas"] = parts[best]

    times = {lb: (timed[lb]["median_ms"] if lb in timed and status.get(lb) in ("ok", "wrong") else None) for lb in subjects}
    detail_times = {lb: times[lb] for lb in ("cublas_nn", "cublas_tn") if lb in times}
    nn, tn = detail_times.get("cublas_nn"), detail_times.get("cublas_tn")
    variant = None
    if nn is not None or tn is not None:
        variant = "tn" if (tn is not None and (nn is None or tn < nn)) else "nn"
    pick = f"cublas_{variant}" if variant else None

    def fold(d: dict[str, Any]) -> dict[str, Any]:
        out = {lb: v for lb, v in d.items() if not lb.startswith("cublas_")}
        if "cublas" in baselines:
            out["cublas"] = d.get(pick) if pick else None
        return out

    summaries = {lb: r.summary() for lb, r in recs.items()}
    for lb in summaries:
        if subjects[lb].kind != "candidate":
            summaries[lb] = {k2: v for k2, v in summaries[lb].items() if k2 != "checks"}
    stat = fold(status)
    if "cublas" in baselines and pick is None:
        stat["cublas"] = status.get("cublas_nn", "error")
    for name, why in absent.items():
        stat[name] = "absent"
    for name, why in errors.items():
        stat[name] = "error"
    shape = Shape(m, n, k)
    return {
        "shape": [m, n, k], "acc": acc, "mode": mode,
        "status": stat,
        "checks": fold(summaries),
        "times_ms": fold(times),
        "spread": fold({lb: timed[lb]["spread"] for lb in timed}),
        "p90_ms": fold({lb: timed[lb]["p90_ms"] for lb in timed}),
        "device_ms": fold({lb: timed[lb].get("device_median_ms") for lb in timed}) if mode == "server" else {},
        "reps": fold({lb: timed[lb].get("reps") for lb in timed}) if mode == "offline" else {},
        "timing": timing_mode if mode == "offline" else "server",
        "times_ms_chained": fold({lb: (chained[lb]["median_ms"] if lb in chained and status.get(lb) in ("ok", "wrong")
                                       else None) for lb in subjects}) if timing_mode == "both" and mode == "offline" else {},
        "spread_chained": fold({lb: chained[lb]["spread"] for lb in chained}) if timing_mode == "both" else {},
        "separator_ms": next((v["separator_ms"] for v in timed.values() if "separator_ms" in v), None),
        "detail_times_ms": detail_times, "cublas_variant": variant,
        "absent": absent, "errors": errors,
        "bound": min(bounds) if bounds else None, "ref_err": {"e32": e32s, "e16": e16s},
        "autotune": extra.get("autotune"),
        "clocks": {"before": clocks_before, "after": clocks_after},
        "roofline_ms": roofline.roofline_ms(shape, rf),
        "seconds": round(time.monotonic() - t_start, 3), "phases": phases,
    }


if __name__ == "__main__":
    sys.exit(serve())
