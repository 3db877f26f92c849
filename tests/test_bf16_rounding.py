"""The bf16 rounding check (harness.checks.rounding_bias / rounding_verdict) on the CPU, with
numpy standing in for cupy: a C truncated from its f32 sums is told from one rounded to nearest
even by the mean of its error toward zero, measured against cuBLAS's own (here: the rounded C)."""

from __future__ import annotations

import numpy as np
import pytest

from harness import checks as ck


def _sums(m: int, n: int, k: int, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    return a.astype(np.float64) @ b.astype(np.float64)


def _rounded(ref: np.ndarray) -> np.ndarray:
    return ck.from_float32(np, ref.astype(np.float32), "bf16")


def _truncated(ref: np.ndarray) -> np.ndarray:
    """The top 16 bits of each f32 sum: bf16 rounded toward zero (what testbad_bf16trunc does)."""
    return (ref.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


def test_truncation_points_toward_zero_and_rounding_does_not():
    ref = _sums(64, 64, 256)
    rne = ck.rounding_bias(np, _rounded(ref), ref, "bf16")
    trunc = ck.rounding_bias(np, _truncated(ref), ref, "bf16")
    assert rne is not None and trunc is not None
    assert abs(rne) < 0.05
    assert trunc < -0.5


def test_the_verdict_rejects_truncation_against_cublas_and_passes_rounding():
    ref = _sums(64, 128, 512, seed=7)
    cublas = ck.rounding_bias(np, _rounded(ref), ref, "bf16")
    ok, why = ck.rounding_verdict(ck.rounding_bias(np, _truncated(ref), ref, "bf16"), cublas)
    assert not ok and why.startswith("C is not rounded to nearest") and "truncated" in why
    assert ck.rounding_verdict(ck.rounding_bias(np, _rounded(ref), ref, "bf16"), cublas) == (True, "")


def test_a_common_bias_cancels_against_cublas():
    """What both sides share (an accumulation that leans toward zero on every output) is not held
    against the kernel: only the difference from cuBLAS counts."""
    ok, _ = ck.rounding_verdict(-0.3, -0.25)
    assert ok
    assert not ck.rounding_verdict(-0.3 - ck.ROUNDING_BIAS_LIMIT - 0.01, -0.0)[0]


@pytest.mark.parametrize("m,n", [(16, 16), (1, 1000)])
def test_too_few_outputs_are_not_judged(m, n):
    ref = _sums(m, n, 64)
    assert ck.rounding_bias(np, _truncated(ref), ref, "bf16") is None
    assert ck.rounding_verdict(None, 0.0) == (True, "")


def test_a_non_finite_output_is_left_to_the_accuracy_bound():
    ref = _sums(64, 64, 64)
    c = _rounded(ref)
    c[0, 0] = 0x7FC0   # a bf16 NaN
    assert ck.rounding_bias(np, c, ref, "bf16") is None
