"""End-to-end profiling on a real GPU with the real ncu (``pytest -m gpu``)."""

from __future__ import annotations

import json
import time

import pytest

from harness.profiling import CLASSES, NoKernelProfiled, Profile, TelemetrySampler, profile_kernel
from harness.paths import PACKAGE_DIR

pytestmark = pytest.mark.gpu

KDIR = PACKAGE_DIR / "profiling" / "kernels"


@pytest.fixture(scope="module", autouse=True)
def _need_ncu():
    from harness.profiling.ncu import find_ncu

    try:
        find_ncu()
    except Exception as e:  # pragma: no cover - only on a GPU box without ncu
        pytest.skip(str(e))


def test_profile_tiled_kernel_from_source():
    p = profile_kernel(str(KDIR / "tiled.cu"), "512x512x512", "f32")
    assert len(p.kernels) == 1
    assert "l2p_tiled_kernel" in p.kernels[0].name
    assert p.metrics["duration_us"].value > 0
    assert p.metrics["duration_us"].unit == "us"
    assert p.verdict.cls in CLASSES
    assert "duration_us" in p.filtered
    back = Profile.from_dict(json.loads(json.dumps(p.to_dict())))
    assert back.verdict.cls == p.verdict.cls


def test_profile_multi_kernel_call_reports_both_kernels():
    p = profile_kernel(str(KDIR / "splitk.cu"), "256x256x8192", "f32")
    names = [k.name for k in p.kernels]
    assert len(p.kernels) == 2, names
    assert any("partial" in n for n in names) and any("reduce" in n for n in names)
    total = sum(k.num("gpu__time_duration.sum") for k in p.kernels) / 1000.0
    assert p.metrics["duration_us"].value == pytest.approx(total)
    assert p.metrics["kernels"].value == 2


def test_profile_torch_baseline_tiny_shape():
    p = profile_kernel(None, "64x64x64", baseline="torch")
    assert p.kernels and p.metrics["duration_us"].value < 1000


def test_profile_cublas_baseline_through_the_shim():
    """The bench's cuBLAS shim (trusted, linked to libcublas), f32 and f16 entry points."""
    for acc in ("f32", "f16"):
        p = profile_kernel(None, "1024x1024x1024", acc, baseline="cublas")
        assert p.kernels and p.metrics["duration_us"].value > 0, acc


@pytest.mark.parametrize("name", ["cublaslt_heuristic", "cublaslt_autotune"])
def test_profile_cublaslt_baselines_through_the_shims_c_entry_points(name):
    for acc in ("f32", "f16"):
        p = profile_kernel(None, "4096x64x128", acc, baseline=name)
        assert p.kernels and p.metrics["duration_us"].value > 0, (name, acc)


def test_kernel_that_refuses_the_shape_is_no_kernel_error():
    src = ('extern "C" int l2_hgemm(const void* A, const void* B, void* C, int M, int N, int K, void* s)'
           " { return 1; }\n")
    with pytest.raises(NoKernelProfiled, match="l2_hgemm returned 1"):
        profile_kernel(src, "64x64x64", label="refuser")


def test_telemetry_reads_the_gpu():
    with TelemetrySampler(hz=10) as t:
        assert t.available, t.reason
        time.sleep(0.6)
        s = t.latest()
    assert s is not None and s["sm_clock_mhz"] and s["sm_clock_mhz"] > 0
    assert s["power_limit_w"] and s["power_limit_w"] > 0
    assert len(t.samples()) >= 3


def test_profile_source_is_the_agents_profile_hook():
    from harness.profiling import profile_source

    d = profile_source((KDIR / "naive.cu").read_text(), "128x128x1024", "f32")
    assert d["verdict"]["class"] in CLASSES
    assert d["event"]["verdict"] == d["verdict"]["class"]
    assert d["kernel_names"] and "kernels" not in d
