"""The nvcc driver: real builds for sm_90a and sm_80, the cache, ptxas and error parsing."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import build as B
from harness.errors import HarnessError, KernelSourceError, ToolMissing

KERNELS = Path(__file__).resolve().parent.parent / "harness" / "kernels"
NAIVE = (KERNELS / "reference_naive.cu").read_text()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.compile
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_reference_kernel_builds_and_exports_the_abi(cache, arch):
    r = B.build(NAIVE, arch=arch)
    assert r.ok, r.error_text()
    assert r.so_path is not None and r.so_path.is_file()
    assert str(r.so_path).startswith(str(cache))
    assert r.arch == arch and not r.cached
    assert r.ptxas is not None and r.ptxas.registers > 0
    assert r.ptxas.kernels[0].arch == arch
    assert r.ptxas.spill_store_bytes == 0
    syms = B._exported_symbols(r.so_path)
    assert syms is None or "l2_hgemm" in syms


@pytest.mark.compile
def test_rebuild_is_a_cache_hit_and_key_covers_flags_and_arch(cache):
    first = B.build(NAIVE, arch="sm_80")
    again = B.build(NAIVE, arch="sm_80")
    assert again.cached and again.key == first.key and again.so_path == first.so_path
    other_flags = B.build(NAIVE, arch="sm_80", flags=["-maxrregcount=64"])
    assert other_flags.key != first.key and not other_flags.cached
    other_src = B.build(NAIVE.replace("#define BLOCK_X 16", "#define BLOCK_X 32"), arch="sm_80")
    assert other_src.key != first.key
    forced = B.build(NAIVE, arch="sm_80", use_cache=False)
    assert not forced.cached and forced.ok


@pytest.mark.compile
def test_compile_errors_are_structured_and_cached(cache):
    bad = NAIVE.replace("acc += ", "acc += undefined_thing + ")
    r = B.build(bad, arch="sm_80")
    assert not r.ok and r.so_path is None
    errs = [e for e in r.errors if e.severity == "error"]
    assert errs, r.log
    assert errs[0].file == "kernel.cu" and errs[0].line is not None
    assert "undefined_thing" in errs[0].message
    line = bad.splitlines()[errs[0].line - 1]
    assert "undefined_thing" in line
    assert "kernel.cu:" in r.error_text()
    again = B.build(bad, arch="sm_80")
    assert again.cached and not again.ok and again.errors[0].message == r.errors[0].message


def test_kernel_without_abi_is_a_one_line_error(cache):
    with pytest.raises(KernelSourceError, match="does not define l2_hgemm"):
        B.build("__global__ void k() {}\n", arch="sm_80")
    with pytest.raises(KernelSourceError, match='extern "C"'):
        B.build("int l2_hgemm(const void*, const void*, void*, int, int, int, void*) { return 0; }\n", arch="sm_80")


@pytest.mark.compile
def test_static_l2_hgemm_fails_export_check(cache):
    src = 'extern "C" { static int l2_hgemm(const void*, const void*, void*, int, int, int, void*) { return 0; } }\nint keep(){return l2_hgemm(0,0,0,0,0,0,0);}\n'
    r = B.build(src, arch="sm_80")
    if B._exported_symbols is None:  # pragma: no cover
        pytest.skip("nm missing")
    assert not r.ok
    assert any("does not export l2_hgemm" in e.message for e in r.errors)


def test_unreadable_kernel_file(tmp_path, cache):
    with pytest.raises(KernelSourceError, match="cannot read kernel file"):
        B.build_file(tmp_path / "nope.cu", arch="sm_80")
    d = tmp_path / "dir.cu"
    d.mkdir()
    with pytest.raises(KernelSourceError, match="cannot read kernel file"):
        B.build_file(d, arch="sm_80")


def test_no_nvcc_is_a_one_line_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.delenv("L2TUI_NVCC", raising=False)
    monkeypatch.setattr(B, "_FALLBACK_NVCC", ())
    with pytest.raises(ToolMissing) as e:
        B.nvcc_path()
    assert "nvcc not found" in str(e.value) and "\n" not in str(e.value)
    monkeypatch.setenv("L2TUI_NVCC", str(tmp_path / "nvcc"))
    with pytest.raises(ToolMissing, match="does not exist"):
        B.nvcc_path()


def test_bad_arch_and_flags():
    with pytest.raises(HarnessError, match="unknown arch"):
        B.normalize_arch("sm_1")
    assert B.normalize_arch("90a") == "sm_90a" and B.normalize_arch("compute_80") == "sm_80"
    with pytest.raises(HarnessError, match="not allowed"):
        B.validate_flags(["-o", "x"])
    with pytest.raises(HarnessError, match="must start with"):
        B.validate_flags(["O3"])


@pytest.mark.compile
def test_build_many_dedupes_and_builds_in_parallel(cache):
    a = NAIVE
    b = NAIVE.replace("#define BLOCK_Y 16", "#define BLOCK_Y 8")
    seen = []
    res = B.build_many([a, b, a, "no abi here"], arch="sm_80", jobs=2, progress=lambda d, t, r: seen.append((d, t)))
    assert [r.ok for r in res] == [True, True, True, False]
    assert res[0].key == res[2].key
    assert "l2_hgemm" in res[3].errors[0].message
    assert seen[-1] == (3, 3)


@pytest.mark.compile
def test_build_many_starts_no_nvcc_after_its_deadline_but_answers_cache_hits(cache):
    import time

    a = NAIVE
    b = NAIVE.replace("#define BLOCK_Y 16", "#define BLOCK_Y 4")
    assert B.build(a, arch="sm_80").ok
    seen = []
    res = B.build_many([a, b], arch="sm_80", jobs=2, deadline=time.monotonic(),
                       progress=lambda d, t, r: seen.append((d, t)))
    assert res[0] is not None and res[0].ok and res[0].cached      # in the cache: answered
    assert res[1] is None                                          # not built: no nvcc after the deadline
    assert seen == [(1, 2)]
    assert B.cached_build(b, "sm_80") is None
    (late,) = B.build_many([b], arch="sm_80", deadline=time.monotonic() + 600)
    assert late.ok and not late.cached                             # before its deadline: built now


PTXAS_LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z6kernelPK6__half' for 'sm_90a'
ptxas info    : Function properties for _Z6kernelPK6__half
    8 bytes stack frame, 16 bytes spill stores, 24 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers, 8 bytes stack frame, 98304 bytes smem, 416 bytes cmem[0]
ptxas info    : Compiling entry function '_Z6reducev' for 'sm_90a'
ptxas info    : Function properties for _Z6reducev
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 24 registers, used 0 barriers, 360 bytes cmem[0]
"""


def test_parse_ptxas_report():
    rep = B.parse_ptxas(PTXAS_LOG)
    assert rep is not None
    assert [k.name for k in rep.kernels] == ["_Z6kernelPK6__half", "_Z6reducev"]
    assert rep.registers == 168 and rep.smem_bytes == 98304
    assert rep.spill_store_bytes == 16 and rep.spill_load_bytes == 24 and rep.stack_bytes == 8
    assert rep.kernels[1].registers == 24 and rep.kernels[1].smem_bytes == 0
    assert B.PtxasReport.from_dict(rep.to_dict()) == rep
    assert B.parse_ptxas("nothing here") is None


def test_parse_diagnostics_from_every_tool():
    log = (
        "kernel.cu(12): error: identifier \"x\" is undefined\n"
        "kernel.cu(30): warning #177-D: variable \"y\" was declared but never referenced\n"
        "kernel.cu:40:7: error: expected ';' before '}' token\n"
        "ptxas error   : Entry function '_Z1kv' uses too much shared data (0x40000 bytes, 0x3a000 max)\n"
        "/usr/bin/ld: cannot find -lnope\n"
    )
    errs = B.parse_diagnostics(log)
    assert [(e.file, e.line, e.severity) for e in errs] == [
        ("kernel.cu", 12, "error"), ("kernel.cu", 30, "warning"), ("kernel.cu", 40, "error"),
        ("ptxas", None, "error"), ("ld", None, "error"),
    ]
    assert errs[2].col == 7 and "too much shared data" in errs[3].message


@pytest.mark.compile
def test_build_result_round_trip(cache):
    r = B.build(NAIVE, arch="sm_80")
    assert B.BuildResult.from_dict(r.to_dict()).to_dict() == r.to_dict()


def test_cutlass_headers_found_and_compile():
    dirs = B.cutlass_include_dirs()
    assert dirs, "nvidia-cutlass must be installed (test extra)"
    assert (dirs[0] / "cute" / "tensor.hpp").is_file()


@pytest.mark.compile
def test_a_build_that_timed_out_is_not_cached(cache):
    """Only failures the source causes are cached: a timeout (or a broken toolchain) is retried."""
    first = B.build(NAIVE, arch="sm_80", timeout_s=0.001)
    assert not first.ok and "timed out" in first.log
    again = B.build(NAIVE, arch="sm_80")
    assert again.ok and not again.cached, again.error_text()


@pytest.mark.compile
def test_relative_cache_dir_is_made_absolute(tmp_path, monkeypatch):
    """nvcc runs inside the build folder, so a relative $L2TUI_CACHE_DIR must be resolved first."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("L2TUI_CACHE_DIR", "rel-cache")
    r = B.build(NAIVE, arch="sm_80")
    assert r.ok, r.error_text()
    assert r.so_path is not None and r.so_path.is_absolute()
    assert r.so_path.is_relative_to(tmp_path / "rel-cache")


@pytest.mark.compile
def test_a_missing_cutlass_header_is_not_cached_but_a_missing_header_of_the_source_is(cache, tmp_path, monkeypatch):
    """A CUTLASS/CuTe header that is not there (the package being reinstalled while nvcc ran) says
    nothing about the source: the failure is not cached, and once the headers are back the same
    source builds (a source's own errors are cached: test_compile_errors_are_structured_and_cached)."""
    root = tmp_path / "cutlass"
    (root / "include").mkdir(parents=True)
    (root / "tools" / "util" / "include").mkdir(parents=True)
    monkeypatch.setenv("CUTLASS_PATH", str(root))
    B.cutlass_include_dirs.cache_clear()
    monkeypatch.setattr(B, "cutlass_include_dirs", B.cutlass_include_dirs)   # restored after the test
    try:
        src = '#include "cute/tensor.hpp"\n' + NAIVE
        first = B.build(src, arch="sm_80")
        assert not first.ok and any("cute/tensor.hpp" in e.message for e in first.errors), first.log
        assert not B.build(src, arch="sm_80").cached
        (root / "include" / "cute").mkdir()
        (root / "include" / "cute" / "tensor.hpp").write_text("#pragma once\n")
        back = B.build(src, arch="sm_80")
        assert back.ok and not back.cached, back.error_text()
    finally:
        B.cutlass_include_dirs.cache_clear()


def test_compiler_output_is_kept_up_to_its_cap_and_the_rest_drained(tmp_path):
    """A source can make the compiler print without end: the log keeps the head, says how much was
    dropped, and the process still runs to its end (its pipe is drained, never left full)."""
    import sys

    from harness import build as B

    n = B.MAX_COMPILER_OUTPUT + (3 << 20)
    cmd = [sys.executable, "-c", f"import sys; sys.stdout.write('x' * {n}); sys.exit(7)"]
    rc, log = B._run_compiler(cmd, tmp_path, timeout_s=120)
    assert rc == 7
    assert log.startswith("x" * 1000)
    assert len(log) < B.MAX_COMPILER_OUTPUT + 200
    assert f"[{3 << 20} more bytes of compiler output dropped]" in log
