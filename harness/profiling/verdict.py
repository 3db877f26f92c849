"""The bottleneck verdict: compute / memory-bandwidth / memory-latency / launch bound.

Why thresholds from data: "high DRAM throughput" means 85 % on one kernel family
and 60 % on another, so (as in CUDAMaster's hardware filter) each threshold is
the Otsu split of that feature over a *body* of profiles: the prior body shipped
in ``data/prior_profiles.json`` (recorded on an H200 across ``sample100`` for
cuBLAS and simple kernels), refined by a session's own profiles
(``Classifier.from_prior().update(profiles)``).

Features of one call (all its kernels aggregated, see :mod:`.metrics`):

* ``compute``  = max(SM throughput %, tensor-pipe utilisation %)
* ``memory``   = max(memory throughput %, DRAM %, L2 %) (ncu's memory SOL is the busiest unit)
* ``duration`` = total duration in µs
* ``stall_mem``= share of warp-stall cycles spent waiting on memory
  (long/short scoreboard, LG/MIO/TEX throttle, drain)

Rules, in order:

1. both throughputs below their thresholds and the call shorter than the launch
   threshold → **launch-bound** (too short to fill the GPU: launch and ramp cost dominate);
2. compute ≥ its threshold and memory not (or both high and the tensor pipe is busy,
   or compute ≥ memory) → **compute-bound**; ncu's memory figure includes L1/shared
   memory, which a tensor-core GEMM keeps busy too, hence the tensor-pipe tie-break;
3. memory ≥ its threshold → **memory-bandwidth-bound** (DRAM, L2 or L1/shared: the
   reasons name the busiest unit);
4. otherwise the GPU is neither busy computing nor moving bytes for a long call:
   **memory-latency-bound** (too little parallelism or too many dependent loads to hide
   latency), except when the grid fills the GPU (≥ 1 wave) *and* memory stalls are a
   minority (share < its threshold): then **compute-bound** (instruction latency /
   dependency chains, reported as such).

Otsu thresholds are clipped into sane ranges (``CLIP``), because a body can be
one-sided (e.g. only big cuBLAS calls) and Otsu then splits noise.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, TypedDict

from ..paths import PROFILING_DATA_DIR
from .metrics import label_of
from .parse import Metric
from .otsu import otsu_threshold

PRIOR_FILE = PROFILING_DATA_DIR / "prior_profiles.json"

COMPUTE = "compute-bound"
BANDWIDTH = "memory-bandwidth-bound"
LATENCY = "memory-latency-bound"
LAUNCH = "launch-bound"
CLASSES = (COMPUTE, BANDWIDTH, LATENCY, LAUNCH)

#: used when a body has too few distinct values for a feature
DEFAULTS = {"compute": 60.0, "memory": 60.0, "launch_us": 10.0, "stall_mem": 0.5}
#: Otsu results are clipped into these ranges
CLIP = {"compute": (35.0, 80.0), "memory": (35.0, 80.0), "launch_us": (2.0, 20.0), "stall_mem": (0.25, 0.75)}

#: per class, the metrics that matter (what prompts and the UI show); stalls are added dynamically
CLASS_METRICS: dict[str, tuple[str, ...]] = {
    COMPUTE: ("duration_us", "sm_throughput_pct", "tensor_pipe_pct", "ipc", "issue_active_pct",
              "achieved_occupancy_pct", "registers_per_thread", "stall_top"),
    BANDWIDTH: ("duration_us", "memory_throughput_pct", "dram_throughput_pct", "l2_throughput_pct",
                "l1_throughput_pct", "dram_bandwidth", "dram_bytes", "l2_hit_rate_pct", "l1_hit_rate_pct"),
    LATENCY: ("duration_us", "achieved_occupancy_pct", "theoretical_occupancy_pct", "eligible_warps",
              "warp_cycles_per_issue", "stall_memory_frac", "stall_top", "registers_per_thread",
              "smem_per_block", "l2_hit_rate_pct"),
    LAUNCH: ("duration_us", "kernels", "grid_size", "block_size", "waves_per_sm", "sm_throughput_pct",
             "memory_throughput_pct"),
}
TOP_STALLS = {COMPUTE: 2, BANDWIDTH: 0, LATENCY: 3, LAUNCH: 0}


def _f(metrics: Mapping[str, object], key: str) -> float | None:
    v = metrics.get(key)
    if isinstance(v, Metric):
        v = v.value
    return float(v) if isinstance(v, (int, float)) and math.isfinite(float(v)) else None


def features(metrics: Mapping[str, object]) -> dict[str, float | None]:
    """The four verdict features of one call from its canonical metrics (Metric or plain numbers)."""
    comp = [x for x in (_f(metrics, "sm_throughput_pct"), _f(metrics, "tensor_pipe_pct")) if x is not None]
    mem = [x for x in (_f(metrics, "memory_throughput_pct"), _f(metrics, "dram_throughput_pct"),
                       _f(metrics, "l2_throughput_pct")) if x is not None]
    return {
        "compute": max(comp) if comp else None,
        "memory": max(mem) if mem else None,
        "duration_us": _f(metrics, "duration_us"),
        "stall_mem": _f(metrics, "stall_memory_frac"),
    }


#: a verdict's dict form (``Verdict.to_dict``), as stored in events and profile files
VerdictDict = TypedDict("VerdictDict", {"class": str, "reasons": list[str], "features": dict[str, "float | None"],
                                        "thresholds": dict[str, float]})


@dataclass
class Verdict:
    """The class of one call, why, and the thresholds used."""

    cls: str
    reasons: list[str]
    features: dict[str, float | None]
    thresholds: dict[str, float]

    @property
    def short(self) -> str:
        return self.cls.replace("-bound", "")

    def to_dict(self) -> VerdictDict:
        return {"class": self.cls, "reasons": list(self.reasons), "features": dict(self.features),
                "thresholds": dict(self.thresholds)}

    @classmethod
    def from_dict(cls, d: VerdictDict) -> "Verdict":
        return cls(d["class"], list(d.get("reasons", [])), dict(d.get("features", {})), dict(d.get("thresholds", {})))


def _clip(key: str, v: float | None) -> float:
    if v is None:
        return DEFAULTS[key]
    lo, hi = CLIP[key]
    return min(max(v, lo), hi)


def compute_thresholds(body: Iterable[Mapping[str, object]]) -> dict[str, float]:
    """Otsu thresholds of the four features over a body of canonical-metric dicts."""
    feats = [features(m) for m in body]
    comp = [f["compute"] for f in feats if f["compute"] is not None]
    mem = [f["memory"] for f in feats if f["memory"] is not None]
    t = {"compute": _clip("compute", otsu_threshold(comp)), "memory": _clip("memory", otsu_threshold(mem))}
    # among calls that keep neither side busy, split short (launch) from long (latency)
    low = [f for f in feats if f["compute"] is not None and f["memory"] is not None
           and f["compute"] < t["compute"] and f["memory"] < t["memory"]]
    logs = [math.log10(f["duration_us"]) for f in low if f["duration_us"] and f["duration_us"] > 0]
    lt = otsu_threshold(logs)
    t["launch_us"] = _clip("launch_us", 10 ** lt if lt is not None else None)
    long_low = [f["stall_mem"] for f in low if f["stall_mem"] is not None
                and (f["duration_us"] or 0) >= t["launch_us"]]
    t["stall_mem"] = _clip("stall_mem", otsu_threshold(long_low))
    return t


def classify(metrics: Mapping[str, object], thresholds: Mapping[str, float]) -> Verdict:
    """Apply the rules in this module's docstring to one call's canonical metrics."""
    f = features(metrics)
    t = dict(thresholds)
    c, m, d, s = f["compute"], f["memory"], f["duration_us"], f["stall_mem"]
    if c is None and m is None:
        return Verdict(LAUNCH if (d is not None and d < t["launch_us"]) else LATENCY,
                       ["no throughput metrics in this profile (sections missing?)"], f, t)
    c = c or 0.0
    m = m or 0.0
    hi_c, hi_m = c >= t["compute"], m >= t["memory"]
    top = metrics.get("stall_top")
    top_s = top.value if isinstance(top, Metric) else top
    if not hi_c and not hi_m and d is not None and d < t["launch_us"]:
        return Verdict(LAUNCH, [
            f"{d:.1f} us in total, under the {t['launch_us']:.1f} us launch threshold",
            f"compute {c:.0f}% < {t['compute']:.0f}%, memory {m:.0f}% < {t['memory']:.0f}%: the GPU never fills up",
        ], f, t)
    tensor = _f(metrics, "tensor_pipe_pct") or 0.0
    if hi_c and (not hi_m or tensor >= t["compute"] or c >= m):
        return Verdict(COMPUTE, [
            f"compute throughput {c:.0f}% >= {t['compute']:.0f}% (tensor pipe {tensor:.0f}%)",
            f"memory throughput {m:.0f}%" + (" (also high, but the tensor pipe / SM is the busier side)"
                                             if hi_m else f" < {t['memory']:.0f}%"),
        ], f, t)
    if hi_m:
        units = {"DRAM": _f(metrics, "dram_throughput_pct"), "L2": _f(metrics, "l2_throughput_pct"),
                 "L1/shared": _f(metrics, "l1_throughput_pct")}
        busiest = max((k for k in units if units[k] is not None), key=lambda k: units[k] or 0.0, default=None)
        return Verdict(BANDWIDTH, [
            f"memory throughput {m:.0f}% >= {t['memory']:.0f}%"
            + (f"; busiest unit: {busiest} at {units[busiest]:.0f}%" if busiest else ""),
            f"compute throughput {c:.0f}% < {t['compute']:.0f}%" if not hi_c else
            f"compute throughput {c:.0f}% (high too, but memory is the busier side)",
        ], f, t)
    waves = _f(metrics, "waves_per_sm")
    base = f"compute {c:.0f}% < {t['compute']:.0f}% and memory {m:.0f}% < {t['memory']:.0f}% over {d or 0:.1f} us"
    fill = (f"grid fills {waves:.2f} waves of the SMs: too little parallelism to hide latency"
            if waves is not None and waves < 1 else None)
    stall = (f"{s * 100:.0f}% of warp stalls wait on memory (threshold {t['stall_mem'] * 100:.0f}%)"
             + (f"; top stall: {top_s}" if top_s else "")) if s is not None else "no warp-stall data"
    if waves is not None and waves >= 1 and s is not None and s < t["stall_mem"]:
        return Verdict(COMPUTE, [base, stall + ": instruction latency or dependency chains, not memory"], f, t)
    return Verdict(LATENCY, [base] + ([fill] if fill else []) + [stall], f, t)


class Classifier:
    """Thresholds from a body of profiles, and verdicts with them.

    ``Classifier.from_prior()`` loads the shipped H200 body; ``.update(profiles)``
    returns a new classifier whose body also holds those profiles (``Profile``
    objects, ``Profile.to_dict()`` dicts or canonical-metric dicts).
    """

    def __init__(self, body: Iterable[Mapping[str, object]] = (), meta: Mapping[str, object] | None = None) -> None:
        self.body: list[dict[str, object]] = [dict(b) for b in body]
        self.meta = dict(meta or {})
        self._thresholds: dict[str, float] | None = None

    @classmethod
    def from_prior(cls, path: str | Path | None = None) -> "Classifier":
        p = Path(path) if path else PRIOR_FILE
        try:
            data = json.loads(p.read_text())
        except (OSError, ValueError):
            return cls([], {"warning": f"no prior body at {p}: default thresholds"})
        return cls([e["metrics"] for e in data.get("profiles", [])], data.get("meta", {}))

    @staticmethod
    def _metrics_of(p: object) -> Mapping[str, object]:
        """The canonical metrics of a ``Profile``, of its dict form, or a metrics mapping itself."""
        if hasattr(p, "metrics") and not isinstance(p, Mapping):
            metrics = p.metrics
            if not isinstance(metrics, Mapping):
                raise TypeError(f"{type(p).__name__}.metrics is not a mapping")
            return metrics
        if not isinstance(p, Mapping):
            raise TypeError(f"not a profile or a metrics mapping: {type(p).__name__}")
        if "metrics" in p and isinstance(p["metrics"], Mapping):
            return {k: (v["value"] if isinstance(v, Mapping) else v) for k, v in p["metrics"].items()}
        return p

    def update(self, profiles: Iterable[object]) -> "Classifier":
        new = [dict(self._metrics_of(p)) for p in profiles]
        return Classifier(self.body + new, {**self.meta, "session_profiles": len(new)})

    @property
    def thresholds(self) -> dict[str, float]:
        if self._thresholds is None:
            self._thresholds = compute_thresholds(self.body)
        return self._thresholds

    def classify(self, profile_or_metrics: object) -> Verdict:
        return classify(self._metrics_of(profile_or_metrics), self.thresholds)


def filtered_metrics(profile_or_metrics: object, verdict: Verdict | str | None = None) -> dict[str, Metric]:
    """The short, class-specific metric set that goes into prompts and the UI (ordered)."""
    metrics = Classifier._metrics_of(profile_or_metrics)
    if verdict is None:
        verdict = getattr(profile_or_metrics, "verdict", None) or Classifier.from_prior().classify(metrics)
    cls = verdict.cls if isinstance(verdict, Verdict) else str(verdict)
    keys = list(CLASS_METRICS.get(cls, CLASS_METRICS[LATENCY]))
    if "kernels" not in keys and _f(metrics, "kernels") not in (None, 1.0):
        keys.insert(1, "kernels")
    stalls = sorted(((k, _f(metrics, k)) for k in metrics
                     if k.startswith("stall_") and k not in ("stall_top", "stall_memory_frac")),
                    key=lambda kv: -(kv[1] or 0.0))
    keys += [k for k, _ in stalls[: TOP_STALLS.get(cls, 0)]]
    out: dict[str, Metric] = {}
    for k in keys:
        v = metrics.get(k)
        if isinstance(v, Metric):
            out[k] = v
        elif isinstance(v, (int, float, str)):   # a plain number (or a stall name) without its unit
            out[k] = Metric(v, "")
    return out


def describe(filtered: Mapping[str, Metric]) -> list[tuple[str, str]]:
    """(label, formatted value) rows for display."""
    from .metrics import fmt_value

    return [(label_of(k), fmt_value(m)) for k, m in filtered.items()]
