"""``export --build``: the combined library really builds with nvcc (sm_90a) and covers the manifest."""

from __future__ import annotations

import ctypes
import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from l2tui.export import export_session, load_manifest
from l2tui.export.cdispatch import exported_symbols, parse_table

_spec = importlib.util.spec_from_file_location(
    "export_make_session", Path(__file__).parent / "fixtures" / "export" / "make_session.py")
fx = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fx)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("build")
    session = fx.make_session(root / "run-1")
    res = export_session(session, root / "exp", build=True, arch="sm_90a")
    return res


def test_library_builds_and_exports_every_kernel(built):
    man = load_manifest(built.out)
    lib = man["library"]
    assert lib is not None and lib["arch"] == "sm_90a" and lib["file"] == "lib/libl2hgemm.so"
    so = built.out / lib["file"]
    assert so.is_file() and built.library == so
    syms = exported_symbols(so)
    kernels = [e for e in man["kernels"] if not e["fallback"]]
    assert kernels and any(e["fallback"] for e in man["kernels"])
    for e in kernels:
        assert e["symbol"] in syms
    for e in man["kernels"]:
        if e["fallback"]:
            assert e["symbol"] not in syms  # a shape cuBLAS wins is not even compiled in
    api = {"l2hgemm", "l2hgemm_cublas", "l2hgemm_has_kernel", "l2hgemm_num_shapes", "l2hgemm_shape"}
    assert api <= syms
    # nothing else leaks out: not the kernels' own helpers, not the static CUDA runtime
    assert syms == api | {e["symbol"] for e in kernels}


def test_dispatch_table_covers_the_manifest(built):
    man = load_manifest(built.out)
    table = parse_table((built.out / "src" / "l2hgemm_dispatch.cu").read_text())
    want = sorted((*e["shape"], None if e["fallback"] else e["symbol"]) for e in man["kernels"])
    assert sorted(table, key=lambda t: t[:3]) == want
    assert table == sorted(table, key=lambda t: t[:3])  # sorted for the binary search
    header = (built.out / "include" / "l2hgemm.h").read_text()
    assert "int l2hgemm(const void* A, const void* B, void* C, int M, int N, int K, void* stream);" in header
    for e in man["kernels"]:
        assert (e["symbol"] in header) == (not e["fallback"])


def test_the_built_table_answers_like_the_manifest(built):
    """Ask the library itself (no GPU needed: these entry points only read the table)."""
    man = load_manifest(built.out)
    try:
        lib = ctypes.CDLL(str(built.library))
    except OSError as e:  # pragma: no cover - cuBLAS not loadable here
        pytest.skip(f"cannot load the library on this machine: {e}")
    n = lib.l2hgemm_num_shapes()
    assert n == len(man["kernels"])
    rows = []
    for i in range(n):
        m, nn, k, has = (ctypes.c_int() for _ in range(4))
        assert lib.l2hgemm_shape(i, ctypes.byref(m), ctypes.byref(nn), ctypes.byref(k), ctypes.byref(has)) == 0
        rows.append(((m.value, nn.value, k.value), bool(has.value)))
    assert rows == sorted((tuple(e["shape"]), not e["fallback"]) for e in man["kernels"])
    for e in man["kernels"]:
        assert lib.l2hgemm_has_kernel(*e["shape"]) == (0 if e["fallback"] else 1)
    assert lib.l2hgemm_has_kernel(96, 80, 48) == 0
    assert lib.l2hgemm_shape(n, None, None, None, None) == 1


def test_same_named_kernels_stay_separate(built):
    """Two variants of one family (same kernel name, different TILE) each keep their own code."""
    nm = shutil.which("nm")
    out = subprocess.run([nm, str(built.library)], capture_output=True, text=True, check=True).stdout
    copies = {ln.split()[-1] for ln in out.splitlines() 
              if ln.split()[-1].startswith("_Z11tiled_hgemm") and "." not in ln.split()[-1]}
    kernels = [e["name"] for e in built.manifest["kernels"]
               if not e["fallback"] and "tiled_hgemm" in (built.out / e["file"]).read_text()]
    assert len(kernels) >= 2
    assert copies == {f"_Z11tiled_hgemmPK6__halfS1_PS_iii__l2k_{n}" for n in kernels}


def test_shipped_build_script_rebuilds_the_library(built, tmp_path):
    from harness.build import cutlass_include_dirs
    from l2tui.export.cdispatch import cublas_flags

    copy = tmp_path / "exp"
    shutil.copytree(built.out, copy)
    (copy / "lib" / "libl2hgemm.so").unlink()
    cub = cublas_flags()
    env = dict(os.environ,
               CUTLASS_INC=" ".join(f"-I{d}" for d in cutlass_include_dirs()),
               CUBLAS_INC=" ".join(f for f in cub if f.startswith("-I")),
               CUBLAS_LINK=" ".join(f for f in cub if not f.startswith("-I")))
    proc = subprocess.run(["sh", str(copy / "build.sh")], capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert exported_symbols(copy / "lib" / "libl2hgemm.so") == exported_symbols(built.library)
    cmake = (copy / "l2hgemm.cmake").read_text()
    assert "IMPORTED_LOCATION \"${L2HGEMM_ROOT}/lib/libl2hgemm.so\"" in cmake
    assert "CUDA::cublas" in cmake


def test_a_program_links_against_the_library(built, tmp_path):
    """The shipped example (header + lib) compiles and links like a user's program would."""
    from harness.build import nvcc_path

    exe = tmp_path / "example"
    proc = subprocess.run(
        [nvcc_path(), "-std=c++17", f"-I{built.out / 'include'}", str(built.out / "src" / "example.cpp"),
         f"-L{built.out / 'lib'}", "-ll2hgemm", f"-Xlinker=-rpath={built.out / 'lib'}", "-o", str(exe)],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert exe.is_file()


def test_bench_forwarder_compiles():
    """The export bench times the library through a forwarding ABI kernel; it must build."""
    from harness.build import build
    from l2tui.export.bench import _FORWARDER

    res = build(_FORWARDER.replace("@LIB@", "/nonexistent/libl2hgemm.so"), arch="sm_90a")
    assert res.ok, res.error_text()


def test_library_has_a_soname(built):
    out = subprocess.run(["objdump", "-p", str(built.library)], capture_output=True, text=True, check=True).stdout
    assert any(line.split()[:2] == ["SONAME", "libl2hgemm.so"] for line in out.splitlines())


def test_cmake_snippet_links_the_example(built, tmp_path):
    """`include(l2hgemm.cmake)` + `target_link_libraries(app l2hgemm::l2hgemm)` configures and links."""
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.skip("cmake is not installed")
    b = tmp_path / "cmake-build"
    for cmd in ([cmake, "-S", str(built.out), "-B", str(b)], [cmake, "--build", str(b)]):
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    exe = b / "l2hgemm_example"
    assert exe.is_file()
    ldd = subprocess.run(["ldd", str(exe)], capture_output=True, text=True).stdout
    assert str(built.library) in ldd
