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
import random
import sys
import time
import traceback
from typing import Any, Callable

from . import channel
from .channel import FrameError
from .cuda_errors import Sticky, is_sticky
from .gpu import LIBS, Gpu, load_lib
MAX_LIBS = 256               # exit (parent restarts lazily) after loading this many kernel libraries
#: the most the worker writes to any one file. Its log is the one it grows: a candidate's host
#: prints and device printf (flushed by the driver to stdout, which is the log) land there, and a
#: kernel printing on every call of a graph of thousands would fill the disk. Past the cap a write
#: fails (Python ignores SIGXFSZ) and the worker carries on; the pipe to the parent is no file
MAX_FILE_BYTES = 64 << 20


# --------------------------------------------------------------------------- GPU state


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


def op_ping(**_: object) -> dict[str, Any]:
    return {"pid": os.getpid(), "python": sys.version.split()[0]}


def op_debug_segfault(**_: object) -> None:
    ctypes.string_at(0)          # really dies: SIGSEGV


def op_debug_hang(**_: object) -> None:
    while True:                  # really hangs
        time.sleep(1)


def op_debug_sleep(seconds: float = 1.0, **_: object) -> float:
    time.sleep(seconds)
    return seconds


def op_debug_raise(message: str = "boom", **_: object) -> None:
    raise ValueError(message)


def op_debug_exit(code: int = 3, **_: object) -> None:
    os._exit(code)


_RETIRE_NEXT = False


def op_debug_retire(**_: object) -> str:
    """Answer, then retire like a worker that loaded too many libraries (CI test of the restart)."""
    global _RETIRE_NEXT
    _RETIRE_NEXT = True
    return "retiring"


def op_debug_load(path: str, **_: object) -> str:
    """Load a library with ctypes and call nothing (CPU tests of load-time code: constructors and
    static initialisers run here, as they would before a GPU evaluation). A ``label`` argument
    only names the library in the parent's messages."""
    ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
    return path


def op_debug_print(nbytes: int, **_: object) -> int:
    """Print ``nbytes`` to stdout (the worker's log) as a candidate's printf would, failures
    ignored; returns how many bytes were written (CPU test of MAX_FILE_BYTES)."""
    chunk, written = b"x" * 1023 + b"\n", 0
    while nbytes > 0:
        try:
            written += os.write(1, chunk[:min(nbytes, len(chunk))])
        except OSError:
            pass
        nbytes -= len(chunk)
    return written


def op_debug_oom_score(**_: object) -> str:
    """This process's oom_score_adj as the kernel holds it (CPU test of first_to_go_on_oom)."""
    with open("/proc/self/oom_score_adj", encoding="ascii") as f:
        return f.read().strip()


def op_gpu_info(**_: object) -> dict[str, Any]:
    return gpu().info()


def op_debug_sticky(**_: object) -> None:
    """Launch a kernel that writes through a bad pointer (GPU tests of restart)."""
    g = gpu()
    k = g.cp.RawKernel(r'extern "C" __global__ void l2_bad(int* p) { p[threadIdx.x] = 1; }', "l2_bad")
    with g.stream:
        k((1,), (32,), (g.cp.uint64(16),))
    g.stream.synchronize()


def op_roofline(shim_path: str, force: bool = False, **_: object) -> dict[str, Any]:
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
    """Check the request's arguments (harness.shape_result.SHAPE_REQUEST: a wrong type or an unknown
    ``dtype`` is refused in one line), load the candidates' libraries, then evaluate: load-time
    code of a library runs before any GPU state exists, whatever happens to the GPU afterwards
    (the same on a machine without one)."""
    from .shape_result import check_shape_request

    check_shape_request(kw)
    for cand in kw.get("candidates") or ():
        if isinstance(cand, dict) and isinstance(cand.get("so_path"), str):
            load_lib(cand["so_path"])
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
    "_debug_print": op_debug_print,
    "_debug_oom_score": op_debug_oom_score,
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


def _write(fd: int, obj: dict[str, Any]) -> None:
    """One answer frame. An answer that is not JSON data or is too big becomes an error answer
    that says so (the request fails; the channel stays in step)."""
    try:
        buf = channel.encode_frame(obj)
    except (TypeError, ValueError) as e:
        buf = channel.encode_frame({"id": obj.get("id"), "ok": False, "kind": "error", "type": type(e).__name__,
                                    "error": f"the worker could not send its answer: {' '.join(str(e).split())[:300]}",
                                    "traceback": None, "label": None})
    view = memoryview(buf)
    while view:
        n = os.write(fd, view)
        view = view[n:]


_REQUEST = channel.Record({"id": channel.Str(64), "op": channel.Str(64), "args": channel.MapOf(channel.Data(), 64, 64)})


def _read_request(fd: int) -> dict[str, Any] | None:
    """The next request from the parent; None at the end of its stream. A frame that is not a
    request (the stream is out of step) ends the worker."""
    hdr = _read_exact(fd, channel.HEADER.size)
    if hdr is None:
        return None
    try:
        body = _read_exact(fd, channel.frame_length(hdr))
        if body is None:
            return None
        req = channel.validate(channel.loads(body), _REQUEST)
    except FrameError as e:
        print(f"l2tui worker: a malformed request: {e}", file=sys.stderr, flush=True)
        return None
    assert isinstance(req, dict)
    return req


def _label_of(e: BaseException) -> str | None:
    label = getattr(e, "label", None)
    return label[:200] if isinstance(label, str) else None


def cap_file_size(limit: int = MAX_FILE_BYTES) -> None:
    """Cap the size of every file this process writes at ``limit`` bytes, soft and hard (so that
    code loaded later cannot raise it again)."""
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    cap = limit if hard == resource.RLIM_INFINITY else min(limit, hard)
    resource.setrlimit(resource.RLIMIT_FSIZE, (cap, cap))


def first_to_go_on_oom() -> None:
    """Make this process the kernel's first choice when memory runs out (oom_score_adj 1000), so
    that a candidate whose host code allocates without end takes its own worker down, never the
    app that started it (the parent restarts the worker and charges the candidate)."""
    try:
        with open("/proc/self/oom_score_adj", "w", encoding="ascii") as f:
            f.write("1000")
    except OSError:
        pass


def serve() -> int:
    cap_file_size()
    first_to_go_on_oom()
    out_fd = os.dup(1)          # private channel to the parent
    os.dup2(2, 1)               # stray prints (libraries) go to stderr
    sys.stdout = sys.stderr
    in_fd = 0
    _write(out_fd, {"hello": True, "pid": os.getpid()})
    while True:
        req = _read_request(in_fd)
        if req is None:
            return 0
        rid, op, args = req["id"], req["op"], req["args"]
        if op == "_exit":
            return 0
        fn = OPS.get(op)
        if fn is None:
            _write(out_fd, {"id": rid, "ok": False, "kind": "error", "error": f"unknown op {op[:64]!r}", "type": "KeyError"})
            continue
        try:
            result = fn(**args)
            retire = _RETIRE_NEXT or len(LIBS) > MAX_LIBS
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
                "label": _label_of(e),
            }
            print(resp["traceback"], file=sys.stderr, flush=True)
            _write(out_fd, resp)
            if sticky:
                os._exit(70)


# --------------------------------------------------------------------------- one shape


def evaluate_shape(g: Gpu, *, m: int, n: int, k: int, shim_path: str, acc: str = "f32", dtype: str = "fp16",
                   candidates: list[dict[str, Any]] = (), baselines: list[str] = (),  # type: ignore[assignment]
                   mode: str = "offline", checks: str = "full", seeds: tuple[int, ...] = (1, 2, 3),
                   replays: int = 7, qps: float = 100.0, server_calls: int = 20, seed: int = 0,
                   autotune_budget_s: float | None = None, timing: str = "isolated", **_: object) -> dict[str, Any]:
    """Check and time candidates and baselines on one shape (see harness.checks / harness.timing).

    ``timing`` (offline mode): "isolated" (per call, the headline), "chained" (back to back) or
    "both" (each subject both ways in the same interleaved rounds; ``times_ms`` is per call).
    ``dtype``: the element type of A, B and C, "fp16" or "bf16" (f32 accumulation only): the
    buffers, the candidates' entry point, the baselines, the check kernels and the bound are that
    type's; the timing is the same for both.

    The phases, in the order their GPU work runs: the subjects (harness.shape_eval), the
    cuBLASLt autotune, the checks before the timing (harness.shape_eval), the timing and the
    checks that read it (harness.shape_timing); then the answer (harness.shape_result)."""
    from . import baselines as bl
    from . import checks as ck
    from . import roofline
    from . import timing as tm
    from .shape_eval import ShapeChecks, build_subjects, check_correctness, shape_ctx
    from .shape_result import shape_result
    from .shape_timing import autotune_baseline, time_offline, time_server
    from .shapes import Shape

    timing_mode = tm.parse_timing(timing)
    s = g.stream
    t_start = time.monotonic()
    rng = random.Random(f"{seed}:{m}x{n}x{k}")
    shim = g.lib(shim_path)
    fn32 = bl.ctypes_fn(shim, bl.shim_entry("l2_hgemm", "f32", dtype))   # the bound's f32-compute GEMM
    fn16 = bl.ctypes_fn(shim, "l2_hgemm_f16")
    g.warm_up(bl.ctypes_fn(shim, "l2_hgemm"))   # the warm-up GEMMs are fp16 whatever the request's type
    rf = op_roofline(shim_path)
    ctx = shape_ctx(g, m, n, k, dtype)
    sp = int(s.ptr)

    subs = build_subjects(g, shim, ctx, acc, candidates, baselines, light=checks == "fast")
    autotune = None
    if subs.autotune_pending:
        autotune = autotune_baseline(g, shim, ctx, subs, acc, seeds[-1], timing_mode, autotune_budget_s)
    subjects = subs.subjects

    phases = {"setup": round(time.monotonic() - t_start, 4)}
    t_phase = time.monotonic()
    status: dict[str, str] = {}
    sc = ShapeChecks(g.cp, s, ctx, subjects, status)
    for label, why in subs.refused.items():
        sc.refuse(label, why)
    seeded = check_correctness(sc, seeds, fn32, fn16, acc, sp)

    phases["checks"] = round(time.monotonic() - t_phase, 4)
    t_phase = time.monotonic()
    timed: dict[str, dict[str, Any]] = {}
    chained: dict[str, dict[str, Any]] = {}
    clocks_before = g.nvml.clocks()
    labels = [lb for lb in subjects if sc.timeable(lb)]
    limit = ck.verify_limit(seeded.bound, acc, dtype) if seeded.bound is not None else 0.0
    if mode == "offline":
        timed, chained = time_offline(g, sc, labels, timing_mode, replays, rng, seeded, limit, subs.errors)
    else:
        timed = time_server(g, sc, labels, qps, server_calls, rng, limit)
    clocks_after = g.nvml.clocks()
    phases["timing"] = round(time.monotonic() - t_phase, 4)

    return shape_result(
        m=m, n=n, k=k, acc=acc, dtype=dtype, mode=mode, timing_mode=timing_mode,
        kinds={lb: subj.kind for lb, subj in subjects.items()}, baselines=baselines, status=status,
        summaries={lb: r.summary() for lb, r in sc.recs.items()}, timed=timed, chained=chained,
        absent=subs.absent, errors=subs.errors, bounds=seeded.bounds, e32s=seeded.e32s, e16s=seeded.e16s,
        autotune=autotune, clocks_before=clocks_before, clocks_after=clocks_after,
        roofline_ms=roofline.roofline_ms(Shape(m, n, k), rf),
        seconds=round(time.monotonic() - t_start, 3), phases=phases,
    )


if __name__ == "__main__":
    sys.exit(serve())
