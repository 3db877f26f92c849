"""Evaluator: the Python API the agent uses to build, check and time one kernel on one shape.

It owns a :class:`harness.worker.GpuWorker` (the caller never touches CUDA) and the
cuBLAS shim.  ``evaluate()`` never raises for kernel faults: compile errors, wrong
results, crashes, hangs and unsupported shapes come back as an :class:`Evaluation`
with the matching ``status``, which is what the reward needs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence, TypeVar

from . import channel
from .baselines import DEFAULT_BASELINES, build_shim, parse_baselines
from .build import BuildResult, CompileError, build
from .channel import MAX_STRING, Bool, Data, FrameError, Int, Json, ListOf, MapOf, Num, Record, Str
from .errors import HarnessError, ToolMissing
from .shapes import Shape, parse_accumulator
from .stats import speedup
from .worker import GpuWorker, WorkerError

STATUSES = ("ok", "compile_error", "wrong", "crashed", "timeout", "unsupported")
_NONDET_RE = re.compile(r"^\s*//\s*l2:\s*nondeterministic\b", re.M)


def is_nondeterministic(source: str) -> bool:
    """A source declares a non-bit-reproducible reduction with ``// l2: nondeterministic``."""
    return bool(_NONDET_RE.search(source))


_PDL_KNOB_RE = re.compile(r"^\s*#\s*define\s+PDL\s+(\d+)\b", re.M)


def uses_pdl(source: str) -> bool:
    """Whether a source launches its kernel with programmatic dependent launch: a family's ``PDL``
    knob when it has one, else the launch attribute or the grid-dependency instructions in the
    source. It is what back-to-back timing rewards and per-call timing does not."""
    knob = _PDL_KNOB_RE.search(source)
    if knob:
        return knob.group(1) != "0"
    return "ProgrammaticStreamSerialization" in source or "griddepcontrol" in source


DTYPES = ("fp16", "bf16")


def parse_dtype(dtype: str) -> str:
    """``dtype`` when it is an element type the harness evaluates in; HarnessError (one line) else."""
    if dtype not in DTYPES:
        raise HarnessError(f"unknown dtype {str(dtype)[:20]!r}: use one of {', '.join(DTYPES)}")
    return dtype


def check_dtype_acc(dtype: str, acc: str) -> str:
    """``dtype`` when ``acc`` is an accumulation it has: bf16 accumulates in f32 only."""
    if dtype == "bf16" and acc != "f32":
        raise HarnessError("bf16 accumulates in f32 only: f16 accumulation is an fp16 option")
    return dtype


def request_timeout_s(shape: Shape, base: float, n_subjects: int = 5) -> float:
    """Generous per-request timeout: base plus time for checks and timing of big shapes."""
    per_call_s = shape.flops / 2e14          # pessimistic 200 TFLOP/s
    return base + n_subjects * 40 * per_call_s


@dataclass
class Evaluation:
    status: str
    build: BuildResult | None
    check: dict[str, Any] | None = None
    times_ms: dict[str, float] = field(default_factory=dict)
    spread: dict[str, float] = field(default_factory=dict)
    roofline_ms: float | None = None
    message: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def speedup(self, baseline: str, label: str | None = None) -> float | None:
        label = label or self.extra.get("label", "candidate")
        b = self.times_ms.get(baseline)
        c = self.times_ms.get(label)
        if not b or not c:
            return None
        return b / c

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "build": self.build.to_dict() if self.build is not None else None,
            "check": self.check,
            "times_ms": dict(self.times_ms),
            "spread": dict(self.spread),
            "roofline_ms": self.roofline_ms,
            "message": self.message,
            "extra": self.extra,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Evaluation":
        b = d.get("build")
        return cls(
            status=d["status"],
            build=BuildResult.from_dict(b) if b else None,
            check=d.get("check"),
            times_ms=dict(d.get("times_ms") or {}),
            spread=dict(d.get("spread") or {}),
            roofline_ms=d.get("roofline_ms"),
            message=d.get("message", ""),
            extra=dict(d.get("extra") or {}),
        )


# --------------------------------------------------------------------------- evaluations as data
#
# An Evaluation's dict form comes back from places l2tui did not compute it in this process:
# a recording (l2tui.agent.recorded), a Ray actor (l2tui.executors.ray_executor). It is read as
# data against this schema before Evaluation.from_dict builds anything from it.

_NAME = 200
_RES = Int(0, 1 << 40)
_KERNEL_RESOURCES = Record({"name": Str(4096)}, optional={"arch": Str(32), "registers": _RES, "smem_bytes": _RES,
                                                          "stack_bytes": _RES, "spill_store_bytes": _RES,
                                                          "spill_load_bytes": _RES})
_PTXAS = Record({}, optional={"registers": _RES, "smem_bytes": _RES, "spill_store_bytes": _RES,
                              "spill_load_bytes": _RES, "stack_bytes": _RES,
                              "kernels": ListOf(_KERNEL_RESOURCES, 4096)}, null=True)
_DIAGNOSTIC = Record({"file": Str(4096), "line": Int(0, 1 << 31, null=True), "col": Int(0, 1 << 31, null=True),
                      "severity": Str(16), "message": Str(MAX_STRING)})
#: a compile log is the longest text an evaluation carries; a build keeps what it returns under this
MAX_LOG_CHARS = 4 << 20
BUILD_SCHEMA = Record(
    {"ok": Bool(), "key": Str(128, pattern=r"[0-9a-f]*")},
    optional={"so_path": Str(4096, null=True), "ptxas": _PTXAS, "errors": ListOf(_DIAGNOSTIC, 10_000),
              "log": Str(MAX_LOG_CHARS), "seconds": Num(0.0, 1e7), "cached": Bool(), "arch": Str(32),
              "flags": ListOf(Str(4096), 256), "nvcc_version": Str(64), "replayed": Bool(), "host": Str(256)},
    null=True,
)
_MS = Num(0.0, 1e7, null=True)
EVALUATION_SCHEMA = Record(
    {"status": Str(40, pattern=r"[a-z_]+")},
    optional={"build": BUILD_SCHEMA, "check": Data(max_depth=8), "times_ms": MapOf(_MS, 512, _NAME),
              "spread": MapOf(Num(finite=False, null=True), 512, _NAME), "roofline_ms": _MS,
              "message": Str(MAX_STRING), "extra": MapOf(Data(max_depth=8), 256, _NAME)},
)


T = TypeVar("T")


def _from_data(d: Json, schema: channel.Schema, make: Callable[[dict[str, Json]], T], what: str, where: str) -> T:
    """``make(d)`` once ``d`` fits ``schema``: FrameError (one line naming the field, or saying
    it is not ``what``) for anything else, since ``d`` was read from where a kernel ran."""
    channel.validate(d, schema, where)
    assert isinstance(d, dict)
    try:
        return make(d)
    except (TypeError, ValueError, KeyError) as e:
        raise FrameError(f"{where}: not {what} ({type(e).__name__}: {str(e)[:100]})") from None


def evaluation_from_data(d: Json, where: str = "$") -> "Evaluation":
    """An Evaluation from its dict form read as untrusted data: FrameError (one line naming the
    field) unless it fits :data:`EVALUATION_SCHEMA`."""
    return _from_data(d, EVALUATION_SCHEMA, Evaluation.from_dict, "an evaluation", where)


def build_from_data(d: Json, where: str = "build") -> BuildResult:
    """A BuildResult from its dict form read as untrusted data (a recording's build): FrameError
    (one line naming the field) unless it fits :data:`BUILD_SCHEMA`."""
    if d is None:
        raise FrameError(f"{where}: no build")
    return _from_data(d, BUILD_SCHEMA, BuildResult.from_dict, "a build", where)


def failed_build(message: str, arch: str = "", flags: Sequence[str] = ()) -> BuildResult:
    """A build that did not happen (no ``l2_hgemm``, nvcc missing, bad flags, a malformed recorded
    build) as one error at ``kernel.cu``, so the compile stage reports it like nvcc's own."""
    return BuildResult(ok=False, key="", so_path=None, ptxas=None,
                       errors=[CompileError("kernel.cu", None, None, "error", message)], log=message,
                       seconds=0.0, cached=False, arch=arch, flags=list(flags))


def _failure_kind(e: WorkerError) -> str:
    return "timeout" if e.kind == "timeout" else "crashed"


def _one_line(e: WorkerError) -> str:
    text = str(e).strip()
    return (text.splitlines()[0] if text else type(e).__name__)[:300]


class Evaluator:
    """Build + check + time through one GPU worker.  Context manager; ``close()`` stops the worker.

    ``checks`` says how hard the *baselines* are checked ("fast": one seed + graph replay;
    "full": like a candidate); the candidate always gets every check.

    ``dtype`` ("fp16", the default, or "bf16") is the element type of A, B and C in every request:
    candidates are built and called through that type's entry point (``l2_hgemm`` /
    ``l2_hgemm_bf16``), the baselines and checks run in it, and the answer says which it was
    (``run_shape(..., dtype=...)`` overrides it for one request). bf16 accumulates in f32 only.

    It implements :class:`harness.evaluator_protocol.Evaluator`: it batches (``run_shape``),
    times on this machine's GPU, and leaves profiling to ``harness.profiling`` (the caller's).
    """

    can_batch = True
    replays_recording = False
    own_profiles = False

    def __init__(self, arch: str | None = None, baselines: Sequence[str] | str = DEFAULT_BASELINES,
                 mode: str = "offline", timeout_s: float = 60, *, checks: str = "fast", seed: int = 0,
                 device: int | None = None, worker: GpuWorker | None = None, qps: float = 100.0,
                 server_calls: int = 20, replays: int = 7, timing: str | None = None, dtype: str = "fp16") -> None:
        from .timing import parse_timing

        if mode not in ("offline", "server"):
            raise HarnessError(f"bad mode {mode!r}: use offline or server")
        try:
            self.timing = parse_timing(timing)
        except ValueError as e:
            raise HarnessError(str(e)) from None
        self.arch = arch
        self.dtype = parse_dtype(dtype)
        self.baselines = parse_baselines(baselines)
        #: typed as the protocol's (``harness.evaluator_protocol``); a GPU evaluator's is never None
        self.mode: str | None = mode
        self.timeout_s = timeout_s
        self.checks = checks
        self.seed = seed
        self.qps = qps
        self.server_calls = server_calls
        self.replays = replays
        self.worker = worker or GpuWorker(device=device)
        self._own_worker = worker is None
        self._shim: BuildResult | None = None

    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._own_worker:
            self.worker.close()

    @property
    def shim(self) -> BuildResult:
        if self._shim is None:
            self._shim = build_shim(self.arch)
        return self._shim

    def _request(self, shape: Shape, acc: str, candidates: list[dict[str, Any]], baselines: Sequence[str],
                 timeout_s: float | None, dtype: str) -> dict[str, Any]:
        n = len(candidates) + len(baselines) + 1
        t = timeout_s if timeout_s is not None else request_timeout_s(shape, self.timeout_s, n)
        answer: dict[str, Any] = self.worker.call(
            "evaluate_shape", timeout_s=t, m=shape.m, n=shape.n, k=shape.k, acc=acc, dtype=dtype,
            candidates=candidates, baselines=list(baselines), shim_path=str(self.shim.so_path),
            mode=self.mode, checks=self.checks, seed=self.seed, qps=self.qps,
            server_calls=self.server_calls, replays=self.replays, timing=self.timing,
        )
        return answer

    def run_shape(self, shape: Shape, acc: str, candidates: list[dict[str, Any]], baselines: Sequence[str],
                  timeout_s: float | None = None, dtype: str | None = None) -> dict[str, Any]:
        """One ``evaluate_shape`` request; a subject that crashes or hangs the worker is charged alone.

        Why: a CUDA error poisons the whole context and surfaces at the next synchronisation,
        often inside another subject's call, and a hang stops every subject of the request. So
        after a failed request the worker (restarted by harness.worker) evaluates each candidate
        by itself to find which ones fail, then the others with the baselines again; the failing
        ones get ``crashed``/``timeout`` with their own message. Raises WorkerError only when the
        baselines alone cannot be evaluated. ``dtype``: this request's element type (default the
        evaluator's)."""
        dt = check_dtype_acc(parse_dtype(dtype or self.dtype), acc)
        try:
            return self._request(shape, acc, candidates, baselines, timeout_s, dt)
        except WorkerError as e:
            if not candidates:
                raise
            first = e
        failed: dict[str, tuple[str, str]] = {}
        if len(candidates) == 1:
            failed[candidates[0]["label"]] = (_failure_kind(first), _one_line(first))
        else:
            for cand in candidates:
                try:
                    self._request(shape, acc, [cand], [], timeout_s, dt)
                except WorkerError as e:
                    failed[cand["label"]] = (_failure_kind(e), _one_line(e))
        rest = [c for c in candidates if c["label"] not in failed]
        try:
            res = self._request(shape, acc, rest, baselines, timeout_s, dt)
        except WorkerError as e:
            if not rest:
                raise
            # fine alone, failing together: charge the survivors (no single culprit), keep the baselines
            for cand in rest:
                failed[cand["label"]] = (_failure_kind(e), _one_line(e) + " (only together with the other subjects)")
            res = self._request(shape, acc, [], baselines, timeout_s, dt)
        for label, (status, message) in failed.items():
            res["status"][label] = status
            res["times_ms"][label] = None
            res["checks"][label] = {"ok": False, "failed": status, "detail": message}
            res.setdefault("errors", {})[label] = message
        res["charged_alone"] = sorted(failed)
        return res

    def gpu_info(self) -> dict[str, Any]:
        info: dict[str, Any] = self.worker.call("gpu_info", timeout_s=120)
        return info

    def evaluate(self, source: str, shape: Shape, acc: str = "f32", *, flags: Sequence[str] = (),
                 label: str = "candidate", time_baselines: bool = True, trusted: bool = False) -> Evaluation:
        """Build, check and time ``source`` on ``shape``; ``trusted`` skips the source policy (the
        project's own forwarding kernels, e.g. the export bench's)."""
        acc = parse_accumulator(acc)
        check_dtype_acc(self.dtype, acc)
        br = build(source, arch=self.arch, flags=flags, trusted=trusted, dtype=self.dtype)
        if not br.ok:
            first = br.errors[0] if br.errors else None
            return Evaluation("compile_error", br, message=f"compile error: {first}" if first else "compile error")
        cand = [{"label": label, "so_path": str(br.so_path), "nondeterministic": is_nondeterministic(source)}]
        try:
            res = self.run_shape(shape, acc, cand, self.baselines if time_baselines else [])
        except WorkerError as e:
            text = str(e).splitlines()[0]
            if "no NVIDIA GPU found" in text:
                raise ToolMissing("no NVIDIA GPU found: " + text.split("no NVIDIA GPU found:", 1)[1].strip()[:200]) from None
            # timeout -> "timeout"; a dead worker, a poisoned context or an error raised in the
            # worker while running this candidate -> "crashed" (the message says which)
            status = "timeout" if e.kind == "timeout" else "crashed"
            return Evaluation(status, br, message=text[:300], extra={"label": label})
        st = res["status"].get(label, "crashed")
        check = res["checks"].get(label)
        times = {k: v for k, v in res["times_ms"].items() if v is not None}
        spread = {k: v for k, v in res["spread"].items() if v is not None}
        if st == "ok":
            t = times.get(label)
            msg = f"ok: {t:.4g} ms" if t else "ok"
            for b in self.baselines:
                sp = speedup(times.get(b), t)
                if sp is not None:
                    msg += f", {sp:.2f}x vs {b}"
                    break
        elif st == "unsupported":
            why = (check or {}).get("detail") or ""
            msg = ("unsupported: " + why[:300]) if why else "unsupported: l2_hgemm returned non-zero for this shape"
        elif st in ("crashed", "timeout"):
            return Evaluation(st, br, message=(check or {}).get("detail", st)[:300],
                              extra={"label": label, "mode": self.mode, "timing": self.timing})
        else:
            msg = f"wrong: check '{check.get('failed')}' failed: {check.get('detail')}" if check else st
        extra = {k: res.get(k) for k in ("status", "p90_ms", "device_ms", "clocks", "autotune", "cublas_variant", "bound",
                                         "absent", "errors", "phases", "seconds", "separator_ms",
                                         "detail_times_ms")}
        extra["label"] = label
        extra["dtype"] = self.dtype
        extra["mode"] = self.mode
        extra["timing"] = self.timing
        if res.get("times_ms_chained"):
            extra["times_ms_chained"] = {k: v for k, v in res["times_ms_chained"].items() if v is not None}
        return Evaluation(st, br, check, times, spread, res.get("roofline_ms"), msg, extra)
