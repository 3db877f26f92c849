"""The profiling API: ``profile_kernel`` / ``profile_many`` → :class:`Profile`.

A :class:`Profile` is one profiled *call* (all kernels it launched) of one
kernel or baseline on one shape: per-kernel ncu records, the aggregated
canonical metrics, the verdict and the filtered metric set for prompts and UI.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Sequence, TypedDict

from ..errors import HarnessError, KernelSourceError
from ..paths import KERNELS_DIR
from ..shapes import Shape, parse_shape
from .errors import NoKernelProfiled, ProfileFailed, ProfileRefused
from .metrics import aggregate
from .items import ItemResult, LaunchItem
from .ncu import NcuRun, find_ncu, run_ncu
from .parse import KernelRecord, KernelRecordDict, Metric, MetricDict, merge, parse_details, parse_raw, split_by_range
from .verdict import Classifier, Verdict, VerdictDict, filtered_metrics

if TYPE_CHECKING:
    from typing_extensions import Unpack

BASELINES = ("torch", "cublas", "cublaslt_heuristic", "cublaslt_autotune")
_SEQ = itertools.count()


class EventPayload(TypedDict):
    """The ``profiled`` event's ``verdict`` and ``metrics`` fields (the filtered set)."""

    verdict: str
    metrics: dict[str, MetricDict]


class _ProfileKeys(TypedDict):
    label: str
    shape: list[int]
    verdict: VerdictDict
    filtered: dict[str, MetricDict]
    metrics: dict[str, MetricDict]


class ProfileDict(_ProfileKeys, total=False):
    """A profile's dict form (``Profile.to_dict``); ``profile_source`` adds the kernels' names and
    the event fields, and leaves out the per-kernel records."""

    acc: str
    meta: dict[str, object]
    kernels: list[KernelRecordDict]
    kernel_names: list[str]
    event: EventPayload


class KernelOptions(TypedDict, total=False):
    """``profile_kernel``'s keyword options, as ``profile_source`` passes them on."""

    baseline: str | None
    timeout_s: float
    arch: str | None
    flags: Sequence[str]
    label: str | None
    classifier: Classifier | None
    warm_caches: bool


@dataclass
class Profile:
    label: str
    shape: Shape
    acc: str
    kernels: list[KernelRecord]
    metrics: dict[str, Metric]
    verdict: Verdict
    filtered: dict[str, Metric]
    #: how it was profiled: ncu's version, the NVTX flavour, seconds, warm or flushed caches
    meta: dict[str, object] = field(default_factory=dict)

    @classmethod
    def from_kernels(cls, label: str, shape: Shape, acc: str, kernels: list[KernelRecord],
                     classifier: Classifier | None = None, meta: dict[str, object] | None = None) -> "Profile":
        metrics = aggregate(kernels)
        v = (classifier or default_classifier()).classify(metrics)
        return cls(label, shape, acc, kernels, metrics, v, filtered_metrics(metrics, v), dict(meta or {}))

    def to_dict(self, *, kernels: bool = True) -> ProfileDict:
        d: ProfileDict = {
            "label": self.label, "shape": [self.shape.m, self.shape.n, self.shape.k], "acc": self.acc,
            "verdict": self.verdict.to_dict(),
            "filtered": {k: v.to_dict() for k, v in self.filtered.items()},
            "metrics": {k: v.to_dict() for k, v in self.metrics.items()},
            "meta": dict(self.meta),
        }
        if kernels:
            d["kernels"] = [k.to_dict() for k in self.kernels]
        return d

    @classmethod
    def from_dict(cls, d: ProfileDict) -> "Profile":
        return cls(
            d["label"], Shape(*d["shape"]), d.get("acc", "f32"),
            [KernelRecord.from_dict(k) for k in d.get("kernels", [])],
            {k: Metric.from_dict(v) for k, v in d["metrics"].items()},
            Verdict.from_dict(d["verdict"]),
            {k: Metric.from_dict(v) for k, v in d["filtered"].items()},
            dict(d.get("meta", {})),
        )

    def event_payload(self) -> EventPayload:
        """The ``profiled`` event's ``verdict`` and ``metrics`` fields (filtered set, see INTERFACES.md)."""
        return {"verdict": self.verdict.cls, "metrics": {k: v.to_dict() for k, v in self.filtered.items()}}


_CLASSIFIER: Classifier | None = None


def default_classifier() -> Classifier:
    global _CLASSIFIER
    if _CLASSIFIER is None:
        _CLASSIFIER = Classifier.from_prior()
    return _CLASSIFIER


@dataclass
class Request:
    """One call to profile: a built library or a baseline name, on one shape."""

    shape: Shape
    acc: str = "f32"
    so_path: str | None = None
    baseline: str | None = None
    label: str = ""
    warmup: int = 2
    symbol: str = "l2_hgemm"

    def item(self, rng: str) -> LaunchItem:
        if self.baseline and self.baseline != "cublas":
            kind, so = self.baseline, self.so_path     # torch: no library; cuBLASLt: the shim
        else:
            kind, so = "so", self.so_path
        return {"range": rng, "kind": kind, "so_path": so, "shape": [self.shape.m, self.shape.n, self.shape.k],
                "acc": self.acc, "warmup": self.warmup, "label": self.label, "symbol": self.symbol}


def _build_so(source: str, arch: str | None, flags: Sequence[str]) -> str:
    from ..build import build

    r = build(source, arch=arch, flags=flags, name="profile")
    if not r.ok or r.so_path is None:
        first = r.errors[0] if r.errors else None
        raise ProfileFailed(f"the kernel does not compile: {first or 'see the build log'}; fix it before profiling")
    return str(r.so_path)


def resolve_kernel(kernel: str | os.PathLike[str], arch: str | None = None, flags: Sequence[str] = ()) -> str:
    """A shared-library path from a ``.so`` path, a ``.cu`` path or kernel source text."""
    so_path, source = _kernel_input(kernel)
    return so_path if source is None else _build_so(source, arch, flags)


def _kernel_input(kernel: str | os.PathLike[str]) -> tuple[str, str | None]:
    """``(so_path, None)`` for a built library, ``("", source)`` for source to build.

    Reading comes apart from building so that a caller can check its tools in between: a
    missing file is the user's first mistake to hear about, a missing profiler the second,
    and neither should wait for nvcc."""
    s = str(kernel)
    if "l2_hgemm" in s and ("\n" in s or "(" in s):
        return "", s
    p = Path(s)
    if p.suffix == ".so":
        if not p.is_file():
            raise KernelSourceError(f"kernel library {s!r} not found: give a .so, a .cu file or source text")
        return str(p.resolve()), None
    try:
        return "", p.read_text()
    except OSError as e:
        raise KernelSourceError(f"cannot read kernel file {s!r}: {e.strerror}") from None


def baseline_request(name: str, shape: Shape, acc: str = "f32", arch: str | None = None) -> Request:
    if name not in BASELINES:
        raise HarnessError(f"unknown baseline {name!r}: use one of {', '.join(BASELINES)}")
    if name == "cublas":
        from ..baselines import build_shim

        shim = KERNELS_DIR / "cublas_shim.cu"
        if not shim.is_file():
            raise HarnessError("the cuBLAS shim (harness/kernels/cublas_shim.cu) is missing: use --baseline torch")
        # the bench's own build of the shim: trusted (a candidate may not call cuBLAS, the shim
        # must) and linked against the pip wheel's libcublas
        return Request(shape, acc, so_path=str(build_shim(arch).so_path), label="cublas",
                       symbol="l2_hgemm_f16" if acc == "f16" else "l2_hgemm")
    if name in ("cublaslt_heuristic", "cublaslt_autotune"):
        from ..baselines import build_shim

        return Request(shape, acc, so_path=str(build_shim(arch).so_path), baseline=name, label=name)
    return Request(shape, acc, baseline=name, label=name)


def profile_many(requests: Sequence[Request], *, timeout_s: float = 120.0, classifier: Classifier | None = None,
                 ncu: str | None = None, sections: Sequence[str] | None = None, nvtx: str = "cupy",
                 retry_profiler: bool = True, warm_caches: bool = False) -> list[Profile | HarnessError]:
    """Profile several calls in one ncu process; one Profile (or the error for that call) per request.
    ``warm_caches``: ncu keeps the caches between passes instead of flushing them (:mod:`.ncu`)."""
    names = [f"l2p_{os.getpid()}_{next(_SEQ)}" for _ in requests]
    items = [r.item(n) for r, n in zip(requests, names)]
    what = requests[0].label + f" on {requests[0].shape}" if len(requests) == 1 else f"{len(requests)} calls"
    run = run_ncu(items, timeout_s=timeout_s, ncu=ncu, sections=sections, nvtx=nvtx, what=what,
                  warm_caches=warm_caches)
    groups = groups_of(run, names)
    if retry_profiler and nvtx != "profiler" and len(requests) == 1 and not groups[names[0]]:
        # NVTX unavailable in this cupy build: bracket the call with cudaProfilerStart/Stop instead
        run = run_ncu(items, timeout_s=timeout_s, ncu=ncu, sections=sections, nvtx="profiler", what=what,
                      warm_caches=warm_caches)
        groups = {names[0]: merge(parse_raw(run.raw_csv), parse_details(run.details_csv))}
    status: dict[str, ItemResult] = {i["range"]: i for i in run.items}
    out: list[Profile | HarnessError] = []
    for req, name in zip(requests, names):
        ks = groups.get(name, [])
        st = status.get(name)
        if not ks:
            detail = (st["message"] if st else "") or ("the call launched no kernel" if st and st["status"] == "ok" else "")
            out.append(NoKernelProfiled(f"{req.label or 'the kernel'} on {req.shape}", detail))
            continue
        meta = {"ncu": run.ncu_version, "nvtx": run.nvtx, "seconds": round(run.seconds, 2),
                "caches": "warm" if warm_caches else "flushed"}
        out.append(Profile.from_kernels(req.label or "kernel", req.shape, req.acc, ks, classifier, meta))
    return out


def groups_of(run: NcuRun, names: list[str]) -> dict[str, list[KernelRecord]]:
    kernels = merge(parse_raw(run.raw_csv), parse_details(run.details_csv))
    ok = [i.get("range") for i in run.items if i.get("status") == "ok"] or names
    return split_by_range(kernels, [n for n in names if n in ok])


def _label_of(kernel: str | os.PathLike[str]) -> str:
    """A file's stem, or "kernel" for source text."""
    s = str(kernel)
    return "kernel" if "\n" in s or "l2_hgemm" in s else Path(s).stem


def _kernel_request(kernel: str | os.PathLike[str], shape: Shape, acc: str, arch: str | None,
                    flags: Sequence[str]) -> tuple[Request, str]:
    """The request for a kernel and the ncu to run it with, found before nvcc builds the kernel:
    a machine without the profiler hears so at once, not after a build of many seconds."""
    so_path, source = _kernel_input(kernel)
    ncu = find_ncu()
    if source is not None:
        so_path = _build_so(source, arch, flags)
    return Request(shape, acc, so_path=so_path, label=_label_of(kernel)), ncu


def profile_kernel(kernel: str | os.PathLike[str] | None, shape: Shape | str, acc: str = "f32", *,
                   baseline: str | None = None, timeout_s: float = 120.0, arch: str | None = None,
                   flags: Sequence[str] = (), label: str | None = None,
                   classifier: Classifier | None = None, warm_caches: bool = False) -> Profile:
    """Profile one call of a kernel (``.so`` path, ``.cu`` path or source text) or a baseline;
    ``warm_caches`` profiles it with the caches as the calls before it left them.

    Raises HarnessError subclasses: NcuMissing, CountersRefused, ProfileTimeout,
    NoKernelProfiled, ProfileFailed, KernelSourceError; ProfileRefused for a kernel while the
    sandbox is required (``L2TUI_SANDBOX=require``, the llm and human policies): ncu would load
    it outside the sandbox. Baselines (the project's own shim, torch) are profiled regardless.
    """
    shp = parse_shape(shape) if isinstance(shape, str) else shape
    if (kernel is None) == (baseline is None):
        raise HarnessError("profile either a kernel or a baseline (exactly one of them)")
    if kernel is not None:
        from .. import sandbox

        if sandbox.mode() == "require":
            raise ProfileRefused("not profiled: Nsight Compute would load this kernel outside the sandbox this run "
                                 "requires for model-written code (pass --no-sandbox to profile it unprotected)")
    if baseline is not None:
        if baseline not in BASELINES:
            raise HarnessError(f"unknown baseline {baseline!r}: use one of {', '.join(BASELINES)}")
        ncu = find_ncu()   # before the cuBLAS shim's build: said at once, not after nvcc ran
        req = baseline_request(baseline, shp, acc, arch)
    else:
        assert kernel is not None
        req, ncu = _kernel_request(kernel, shp, acc, arch, flags)
    if label:
        req.label = label
    res = profile_many([req], timeout_s=timeout_s, classifier=classifier, ncu=ncu, warm_caches=warm_caches)[0]
    if isinstance(res, HarnessError):
        raise res
    return res


def profile_source(source: str, shape: Shape | str, acc: str = "f32", **kw: Unpack[KernelOptions]) -> ProfileDict:
    """``EvaluatorLike.profile(source, shape, acc) -> dict`` of INTERFACES.md: ``Profile.to_dict()``
    without the per-kernel raw dump (verdict, reasons, thresholds, filtered and canonical metrics),
    plus ``event`` = the ``profiled`` event's ``verdict``/``metrics`` fields."""
    p = profile_kernel(source, shape, acc, **kw)
    d = p.to_dict(kernels=False)
    d["kernel_names"] = [k.name for k in p.kernels]
    d["event"] = p.event_payload()
    return d
