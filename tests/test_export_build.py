"""``export --build``: the combined library really builds with nvcc (sm_90a) and covers the manifest."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from l2tui.export import export_session, load_manifest
from l2tui.export.cdispatch import exported_symbols, parse_table
from tests.fixtures.export import make_session as fx

pytestmark = pytest.mark.compile   # runs nvcc (tools/test.sh --fast leaves it out)


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
    api = {"l2hgemm", "l2hgemm_fallback", "l2hgemm_fallback_mode", "l2hgemm_fallback_tuned", "l2hgemm_cublas",
           "l2hgemm_has_kernel", "l2hgemm_num_shapes", "l2hgemm_shape", "l2hgemm_fallback_choice",
           "l2hgemm_fallback_pinned"}
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
    # nothing chosen yet (and no GPU asked): 0, index -1
    index = ctypes.c_int(7)
    assert lib.l2hgemm_fallback_choice(64, 64, 64, ctypes.byref(index)) == 0 and index.value == -1


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
    assert "CUDA::cublas" in cmake and "CUDA::cublasLt" in cmake
    assert "-lcublasLt" in (copy / "build.sh").read_text()


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

    from l2tui.export.cdispatch import render_bench_forwarder

    src = render_bench_forwarder(Path("/nonexistent/libl2hgemm.so"))
    res = build(src, arch="sm_90a", trusted=True)   # as library_vs_best evaluates it
    assert res.ok, res.error_text()
    assert not build(src, arch="sm_90a").ok        # a candidate may not dlopen


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


def test_library_links_cublaslt(built):
    """The fallback is cuBLASLt: the library needs it (and finds it through its RUNPATH)."""
    out = subprocess.run(["objdump", "-p", str(built.library)], capture_output=True, text=True, check=True).stdout
    needed = [ln.split()[1] for ln in out.splitlines() if ln.split()[:1] == ["NEEDED"]]
    assert any(n.startswith("libcublasLt.so") for n in needed), needed
    assert any(n.startswith("libcublas.so") for n in needed), needed


def test_generated_fallback_source(built):
    """What the fallback promises, visible in the generated dispatcher (the GPU tests check the behaviour)."""
    src = (built.out / "src" / "l2hgemm_dispatch.cu").read_text()
    header = (built.out / "include" / "l2hgemm.h").read_text()
    assert "int l2hgemm_fallback(const void* A, const void* B, void* C, int M, int N, int K, void* stream);" in header
    assert "L2HGEMM_FALLBACK" in header
    # shapes without a kernel and kernels returning non-zero go to the fallback, the fallback to cuBLAS last
    assert "return l2fb::fallback_call(e != nullptr ? &e->pin : nullptr, A, B, C, M, N, K, stream);" in src
    assert "return l2hgemm_cublas(A, B, C, M, N, K, stream);" in src
    # cuBLASLt, fp32 compute, NN on the swapped operands, heuristic candidates with a workspace
    for needle in ("cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F)",
                   "#define L2FB_CUDA_TYPE CUDA_R_16F\n",   # an fp16 export: fp16 A, B and C
                   "cublasLtMatrixLayoutCreate(&p->a, L2FB_CUDA_TYPE, N, K, N)",
                   "cublasLtMatrixLayoutCreate(&p->b, L2FB_CUDA_TYPE, K, M, K)",
                   "cublasLtMatrixLayoutCreate(&p->c, L2FB_CUDA_TYPE, N, M, N)",
                   "cublasLtMatmulAlgoGetHeuristic", "CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES",
                   "kMaxAlgos = 32", "cudaEventElapsedTime", "std::mutex"):
        assert needle in src, needle
    # the capture guard: no timing while the stream is captured into a graph
    assert "cudaStreamIsCapturing" in src
    choose = src.split("bool choose(", 1)[1].split("\n}\n", 1)[0]
    assert "(pinned || !capturing(c.s))" in choose and "else if (!capturing(c.s))" in choose
    # a pin is applied only while this cuBLASLt lists the same algorithms
    pin = src.split("bool apply_pin(", 1)[1].split("\n}\n", 1)[0]
    assert "cublasLtGetVersion()) != pin.version" in pin and "!= pin.count" in pin and "align != 256" in pin
    # the environment variable and its three values, read once
    assert 'std::getenv("L2HGEMM_FALLBACK")' in src and "static const int m = parse_mode(" in src
    for value in ("cublaslt-autotune", "cublaslt-heuristic", "cublas"):
        assert f'"{value}"' in src
    # the runtime's fallback-only library is the same C
    from l2tui.export.cdispatch import render_fallback_library

    alone = render_fallback_library()
    assert "extern \"C\" int l2hgemm_fallback(" in alone and "extern \"C\" int l2_hgemm(" in alone
    body = alone[alone.index("// The fallback: what runs"):alone.index("extern \"C\" int l2_hgemm(")]
    assert body.strip() in src


@pytest.mark.parametrize("value,code,warns", [
    (None, 0, False), ("", 0, False), ("cublaslt-autotune", 0, False), ("cublaslt-heuristic", 1, False),
    ("cublas", 2, False), ("CUBLAS", 0, True), ("fastest", 0, True),
])
def test_fallback_env_is_parsed_by_the_library(built, value, code, warns):
    """``l2hgemm_fallback_mode()`` of the built library (no GPU needed), and the Python parser agrees."""
    import sys
    import warnings

    from l2tui.export.cdispatch import FALLBACK_MODES, fallback_mode

    env = {k: v for k, v in os.environ.items() if k != "L2HGEMM_FALLBACK"}
    if value is not None:
        env["L2HGEMM_FALLBACK"] = value
    prog = ("import ctypes, sys; lib = ctypes.CDLL(sys.argv[1]); "
            "print(lib.l2hgemm_fallback_mode(), lib.l2hgemm_fallback_mode())")
    proc = subprocess.run([sys.executable, "-c", prog, str(built.library)], capture_output=True, text=True,
                          env=env, timeout=120)
    if proc.returncode != 0 and "cannot open shared object" in proc.stderr:  # pragma: no cover
        pytest.skip(f"cannot load the library on this machine: {proc.stderr.strip()[-200:]}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(code), str(code)]
    assert ("is not cublaslt-autotune, cublaslt-heuristic or cublas" in proc.stderr) == warns
    assert proc.stderr.count("L2HGEMM_FALLBACK") == (1 if warns else 0)  # read (and warned about) once
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        assert fallback_mode({} if value is None else {"L2HGEMM_FALLBACK": value}) == FALLBACK_MODES[code]
    assert bool(got) == warns


def test_bench_reports_path_and_every_ratio():
    """The export bench's per-shape rows and verdict (pure functions; the GPU run fills them)."""
    from l2tui.export.bench import path_of, ratio_row, summarize

    man = {"kernels": [{"shape": [128, 128, 128], "fallback": None}, {"shape": [64, 64, 64], "fallback": "cublaslt"},
                       {"shape": [32, 32, 32], "fallback": "cublas"}]}
    assert path_of(man, (128, 128, 128)) == "kernel"
    assert path_of(man, (64, 64, 64)) == path_of(man, (32, 32, 32)) == path_of(man, (96, 80, 48)) == "fallback"
    times = {"library": 0.010, "cublas": 0.012, "cublaslt_autotune": 0.0105, "torch": None}
    row = ratio_row((128, 128, 128), "kernel", True, times)
    assert row["best_library"] == "cublaslt_autotune" and row["ratio_vs_best"] == pytest.approx(1.05)
    assert row["ratio_vs"] == {"cublas": pytest.approx(1.2), "cublaslt_autotune": pytest.approx(1.05)}
    slow = ratio_row((96, 80, 48), "fallback", False, {"library": 0.010, "cublaslt_autotune": 0.009})
    rows = [dict(row, status="ok"), dict(slow, status="ok")]
    verdict = summarize(rows)
    assert verdict["min_ratio_vs_best"] == pytest.approx(1.05)  # the promise covers exported shapes
    assert verdict["per_path"]["fallback"] == {"shapes": 1, "min_ratio_vs_best": pytest.approx(0.9)}
    assert verdict["below_1"] == [{"shape": [96, 80, 48], "path": "fallback", "best_library": "cublaslt_autotune",
                                   "ratio_vs_best": pytest.approx(0.9)}]
    assert verdict["all_ok"] and ratio_row((1, 1, 1), "kernel", True, {"library": None})["ratio_vs_best"] is None


def test_bench_says_which_verdict_a_shape_misses_when_cublas_won_on_a_copy_of_b():
    """cuBLAS's TN form reads a column-major copy of B the library is never given: the row keeps the
    verdict against it and adds one against the libraries on the library's own operands (cuBLAS NN)."""
    from harness.evaluate import Evaluation
    from l2tui.export.bench import cublas_nn_median, ratio_row, summarize

    times = {"library": 0.029, "cublas": 0.026, "cublaslt_autotune": 0.029}
    row = ratio_row((512, 4608, 3584), "fallback", True, times, cublas_nn_ms=0.030)
    assert row["best_library"] == "cublas" and row["ratio_vs_best"] == pytest.approx(0.026 / 0.029)
    assert row["best_same_layout"] == "cublaslt_autotune" and row["ratio_vs_best_same_layout"] == pytest.approx(1.0)
    verdict = summarize([dict(row, status="ok")])
    assert verdict["min_ratio_vs_best"] == pytest.approx(0.026 / 0.029)
    assert verdict["min_ratio_vs_best_same_layout"] == pytest.approx(1.0)
    runs = [Evaluation("ok", None, extra={"detail_times_ms": {"cublas_nn": x, "cublas_tn": 0.026}}) for x in (0.03, 0.05, 0.01)]
    hostile = [Evaluation("ok", None, extra={"detail_times_ms": "0.001"}), Evaluation("wrong", None, extra={})]
    assert cublas_nn_median(runs + hostile) == pytest.approx(0.03)
    assert cublas_nn_median(hostile) is None


def test_bench_repeats_report_each_subjects_median(tmp_path, capsys):
    from l2tui.export.bench import main, median_times

    runs = [{"library": 1.0, "cublas": 2.0, "torch": 9.0}, {"library": 3.0, "cublas": 1.0},
            {"library": 2.0, "cublas": 1.5}]
    # a subject missing from one run (it failed there) is left out rather than judged on fewer runs
    assert median_times(runs) == {"cublas": 1.5, "library": 2.0}
    assert median_times([]) == {}
    with pytest.raises(SystemExit):
        main([str(tmp_path), "--repeats", "0"])
    assert "--repeats must be 1 or more" in capsys.readouterr().err


def test_bench_fallback_option_sets_the_environment(tmp_path, monkeypatch, capsys):
    from l2tui.export.bench import main

    monkeypatch.delenv("L2HGEMM_FALLBACK", raising=False)
    assert main([str(tmp_path / "nosuch"), "--fallback", "cublaslt-heuristic"]) == 2
    assert os.environ["L2HGEMM_FALLBACK"] == "cublaslt-heuristic"
    assert "no manifest.json" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([str(tmp_path), "--fallback", "fastest"])
    with pytest.raises(SystemExit):                      # per call or back to back, nothing else
        main([str(tmp_path), "--timing", "server"])


def test_bench_uses_a_library_with_the_fallback(built):
    from l2tui.export.bench import _library

    keep: list = []
    assert _library(built.out, built.manifest, "sm_90a", keep) == built.library.resolve() and not keep


def test_the_bench_hands_the_worker_a_copy_it_can_see(tmp_path, monkeypatch):
    """The sandboxed worker sees the build cache, not the folder an export was written to: the
    export bench dlopens a content-addressed copy under ``builds/libraries/``."""
    from harness.paths import build_cache_dir
    from l2tui.export.bench import visible_to_worker

    monkeypatch.setenv("L2TUI_CACHE_DIR", str(tmp_path / "cache"))
    so = tmp_path / "home" / "exp" / "lib" / "libl2hgemm.so"
    so.parent.mkdir(parents=True)
    so.write_bytes(b"\x7fELF not really")
    got = visible_to_worker(so)
    assert build_cache_dir() in got.parents and got.name == so.name
    assert got.read_bytes() == so.read_bytes()
    assert visible_to_worker(so) == got          # the same bytes: the same copy
    so.write_bytes(b"\x7fELF another build")
    assert visible_to_worker(so) != got
