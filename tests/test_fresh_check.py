"""The `fresh` check's pieces that need no GPU: its verdict, its place in the order, its CUDA."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from harness import checks as ck
from harness.build import build
from harness.paths import KERNELS_DIR


def test_fresh_is_reported_after_graph_replay():
    assert ck.CHECK_ORDER[-2:] == ("graph_replay", "fresh")
    rec = ck.CheckRecord()
    rec.put("graph_replay", True)
    rec.put("fresh", False, "stale")
    assert rec.failed() == "fresh" and rec.summary()["detail"] == "stale"


@pytest.mark.parametrize("timed, fresh, ok", [
    (0.002, 0.0025, True),       # a small kernel that loses its PDL overlap behind the perturbing kernel
    (0.002, 0.006, True),        # 1.5 x 2 us + 4 us = 7 us
    (0.002, 0.0075, False),
    (1.0, 1.2, True),            # a big kernel: within 1.5x
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


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc")
def test_perturb_kernel_compiles(tmp_path):
    src = tmp_path / "perturb.cu"
    src.write_text(ck.PERTURB_SOURCE)
    r = subprocess.run(["nvcc", "-arch=sm_90a", "-c", str(src), "-o", str(tmp_path / "p.o")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_inputs_is_reported_right_after_guards():
    assert ck.CHECK_ORDER.index("inputs") == ck.CHECK_ORDER.index("guards") + 1


@pytest.mark.parametrize("samples", ["0", "64"])
def test_memo_adversary_builds_in_both_kinds(samples):
    src = (KERNELS_DIR / "testbad_memo.cu").read_text().replace("#define MEMO_SAMPLES 0",
                                                                  f"#define MEMO_SAMPLES {samples}")
    assert f"#define MEMO_SAMPLES {samples}" in src
    res = build(src, arch="sm_90a")
    assert res.ok, res.errors


def test_marker_adversary_builds():
    res = build((KERNELS_DIR / "testbad_marker.cu").read_text(), arch="sm_90a")
    assert res.ok, res.errors


def test_perturb_kernel_compiles_with_nvrtc_as_cupy_does():
    """cupy builds it with NVRTC at run time (no nvcc, no extra include path): compile it the same way."""
    nvrtc = pytest.importorskip("cuda.bindings.nvrtc")
    err, prog = nvrtc.nvrtcCreateProgram(ck.PERTURB_SOURCE.encode(), b"k.cu", 0, [], [])
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS
    (res,) = nvrtc.nvrtcCompileProgram(prog, 1, [b"--gpu-architecture=compute_90"])
    _, size = nvrtc.nvrtcGetProgramLogSize(prog)
    log = b" " * size
    nvrtc.nvrtcGetProgramLog(prog, log)
    assert res == nvrtc.nvrtcResult.NVRTC_SUCCESS, log.decode(errors="replace")
