"""Real nvcc builds of the cuBLAS shim and the test kernels (CI has nvcc 13.0, no GPU)."""

from __future__ import annotations

import ctypes
import subprocess

import pytest

from harness.baselines import SHIM_FILE, build_shim, cublas_build_flags
from harness.build import build
from harness.evaluate import is_nondeterministic
from harness.testkernels import source as kernel_source


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.compile
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_shim_builds_and_links_cublas(arch):
    res = build_shim(arch)
    assert res.ok and res.so_path.is_file()
    dyn = subprocess.run(["nm", "-D", "--defined-only", str(res.so_path)], capture_output=True, text=True).stdout
    for sym in ("l2_hgemm", "l2_hgemm_tn", "l2_hgemm_f16", "l2_hgemm_tn_f16", "l2_hgemm_bf16", "l2_hgemm_tn_bf16",
                "l2_hgemm_lt_heur_bf16", "l2_hgemm_lt_auto_bf16", "l2_lt_plan", "l2_lt_select"):
        assert f" {sym}\n" in dyn + "\n"
    ldd = subprocess.run(["ldd", str(res.so_path)], capture_output=True, text=True).stdout
    assert "libcublas.so" in ldd and "not found" not in ldd, ldd
    ctypes.CDLL(str(res.so_path))            # loads (cuBLAS resolvable through the rpath) without a GPU
    again = build_shim(arch)
    assert again.cached and again.so_path == res.so_path


def test_shim_flags_are_stable():
    assert cublas_build_flags() == cublas_build_flags()
    assert SHIM_FILE.is_file()


@pytest.mark.compile
@pytest.mark.parametrize("name", ["testgood_simple", "testbad_skiplastrow", "testbad_oob", "testbad_f16acc",
                                  "testbad_stale", "testbad_crash", "testbad_hang"])
def test_test_kernels_build(name):
    src = kernel_source(name)
    res = build(src, arch="sm_90a")
    assert res.ok, res.errors
    assert not is_nondeterministic(src)


def test_nondeterministic_marker():
    assert is_nondeterministic("// l2: nondeterministic\nint x;")
    assert not is_nondeterministic("// not l2: nondeterministic at all")
