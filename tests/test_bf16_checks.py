"""bf16 in the checks and baselines, on the CPU: the uint16 storage codec (numpy stands for cupy:
the codec is plain array operations), the accuracy bound and row floors scaled by bf16's unit
roundoff, the shim's bf16 entry points, and the two bad bf16 test kernels built with real nvcc."""

from __future__ import annotations

import numpy as np
import pytest

from harness import baselines as bl
from harness import checks as ck
from harness.build import build, source_dtype
from harness.errors import HarnessError
from harness.source_policy import violations
from harness.testkernels import source as kernel_source

BAD_BF16 = ("testbad_bf16trunc", "testbad_bf16acc")


def test_bf16_round_to_nearest_even_from_float32_bits():
    one_bits = 0x3F80
    vals = np.array([1.0, 1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, 1.0 + 2.0 ** -8 + 2.0 ** -20, -2.5, 0.0],
                    dtype=np.float32)
    got = ck.from_float32(np, vals, "bf16")
    assert got.dtype == np.uint16
    # a tie rounds to the even neighbour (down for 1 + 2^-8, up for 1 + 3 * 2^-8); above a tie rounds up
    assert got.tolist() == [one_bits, one_bits, one_bits + 2, one_bits + 1, 0xC020, 0]
    back = ck.to_float32(np, got, "bf16")
    assert back.dtype == np.float32
    assert back.tolist() == [1.0, 1.0, 1.0 + 2.0 ** -6, 1.0 + 2.0 ** -7, -2.5, 0.0]


def test_bf16_nan_poisons_and_counts_as_unwritten():
    c = np.zeros((2, 3), dtype=ck.storage_dtype(np, "bf16"))
    c[0, 1] = ck.nan_value(np, "bf16")
    assert ck.count_unwritten(np, c, "bf16") == 1
    assert ck.from_float32(np, np.array([np.nan], dtype=np.float32), "bf16")[0] == ck.BF16_NAN_BITS
    # the bits of a NaN are not counted as written when read as fp16 either way round
    assert ck.count_unwritten(np, np.array([np.nan, 1.0], dtype=np.float16)) == 1


def test_reference_and_rel_err_read_bf16_bits():
    a = ck.from_float32(np, np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32), "bf16")
    b = ck.from_float32(np, np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32), "bf16")
    ref = ck.reference(np, a, b, "bf16")
    assert ref.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    norm = ck.ref_norm(np, ref)
    assert ck.rel_err(np, a, ref, norm, "bf16") == 0.0
    off = a.copy()
    off[0, 0] += 1                           # one ulp up at 1.0 (2^-7)
    assert ck.rel_err(np, off, ref, norm, "bf16") == pytest.approx(2.0 ** -7 / norm)


def test_bound_and_row_floor_scale_with_unit_roundoff():
    assert ck.precision_scale("fp16") == 1.0 and ck.precision_scale("bf16") == 8.0
    assert ck.bound_for("f32", 0.0, None, "bf16") == pytest.approx(8 * ck.F32_FLOOR)
    assert ck.bound_for("f32", 0.0, None) == ck.F32_FLOOR
    assert ck.bound_for("f32", 3e-3, None, "bf16") == pytest.approx(6e-3)  # twice cuBLAS's own bf16 error
    assert ck.verify_limit(0.0, "f32", "bf16") == pytest.approx(8 * ck.VERIFY_ROW_FLOOR["f32"])
    assert ck.verify_limit(0.0, "f32") == ck.VERIFY_ROW_FLOOR["f32"]
    with pytest.raises(ValueError, match="unknown dtype"):
        ck.precision_scale("fp8")


def test_exact_inputs_keep_bf16_sums_exact():
    k = 1000
    a = np.zeros((4, k), dtype=np.uint16)
    b = np.zeros((k, 5), dtype=np.uint16)

    class State:
        """numpy's RandomState with cupy's ``dtype=`` argument of random_sample."""

        def __init__(self, seed: int) -> None:
            self.rs = np.random.RandomState(seed)

        def random_sample(self, shape: tuple[int, ...], dtype: type = np.float64) -> np.ndarray:
            return self.rs.random_sample(shape).astype(dtype)

        def permutation(self, n: int) -> np.ndarray:
            return self.rs.permutation(n)

    class NumpyWithRandom:
        """numpy with cupy's ``random.RandomState`` spelling."""

        random = type("random", (), {"RandomState": State})

        def __getattr__(self, name: str) -> object:
            return getattr(np, name)

    ck.fill_binary(NumpyWithRandom(), 7, a, b, "bf16")
    fa = ck.to_float32(np, a, "bf16")
    assert set(np.unique(fa).tolist()) <= {0.0, 1.0}
    assert int((fa != 0).any(axis=0).sum()) <= ck.EXACT_TERMS["bf16"] == 256
    ref = ck.reference(np, a, b, "bf16")
    assert np.array_equal(ck.to_float32(np, ck.from_float32(np, ref.astype(np.float32), "bf16"), "bf16"), ref)


def test_perturb_values_are_exact_bf16_bits():
    bits = ck.perturb_bits("bf16")
    assert ck.to_float32(np, bits, "bf16").tolist() == [16.0, -16.0, 24.0, -24.0, 32.0, -32.0]
    assert ck.perturb_bits("fp16").view(np.float16).tolist() == [16.0, -16.0, 24.0, -24.0, 32.0, -32.0]
    assert ck.kernel_name("l2_verify_rows", "bf16") == "l2_verify_rows_bf16"
    assert ck.kernel_name("l2_verify_rows") == "l2_verify_rows"


def test_shim_entry_points_by_dtype():
    assert bl.shim_entry("l2_hgemm", "f32", "bf16") == "l2_hgemm_bf16"
    assert bl.shim_entry("l2_hgemm_lt_auto", "f32", "bf16") == "l2_hgemm_lt_auto_bf16"
    assert bl.shim_entry("l2_hgemm_tn", "f16") == "l2_hgemm_tn_f16"
    assert bl.shim_entry("l2_hgemm", "f32") == "l2_hgemm"
    assert [bl.lt_mode("f32"), bl.lt_mode("f16"), bl.lt_mode("f32", "bf16")] == [0, 1, 2]
    with pytest.raises(HarnessError, match="bf16 accumulates in f32 only"):
        bl.shim_entry("l2_hgemm", "f16", "bf16")
    with pytest.raises(HarnessError, match="unknown dtype"):
        bl.shim_entry("l2_hgemm", "f32", "fp8")


@pytest.mark.parametrize("name", BAD_BF16)
def test_bad_bf16_kernels_pass_the_source_policy(name):
    src = kernel_source(name)
    assert source_dtype(src) == "bf16"
    assert violations(src) == []


@pytest.mark.compile
@pytest.mark.parametrize("name", BAD_BF16)
def test_bad_bf16_kernels_build_as_bf16(name, tmp_path, monkeypatch):
    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path / "cache"))
    res = build(kernel_source(name), arch="sm_90a", dtype="bf16")
    assert res.ok, res.errors
