"""harness.source_policy: what a candidate may not call is refused at build time, with line and reason."""

from __future__ import annotations

import pytest

from harness import source_policy as sp
from harness.build import SOURCE_NAME, build
from harness.families import catalog
from harness.paths import KERNELS_DIR
from harness.testkernels import source as kernel_source

GOOD = kernel_source("testgood_simple")
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
    ("cudaStreamAttrValue v = {}; cudaStreamSetAttribute((cudaStream_t)stream, "
     "cudaStreamAttributeAccessPolicyWindow, &v);", "lasting-state"),
    ("cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 0);", "lasting-state"),
    ("cudaCtxResetPersistingL2Cache();", "lasting-state"),
    ("cudaDeviceSetCacheConfig(cudaFuncCachePreferL1);", "lasting-state"),
    ("cudaSetDevice(1);", "lasting-state"),
    ("cuCtxSetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE, 0);", "lasting-state"),
    ("const char* e = getenv(\"L2TUI_CACHE_DIR\");", "host-io"),
    ("FILE* f = fopen(\"/tmp/answers.bin\", \"rb\");", "host-io"),
    ("system(\"true\");", "process"),
    ('(system)("touch /tmp/x");', "process"),
    ('int (*f)(const char*) = &system; f("x");', "process"),
    ("syscall(39);", "raw-syscall"),
    ('asm volatile("syscall");', "raw-syscall-asm"),
    ('asm volatile("svc #0");', "raw-syscall-asm"),
    ('asm volatile("int $0x80");', "raw-syscall-asm"),
    ("extern char** environ; (void)environ;", "host-io"),
    ('int fd = open("/etc/passwd", 0);', "host-io"),
    ('int fd = ::openat(0, "x", 0);', "host-io"),
    ('unlink("/tmp/x");', "host-io"),
    ('remove("/tmp/x"); rename("a", "b");', "host-io"),
    ('std::filesystem::remove_all("/x");', "host-io"),
    ('std::ofstream o("x");', "host-io"),
    ('std::ifstream i("x");', "host-io"),
    ('void* h = dlopen("libc.so.6", 2);', "host-io"),
    ("int s = socket(2, 1, 0);", "network"),
    ("connect(s, nullptr, 0);", "network"),
    ("posix_spawn(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);", "process"),
    ("vfork();", "process"),
    ("clone(nullptr, nullptr, 0, nullptr);", "process"),
    ('execve("/bin/sh", nullptr, nullptr);', "process"),
    ('popen("id", "r");', "process"),
    ('asm volatile(".section .init_array");', "load-time-code"),
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


@pytest.mark.parametrize("top, rule", [
    ("__attribute__((constructor)) static void boom() {}", "load-time-attribute"),
    ("__attribute__((destructor)) static void boom() {}", "load-time-attribute"),
    ("[[gnu::constructor]] void boom() {}", "load-time-attribute"),
    ("struct S { S() {} }; S s __attribute__((init_priority(101)));", "load-time-attribute"),
    ('__attribute__((section(".init_array"))) void (*p)() = 0;', "load-time-attribute"),
    ('asm(".pushsection .init_array");', "load-time-code"),
    ("struct S { S() {} }; static S s;", "static-init"),
    ("namespace x { struct S { S() {} }; S s; }", "static-init"),
    ("static int x = f();", "static-init"),
    ("static int x = [](){ return 1; }();", "static-init"),
    ("struct S { S(int) {} }; S s(3);", "static-init"),
    ("#define CAT(a, b) a##b", "name-building"),
    ("#define CAT(a, b) a %:%: b", "name-building"),
    ("int sys\\\ntem_like = 0;", "name-building"),
    ('_Pragma("message(x)")', "name-building"),
    ("int sys\\u0074em;", "name-building"),
    ('int mysys(const char*) __asm__("system");', "symbol-alias"),
    ("#pragma redefine_extname mysys system", "symbol-alias"),
    ('#line 1 "kernel.cu"', "directive"),
    ('# 1 "kernel.cu"', "directive"),
    ('#include "/etc/passwd"', "include"),
    ("#include </etc/passwd>", "include"),
    ("#include <cutlass/../../../../etc/passwd>", "include"),
    ('#include "../secret.h"', "include"),
    ('#include "secret.h"', "include"),
    ('#define H "/etc/passwd"\n#include H', "include"),
    ("#include <unistd.h>", "include"),
    ("#include <sys/socket.h>", "include"),
    ("#include <filesystem>", "include"),
    ("#include_next <cuda_runtime.h>", "directive"),
])
def test_load_time_code_name_building_and_includes_are_refused(top, rule):
    src = top + "\n" + GOOD
    found = sp.violations(src)
    assert any(f"({rule})" in msg for _, _, msg in found), found
    res = build(src, arch="sm_90a")
    assert not res.ok and res.so_path is None and res.errors[0].file == SOURCE_NAME
    first = res.error_text().splitlines()[0]
    assert "source policy (" in first and "\n" not in str(res.errors[0])


def test_honest_namespace_scope_code_passes():
    src = ("#include <cuda_fp16.h>\n#include \"cutlass/cutlass.h\"\n#include <cute/tensor.hpp>\n"
           "namespace { constexpr int kTile = 128; __constant__ float scale[4]; __device__ int counter; }\n"
           "static void* g_workspace = nullptr;\nstatic const size_t kBytes = size_t(32) << 20;\n"
           "struct Params { int m, n; };\ntemplate <int N> struct Tile { static constexpr int value = N; };\n"
           "using T = Tile<4>;\nextern \"C\" int helper(int);\nstatic int twice(int x) { return 2 * x; }\n"
           "#define ROW(i) \\\n  ((i) * kTile)\n" + GOOD)
    assert sp.violations(src) == []


def test_vendor_headers_are_refused_in_either_include_form():
    for inc in ("#include <cublasLt.h>", '#include "cublas_v2.h"'):
        found = sp.violations(inc + "\n" + GOOD)
        assert found and all(f[:2] == (1, 1) for f in found) and any("(vendor-gemm)" in f[2] for f in found)


def test_comments_strings_and_lookalike_names_are_fine():
    src = with_call('const char* why = "no cudaDeviceSynchronize here"; /* nor cudaStreamIsCapturing */ '
                    "// getenv, fopen, cublasCreate() are only mentioned") + "\nint coord_system(int x) { return x; }\n"
    assert sp.violations(src) == []
    blank = sp.blank_comments_and_strings('a /* x\ny */ b "s\\"t" // c\nd')
    assert blank.count("\n") == 2 and "x" not in blank and "s" not in blank and blank.endswith("d")
    # a comment about the global timer is fine; the timer inside inline PTX (a string) is not
    assert sp.violations(with_call("// never reads %globaltimer")) == []


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("acc", ["f32", "f16"])
def test_every_catalog_configuration_passes(arch, acc):
    assert {c.name: sp.violations(c.source()) for c in catalog(acc, arch) if sp.violations(c.source())} == {}


def test_the_test_kernels_pass_and_the_cublas_shim_needs_trust():
    for f in KERNELS_DIR.glob("*.cu"):
        if f.name != "cublas_shim.cu":   # a test kernel as submitted: its shared GEMM pasted in
            assert sp.violations(kernel_source(f.name)) == [], f.name
    assert sp.violations((KERNELS_DIR / "cublas_shim.cu").read_text())


def test_repeated_checks_of_one_text_agree_and_hand_out_their_own_list():
    """violations() is memoised on the text (a sweep asks for every catalog source on every
    shape); a caller that edits the list it got changes nothing for the next caller."""
    from harness.source_policy import violations

    src = '#include <cstdlib>\nextern "C" int l2_hgemm() { system("x"); return 0; }\n'
    first = violations(src)
    assert first and "system" in first[0][2]
    first.clear()
    assert violations(src) and violations(src) == violations(src + "")
