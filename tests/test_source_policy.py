"""harness.source_policy: what a candidate may not call is refused at build time, with line and reason."""

from __future__ import annotations

import pytest

from harness import source_policy as sp
from harness.build import SOURCE_NAME, build
from harness.families import catalog
from harness.paths import KERNELS_DIR

GOOD = (KERNELS_DIR / "testgood_simple.cu").read_text()
ENTRY = 'extern "C" int l2_hgemm(const void* A, const void* B, void* C, int M, int N, int K, void* stream) {'


def with_call(line: str) -> str:
    """testgood_simple with one more statement at the top of l2_hgemm."""
    assert ENTRY in GOOD
    return GOOD.replace(ENTRY, ENTRY + "\n  " + line)


@pytest.mark.parametrize("line, rule", [
    ("cudaStreamCaptureStatus st; cudaStreamIsCapturing((cudaStream_t)stream, &st);", "capture-detection"),
    ("cudaStreamGetCaptureInfo((cudaStream_t)stream, nullptr, nullptr);", "capture-detection"),
    ("void* f; cudaGetDriverEntryPoint(\"cuStreamIsCapturing\", &f, 0);", "entry-point-lookup"),
    ("cudaDeviceSynchronize();", "host-sync"),
    ("cudaStreamSynchronize((cudaStream_t)stream);", "host-sync"),
    ("cudaStream_t mine; cudaStreamCreateWithFlags(&mine, cudaStreamNonBlocking);", "own-stream"),
    ("stream = cudaStreamPerThread;", "own-stream"),
    ("const char* e = getenv(\"L2TUI_CACHE_DIR\");", "host-io"),
    ("FILE* f = fopen(\"/tmp/answers.bin\", \"rb\");", "host-io"),
    ("system(\"true\");", "host-io"),
    ("cublasHandle_t h; cublasCreate(&h);", "vendor-gemm"),
    ('unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));', "wall-clock"),
    ("unsigned long long t = __globaltimer();", "wall-clock"),
])
def test_each_rule_is_refused_with_line_and_reason(line, rule):
    src = with_call(line)
    found = sp.violations(src)
    assert any(f"({rule})" in msg for _, _, msg in found)
    want_line = src.splitlines().index("  " + line) + 1
    assert any(ln == want_line for ln, _, _ in found)
    res = build(src, arch="sm_90a")
    assert not res.ok and res.so_path is None
    assert res.errors[0].file == SOURCE_NAME and res.errors[0].line == want_line
    assert "source policy" in res.error_text()


def test_vendor_headers_are_refused_in_either_include_form():
    for inc in ("#include <cublasLt.h>", '#include "cublas_v2.h"'):
        found = sp.violations(inc + "\n" + GOOD)
        assert found and found[0][:2] == (1, 1) and "(vendor-gemm)" in found[0][2]


def test_comments_strings_and_lookalike_names_are_fine():
    src = with_call('const char* why = "no cudaDeviceSynchronize here"; /* nor cudaStreamIsCapturing */ '
                    "// getenv, fopen, cublasCreate() are only mentioned") + "\nint coord_system(int x) { return x; }\n"
    assert sp.violations(src) == []
    blank = sp.blank_comments_and_strings('a /* x\ny */ b "s\\"t" // c\nd')
    assert blank.count("\n") == 2 and "x" not in blank and "s" not in blank and blank.endswith("d")
    # a comment about the global timer is fine; the timer inside inline PTX (a string) is not
    assert sp.violations(with_call("// never reads %globaltimer")) == []


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("acc", ["f32", "f16"])
def test_every_catalog_configuration_passes(arch, acc):
    assert {c.name: sp.violations(c.source()) for c in catalog(acc, arch) if sp.violations(c.source())} == {}


def test_the_test_kernels_pass_and_the_cublas_shim_needs_trust():
    for f in KERNELS_DIR.glob("*.cu"):
        if f.name != "cublas_shim.cu":
            assert sp.violations(f.read_text()) == [], f.name
    assert sp.violations((KERNELS_DIR / "cublas_shim.cu").read_text())
