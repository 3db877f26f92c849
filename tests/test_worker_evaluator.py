"""Evaluator without a GPU (CI): compile errors come back as results, a missing GPU is one line."""

from __future__ import annotations

import pytest

from harness.errors import ToolMissing
from harness.evaluate import Evaluation, Evaluator
from harness.shapes import Shape
from harness.testkernels import source as kernel_source


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.compile
def test_compile_error_is_a_result_not_an_exception():
    with Evaluator(arch="sm_90a", baselines=("cublas",)) as ev:
        bad = 'extern "C" int l2_hgemm(const void* A, const void* B, void* C, int M, int N, int K, void* s) { return x; }'
        e = ev.evaluate(bad, Shape(64, 64, 64))
        assert e.status == "compile_error"
        assert e.build is not None and not e.build.ok and e.build.errors
        assert "compile error" in e.message
        assert ev.worker.starts == 0            # nothing reached the GPU worker
        back = Evaluation.from_dict(e.to_dict())
        assert back.status == "compile_error" and back.build.errors[0].message == e.build.errors[0].message


@pytest.mark.compile
def test_no_gpu_is_one_line_tool_missing():
    try:
        import cupy  # noqa: F401
        pytest.skip("cupy installed: this checks the machine without a GPU stack")
    except ImportError:
        pass
    with Evaluator(arch="sm_90a", baselines=("cublas",), timeout_s=60) as ev:
        with pytest.raises(ToolMissing) as ei:
            ev.evaluate(kernel_source("testgood_simple"), Shape(64, 64, 64))
        assert str(ei.value).startswith("no NVIDIA GPU found:") and "\n" not in str(ei.value)


def test_evaluation_round_trip_and_speedup():
    e = Evaluation("ok", None, {"ok": True, "failed": None}, {"mine": 1.0, "cublas": 2.0}, {"mine": 0.01}, 0.5,
                   "ok", {"label": "mine"})
    assert e.speedup("cublas") == 2.0
    assert e.speedup("torch") is None
    back = Evaluation.from_dict(e.to_dict())
    assert back.times_ms == e.times_ms and back.speedup("cublas") == 2.0 and back.roofline_ms == 0.5


def test_bad_mode_is_one_line():
    from harness.errors import HarnessError

    with pytest.raises(HarnessError, match="bad mode"):
        Evaluator(mode="online")
