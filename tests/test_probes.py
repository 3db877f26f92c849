"""tools/probes: the latency probe builds with real nvcc and exports what its driver calls."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.compile
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_latency_probe_builds_for_sm90a_and_exports_its_entry_points(tmp_path):
    so = tmp_path / "latency_floor.so"
    p = subprocess.run(["nvcc", "-O3", "-shared", "-Xcompiler", "-fPIC", "-gencode=arch=compute_90a,code=sm_90a",
                        str(ROOT / "tools" / "probes" / "latency_floor.cu"), "-o", str(so)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-2000:]
    syms = subprocess.run(["nm", "-D", "--defined-only", str(so)], capture_output=True, text=True).stdout
    assert "probe_launch" in syms and "tiny64_launch" in syms
    driver = (ROOT / "tools" / "probes" / "latency_floor.py").read_text()
    assert "lib.probe_launch" in driver and "lib.tiny64_launch" in driver


@pytest.mark.compile
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_launch_cost_probe_builds_and_says_in_one_line_when_there_is_no_gpu(tmp_path, capsys):
    """The per-call launch-cost probe: its driver builds it with real nvcc; on a machine without a
    GPU the probe's first CUDA call fails and the driver says so in one line and writes nothing."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("launch_cost", ROOT / "tools" / "probes" / "launch_cost.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    from harness.gpuinfo import gpu_present

    if gpu_present():
        pytest.skip("a GPU is present: this test is about a machine without one")
    out = tmp_path / "lc.json"
    rc = mod.main(["--out", str(out), "--reps", "2", "--rounds", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and not out.exists()
    assert len(err) == 1 and err[0].startswith("launch_cost: ") and "nvcc build failed" not in err[0]


def test_handover_probe_splits_a_trace_into_kernel_time_and_the_gaps_around_it():
    """tools/probes/handover.py: from CUPTI kernel records (chrome-trace events, microseconds), the
    GEMM's duration and the gaps from the separator's end to its start and from its end to the next
    separator; events of other categories and the separator itself are not counted."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("handover", ROOT / "tools" / "probes" / "handover.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sep, gemm = "void at::native::vectorized_elementwise_kernel<neg>", "cutlass::device_kernel<Gemm>"
    events, t = [{"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": 0.0, "dur": 50.0}], 10.0
    for gap_before, dur, gap_after in ((1.0, 6.0, 2.0), (1.5, 6.5, 2.5), (1.0, 6.0, 2.0)):
        events.append({"ph": "X", "cat": "kernel", "name": sep, "ts": t, "dur": 1.0})
        t += 1.0 + gap_before
        events.append({"ph": "X", "cat": "kernel", "name": gemm, "ts": t, "dur": dur})
        t += dur + gap_after
    events.append({"ph": "X", "cat": "kernel", "name": sep, "ts": t, "dur": 1.0})
    kern = mod._kernels({"traceEvents": list(reversed(events))})
    assert [e["name"] for e in kern][:2] == [sep, gemm]
    r = mod._split(kern, sep)
    assert r["samples"] == 3 and r["kernel_us"] == 6.0 and r["gap_before_us"] == 1.0 and r["gap_after_us"] == 2.0
    assert r["step_us"] == 10.0 and r["kernels"] == [gemm]


def test_handover_probe_says_in_one_line_what_it_needs(tmp_path, capsys):
    """Without PyTorch or without a GPU the probe says so in one line and writes nothing."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("handover", ROOT / "tools" / "probes" / "handover.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "h.json"
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        pytest.skip("a GPU is present: this test is about a machine without one")
    assert mod.main(["--shape", "64x64x64", "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("handover: ") and not out.exists()
