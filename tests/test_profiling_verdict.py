"""Verdicts on the recorded H200 profiles, Otsu thresholds of the prior body, filtered metric sets."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from harness.profiling import Classifier, Profile, filtered_metrics
from harness.profiling.metrics import aggregate
from harness.profiling.otsu import otsu_threshold
from harness.profiling.parse import merge, parse_details, parse_raw, split_by_range
from harness.profiling.verdict import (BANDWIDTH, CLASS_METRICS, CLIP, COMPUTE, DEFAULTS, LATENCY, LAUNCH, PRIOR_FILE,
                                       Verdict, classify, compute_thresholds, features)
from harness.shapes import Shape

FIX = Path(__file__).parent / "fixtures" / "ncu"

EXPECTED = {
    "fx00_torch_64x64x64": LAUNCH,
    "fx01_cublas_128x128x128": LAUNCH,
    "fx02_torch_64x16384x16384": BANDWIDTH,
    "fx03_cublas_16384x64x4096": BANDWIDTH,
    "fx04_cublas_8192x8192x8192": COMPUTE,
    "fx05_splitk_256x256x16384": BANDWIDTH,
    "fx06_torch_128x128x16384": LAUNCH,
    "fx07_naive_64x64x16384": LATENCY,
    "fx08_naive_2048x2048x2048": BANDWIDTH,
    "fx09_tiled_4096x4096x4096": COMPUTE,
    "fx10_cublaslt_heuristic_4096x4096x4096": COMPUTE,
}


@pytest.fixture(scope="module")
def groups():
    manifest = json.loads((FIX / "manifest.json").read_text())["calls"]
    kernels = merge(parse_raw((FIX / "fixtures_raw.csv").read_text()),
                    parse_details((FIX / "fixtures_details.csv").read_text()))
    return split_by_range(kernels, list(manifest))


@pytest.fixture(scope="module")
def prior():
    return Classifier.from_prior()


def test_prior_body_is_the_recorded_h200_body(prior):
    data = json.loads(PRIOR_FILE.read_text())
    assert data["meta"]["gpu"]["name"] == "NVIDIA H200"
    assert len(prior.body) == len(data["profiles"]) >= 200
    labels = {p["label"] for p in data["profiles"]}
    assert {"cublas", "tiled", "naive"} <= labels


def test_prior_thresholds_are_otsu_of_the_body(prior):
    t = prior.thresholds
    comp = [features(m)["compute"] for m in prior.body]
    mem = [features(m)["memory"] for m in prior.body]
    assert t["compute"] == pytest.approx(otsu_threshold(comp))      # inside CLIP: not clipped
    assert t["memory"] == pytest.approx(otsu_threshold(mem))
    for k, (lo, hi) in CLIP.items():
        assert lo <= t[k] <= hi


@pytest.mark.parametrize("rng,cls", sorted(EXPECTED.items()))
def test_fixture_verdicts(groups, prior, rng, cls):
    v = prior.classify(aggregate(groups[rng]))
    assert v.cls == cls, v.reasons
    assert v.reasons and all(isinstance(r, str) for r in v.reasons)


def test_every_class_is_covered_by_the_fixtures():
    assert set(EXPECTED.values()) == {COMPUTE, BANDWIDTH, LATENCY, LAUNCH}


def test_rules_on_hand_made_metrics():
    t = {"compute": 50.0, "memory": 50.0, "launch_us": 10.0, "stall_mem": 0.5}
    assert classify({"sm_throughput_pct": 5, "memory_throughput_pct": 5, "duration_us": 3}, t).cls == LAUNCH
    assert classify({"sm_throughput_pct": 90, "memory_throughput_pct": 20, "duration_us": 300}, t).cls == COMPUTE
    assert classify({"sm_throughput_pct": 20, "dram_throughput_pct": 90, "duration_us": 300}, t).cls == BANDWIDTH
    # both high: the tensor pipe decides for compute, otherwise the busier side
    both = {"sm_throughput_pct": 80, "memory_throughput_pct": 95, "duration_us": 300}
    assert classify({**both, "tensor_pipe_pct": 90}, t).cls == COMPUTE
    assert classify(both, t).cls == BANDWIDTH
    low = {"sm_throughput_pct": 10, "memory_throughput_pct": 10, "duration_us": 500}
    assert classify({**low, "waves_per_sm": 0.2, "stall_memory_frac": 0.2}, t).cls == LATENCY
    assert classify({**low, "waves_per_sm": 4, "stall_memory_frac": 0.9}, t).cls == LATENCY
    v = classify({**low, "waves_per_sm": 4, "stall_memory_frac": 0.2, "stall_top": "wait"}, t)
    assert v.cls == COMPUTE and "instruction latency" in v.reasons[-1]
    assert classify({"duration_us": 2.0}, t).cls == LAUNCH      # no sections at all


def test_thresholds_default_and_clip():
    assert Classifier([]).thresholds == DEFAULTS
    # a one-sided body (only very busy calls) would put Otsu at 97.5%; the clip keeps it sane
    body = [{"sm_throughput_pct": x, "memory_throughput_pct": x, "duration_us": 1000} for x in (95, 96, 99, 100)]
    t = compute_thresholds(body)
    assert t["compute"] == CLIP["compute"][1] and t["memory"] == CLIP["memory"][1]


def test_update_refines_thresholds(prior):
    # a session of profiles whose compute throughput clusters at 10% and 30% pulls the split down
    session = [{"sm_throughput_pct": 10.0 + (i % 2) * 20, "memory_throughput_pct": 5.0, "duration_us": 100.0}
               for i in range(2000)]
    before = len(prior.body)
    new = prior.update(session)
    assert len(new.body) == before + 2000
    assert new.meta["session_profiles"] == 2000
    assert new.thresholds["compute"] < prior.thresholds["compute"]
    assert len(prior.body) == before                             # the prior is left untouched
    assert prior.thresholds["compute"] == pytest.approx(Classifier.from_prior().thresholds["compute"])


def test_update_accepts_profiles_and_dicts(groups, prior):
    p = Profile.from_kernels("cublas", Shape(8192, 8192, 8192), "f32", groups["fx04_cublas_8192x8192x8192"], prior)
    n = len(prior.update([p, p.to_dict(), dict(p.metrics)]).body)
    assert n == len(prior.body) + 3


def test_filtered_metrics_are_short_and_class_specific(groups, prior):
    for rng, cls in EXPECTED.items():
        metrics = aggregate(groups[rng])
        v = prior.classify(metrics)
        f = filtered_metrics(metrics, v)
        allowed = set(CLASS_METRICS[cls]) | {"kernels"} | {k for k in metrics if k.startswith("stall_")}
        assert set(f) <= allowed, rng
        assert "duration_us" in f
        assert len(f) < len(metrics) / 2
    multi = aggregate(groups["fx05_splitk_256x256x16384"])
    assert "kernels" in filtered_metrics(multi, prior.classify(multi))
    comp = aggregate(groups["fx04_cublas_8192x8192x8192"])
    assert "tensor_pipe_pct" in filtered_metrics(comp, COMPUTE)
    assert "dram_throughput_pct" in filtered_metrics(comp, BANDWIDTH)


def test_profile_round_trip_and_event_payload(groups, prior):
    p = Profile.from_kernels("splitk", Shape(256, 256, 16384), "f32", groups["fx05_splitk_256x256x16384"], prior)
    d = json.loads(json.dumps(p.to_dict()))
    back = Profile.from_dict(d)
    assert back.verdict.cls == p.verdict.cls and len(back.kernels) == 2
    assert back.metrics["duration_us"].value == pytest.approx(p.metrics["duration_us"].value)
    assert back.kernels[0].sections.keys() == p.kernels[0].sections.keys()
    ev = p.event_payload()
    assert ev["verdict"] == p.verdict.cls
    assert all(set(v) == {"value", "unit"} for v in ev["metrics"].values())
    assert Verdict.from_dict(p.verdict.to_dict()).reasons == p.verdict.reasons
    assert all(math.isfinite(x) for x in p.verdict.thresholds.values())
