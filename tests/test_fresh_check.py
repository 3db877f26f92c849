"""The `fresh` check's pieces that need no GPU: its verdict, its place in the order, its CUDA."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from harness import checks as ck
from harness.build import build
from harness.testkernels import source as kernel_source


def test_fresh_is_reported_after_graph_replay():
    assert ck.CHECK_ORDER[-2:] == ("graph_replay", "fresh")
    rec = ck.CheckRecord()
    rec.put("graph_replay", True)
    rec.put("fresh", False, "stale")
    assert rec.failed() == "fresh" and rec.summary()["detail"] == "stale"


@pytest.mark.parametrize("timed, fresh, ok", [
    (0.002, 0.0025, True),       # a small kernel that loses its PDL overlap behind the perturbing kernel
    (0.002, 0.0055, True),       # 1.35 x 2 us + 3 us = 5.7 us
    (0.002, 0.006, False),
    (1.0, 1.2, True),            # a big kernel: within 1.35x
    (1.0, 1.4, False),
    (0.010, 0.050, False),       # hash + copy timed, a full multiply when the inputs are new
])
def test_verdict_allows_launch_effects_and_rejects_cache_hits(timed, fresh, ok):
    got, detail = ck.fresh_verdict(timed, fresh)
    assert got is ok
    assert (detail == "") is ok
    if not ok:
        assert "memoized" in detail and f"{fresh * 1e3:.1f} us" in detail


def test_unusable_timings_fail_with_a_reason():
    ok, detail = ck.fresh_verdict(float("nan"), 0.001)
    assert not ok and "unusable" in detail
    assert not ck.fresh_verdict(0.0, 0.001)[0]


def test_the_sparse_change_is_large_enough_to_see_at_the_largest_grid_shape():
    """A stale C misses ~ VALUE * sqrt(SPARSE) * sqrt(N) against ||C|| ~ sqrt(M N K) (unit-normal inputs):
    at 16384^3 that must still be well over the loosest bound the harness sets (f16: a few 1e-3)."""
    miss = ck.FRESH_VALUE * ck.FRESH_SPARSE ** 0.5 / 16384
    assert miss > 5 * 5e-3


@pytest.mark.compile
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc")
def test_perturb_kernel_compiles(tmp_path):
    src = tmp_path / "perturb.cu"
    src.write_text(ck.PERTURB_SOURCE)
    r = subprocess.run(["nvcc", "-arch=sm_90a", "-c", str(src), "-o", str(tmp_path / "p.o")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_inputs_is_reported_right_after_guards():
    assert ck.CHECK_ORDER.index("inputs") == ck.CHECK_ORDER.index("guards") + 1


@pytest.mark.compile
@pytest.mark.parametrize("samples", ["0", "64"])
def test_memo_adversary_builds_in_both_kinds(samples):
    src = kernel_source("testbad_memo").replace("#define MEMO_SAMPLES 0",
                                                                  f"#define MEMO_SAMPLES {samples}")
    assert f"#define MEMO_SAMPLES {samples}" in src
    res = build(src, arch="sm_90a")
    assert res.ok, res.errors


@pytest.mark.compile
def test_delta_adversary_builds():
    """It builds (no source rule can tell a kept product from a workspace: part (3) of the run-time
    `fresh` check has to catch it, tests/test_checks_gpu.py and tests/test_timing_gpu.py)."""
    res = build(kernel_source("testbad_delta"), arch="sm_90a")
    assert res.ok, res.errors


@pytest.mark.parametrize("one, dense, ok", [
    (0.010, 0.0125, True),      # a dense change costs an honest kernel some L2 traffic: allowed
    (0.002, 0.0049, True),      # a small call: the slack
    (0.010, 0.030, False),      # a diff and a row update against a whole GEMM
    (0.002, 0.0060, False),
])
def test_dense_verdict_allows_cache_effects_and_rejects_updates(one, dense, ok):
    """The same bound as part (2)'s verdict (the test above), a reason of its own."""
    got, det = ck.dense_verdict(one, dense)
    assert got is ck.fresh_verdict(one, dense)[0] is ok and (det == "") is ok
    assert ok or ("update their last product" in det and f"{dense * 1e3:.1f} us" in det)


def test_dense_verdict_refuses_unusable_timings():
    for one, dense in ((0.0, 0.01), (float("nan"), 0.01), (0.01, float("inf"))):
        ok, det = ck.dense_verdict(one, dense)
        assert not ok and "unusable" in det


@pytest.mark.compile
def test_hog_adversary_passes_the_source_policy_and_builds():
    """Its launch on the legacy default stream names nothing a rule could refuse: the run-time
    probe of `runs` has to catch it (tests/test_checks_gpu.py, tests/test_shape_timing_sim.py)."""
    res = build(kernel_source("testbad_hog"), arch="sm_90a")
    assert res.ok, res.errors


@pytest.mark.compile
def test_f16_when_timed_adversary_builds():
    """It names nothing a rule could refuse (a look at C and hfma): the timed calls' verification
    has to catch it (tests/test_timing_gpu.py, tests/test_checks_gpu.py)."""
    res = build(kernel_source("testbad_f16timed"), arch="sm_90a")
    assert res.ok, res.errors


@pytest.mark.compile
def test_marker_adversary_builds():
    res = build(kernel_source("testbad_marker"), arch="sm_90a")
    assert res.ok, res.errors


@pytest.mark.compile
@pytest.mark.parametrize("gate, calls", [("20000", "0"), ("3000", "0"), ("20000", "64")])
def test_timegate_adversary_builds(gate, calls):
    """It builds (the source policy misses its split timer name and its call count: the run-time
    check has to catch it, tests/test_checks_gpu.py)."""
    src = kernel_source("testbad_timegate").replace("#define GATE_NS 20000", f"#define GATE_NS {gate}")
    src = src.replace("#define GATE_CALLS 0 ", f"#define GATE_CALLS {calls} ")
    assert f"#define GATE_NS {gate}" in src and f"#define GATE_CALLS {calls} " in src
    res = build(src, arch="sm_90a")
    assert res.ok, res.errors


def test_verify_limit_and_verdict():
    assert ck.verify_limit(1e-4) == ck.VERIFY_ROW_FLOOR["f32"] == ck.verify_limit(1e-4, "f32")
    assert ck.verify_limit(1e-4, "f16") == ck.VERIFY_ROW_FLOOR["f16"]
    assert ck.verify_limit(4.1e-4) == pytest.approx(ck.VERIFY_ROW_FACTOR * 4.1e-4)   # the f32 bound on the H200
    assert ck.verify_limit(1e-2, "f16") == pytest.approx(ck.VERIFY_ROW_FACTOR * 1e-2)
    assert ck.verify_verdict([1e-4] * 12, 12, 0.02) == (True, "")
    ok, det = ck.verify_verdict([1e-4] * 5, 12, 0.02)
    assert not ok and "only 5 of 12" in det
    ok, det = ck.verify_verdict([1e-4, 0.3, 1e-4, float("nan")], 4, 0.02)
    assert not ok and "2 of 4" in det and "call 1" in det and "skips work" in det


def _freivalds_row_errors(a, b, c, x):
    """What l2_verify_rows computes for a row r, in numpy, for every r: |C[r] x - A[r] (B x)| / |C[r]|."""
    import numpy as np

    z = a.astype(np.float32) @ (b.astype(np.float32) @ x)
    cf = c.astype(np.float32)
    return np.abs(cf @ x - z) / np.maximum(np.linalg.norm(cf, axis=1), 1e-20)


@pytest.mark.slow
@pytest.mark.parametrize("m, n, k", [(64, 64, 16384), (16384, 64, 64), (64, 4096, 4096), (256, 256, 1024)])
def test_verification_separates_an_honest_c_from_one_that_skipped_calls(m, n, k):
    """An honest C (fp32 accumulation, rounded to fp16) stays far under the limit on every row; a
    C left from before a change of A (a value the perturbing kernel writes) is far over it on the
    changed row, the row the verification always includes, in nearly every step."""
    import numpy as np

    rng = np.random.default_rng(m * 7 + n * 3 + k)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    x = rng.choice(np.array([-1.0, 1.0], dtype=np.float32), n)
    limit = ck.verify_limit(4e-4)                       # an f32 bound of the harness's magnitude
    caught = 0
    for step in range(12):
        honest = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16)
        assert _freivalds_row_errors(a, b, honest, x).max() < limit / 3
        i, j = rng.integers(m), rng.integers(k)         # the call after this change is skipped:
        a[i, j] = ck.PERTURB_VALUES[step % len(ck.PERTURB_VALUES)] * (1 if step % 2 else -1)
        caught += _freivalds_row_errors(a, b, honest, x)[i] > limit
    assert caught >= 10                                 # (a |B[j] x| near 0 can hide one step)


@pytest.mark.parametrize("name", ["VERIFY_SOURCE", "PERTURB_SOURCE", "SEPARATE_SOURCE", "FLIP_SOURCE"])
def test_runtime_kernels_compile_with_nvrtc_as_cupy_does(name):
    """cupy builds these with NVRTC at run time (no nvcc, no extra include path): compile them the same way."""
    nvrtc = pytest.importorskip("cuda.bindings.nvrtc")
    src = getattr(ck, name).encode()
    err, prog = nvrtc.nvrtcCreateProgram(src, b"k.cu", 0, [], [])
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS
    (res,) = nvrtc.nvrtcCompileProgram(prog, 1, [b"--gpu-architecture=compute_90"])
    _, size = nvrtc.nvrtcGetProgramLogSize(prog)
    log = b" " * size
    nvrtc.nvrtcGetProgramLog(prog, log)
    assert res == nvrtc.nvrtcResult.NVRTC_SUCCESS, log.decode(errors="replace")


def test_an_fp16_accumulated_c_fails_the_f32_verification_and_passes_the_f16_one():
    """A kernel can tell a timed call from a checked one (C is poisoned before every checked call,
    not before a timed one) and accumulate in fp16 only on the timed calls: its rows are then off
    by ~5e-3 at K = 2048, over the f32 limit (8x the bound, ~3.3e-3) on most rows, while an
    honest C stays far under it. The f16 limit (for kernels evaluated with fp16 accumulation)
    admits them."""
    import numpy as np

    rng = np.random.default_rng(7)
    m, n, k = 64, 64, 2048
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    x = rng.choice(np.array([-1.0, 1.0], dtype=np.float32), n)
    acc = np.zeros((m, n), np.float16)
    for j in range(k):                                   # one fp16 rounding per multiply-add
        acc = (acc.astype(np.float32) + a[:, j:j + 1].astype(np.float32) * b[j:j + 1].astype(np.float32)
               ).astype(np.float16)
    honest = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16)
    f32_limit, f16_limit = ck.verify_limit(4.1e-4), ck.verify_limit(9.4e-3, "f16")
    rows = _freivalds_row_errors(a, b, acc, x)
    over = float((rows > f32_limit).mean())
    assert over >= 0.25
    # every timed call has SEPARATE_ROWS rows verified, and there are at least 8 (R >= 1 calls per
    # replay, a warm-up replay and 7 rounds): none of them over the limit is hopeless
    assert (1 - over) ** (ck.SEPARATE_ROWS * 8) < 1e-9
    assert rows.max() < f16_limit
    assert _freivalds_row_errors(a, b, honest, x).max() < f32_limit / 3
