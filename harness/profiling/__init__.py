"""Profiling: Nsight Compute metrics, a bottleneck verdict with Otsu thresholds, NVML telemetry.

Python API (everything raises only :class:`harness.errors.HarnessError` subclasses
for user-caused problems; see :mod:`.errors`)::

    from harness.profiling import profile_kernel, profile_many, Request, Profile
    p = profile_kernel("kernel.cu", "4096x4096x4096", "f32")       # .cu path, .so path or source text
    p = profile_kernel(None, "64x64x64", baseline="torch")         # torch | cublas | cublaslt_heuristic | cublaslt_autotune
    p.verdict.cls          # "compute-bound" | "memory-bandwidth-bound" | "memory-latency-bound" | "launch-bound"
    p.verdict.reasons      # why, in words, with the thresholds
    p.filtered             # {key: Metric(value, unit)} - the class's short list (prompts, UI)
    p.metrics              # all canonical metrics of the call (kernels aggregated)
    p.kernels              # one KernelRecord per kernel of the call (raw ncu metrics + sections)
    p.to_dict(); Profile.from_dict(d); p.event_payload()   # the `profiled` event's verdict/metrics

    profile_many([Request(shape, so_path=..., label=...), ...])  # several calls, one ncu process
    profile_source(source, shape, acc) -> dict                   # EvaluatorLike.profile for the agent loop

    from harness.profiling import Classifier, filtered_metrics
    clf = Classifier.from_prior().update(session_profiles)        # refine thresholds with own profiles
    clf.thresholds; clf.classify(profile_or_metrics)
    filtered_metrics(profile_or_metrics, verdict)

    from harness.profiling import TelemetrySampler               # NVML, never raises
    with TelemetrySampler(hz=2) as t: ...; t.latest(); t.samples(); t.available; t.reason

Parsing alone (no GPU): ``parse_raw(csv_text)``, ``parse_details(csv_text)``,
``aggregate(kernels)``; ``otsu_threshold(values)``.

How: :mod:`.ncu` runs ``ncu --clock-control none --nvtx --nvtx-include <range>/``
on :mod:`.launch` (the one-launch driver, cupy inputs, warm-up outside the range),
imports the report as CSV (:mod:`.parse`), aggregates a call's kernels
(:mod:`.metrics`) and classifies it (:mod:`.verdict`, thresholds from
:mod:`.otsu` over the prior body in ``data/prior_profiles.json``).
"""

from .errors import CountersRefused, NcuMissing, NoKernelProfiled, ProfileFailed, ProfileRefused, ProfileTimeout
from .metrics import aggregate
from .otsu import otsu_split, otsu_threshold
from .parse import KernelRecord, Metric, parse_details, parse_raw
from .telemetry import TelemetrySampler
from .verdict import CLASSES, Classifier, Verdict, filtered_metrics
from .api import BASELINES, Profile, Request, profile_kernel, profile_many, profile_source

__all__ = [
    "BASELINES", "CLASSES", "Classifier", "CountersRefused", "KernelRecord", "Metric", "NcuMissing",
    "NoKernelProfiled", "Profile", "ProfileFailed", "ProfileRefused", "ProfileTimeout", "Request", "TelemetrySampler",
    "Verdict", "aggregate", "filtered_metrics", "otsu_split", "otsu_threshold", "parse_details",
    "parse_raw", "profile_kernel", "profile_many", "profile_source",
]
