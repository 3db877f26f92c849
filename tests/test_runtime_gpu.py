"""On a GPU (``pytest -m gpu``): ``lib.matmul`` agrees with cuBLAS on exported and missing shapes,
for cupy and torch inputs, through the prebuilt library and through lazy per-kernel builds."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from l2tui.export import runtime
from l2tui.export import export_session
from tests.fixtures.export import make_session as fx

pytestmark = pytest.mark.gpu


MISSING = [(96, 80, 48), (1, 1, 1), (100, 60, 90), (333, 257, 129)]


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory) -> Path:
    from harness.gpuinfo import require_gpu

    root = tmp_path_factory.mktemp("gpu")
    return export_session(fx.make_session(root / "run-1"), root / "exp", build=True, arch=require_gpu().arch).out


class Cupy:
    name = "cupy"

    def __init__(self):
        self.cp = pytest.importorskip("cupy")

    def rand(self, m, n, seed):
        rs = self.cp.random.RandomState(seed)
        return rs.standard_normal((m, n), dtype=self.cp.float32).astype(self.cp.float16)

    def ref(self, a, b):  # cuBLAS, fp32 compute
        return self.cp.matmul(a, b)

    def err(self, x, ref):
        cp = self.cp
        x32, r32 = x.astype(cp.float32), ref.astype(cp.float32)
        return float(cp.linalg.norm(x32 - r32) / max(float(cp.linalg.norm(r32)), 1e-30))

    def sync(self):
        self.cp.cuda.get_current_stream().synchronize()


class Torch:
    name = "torch"

    def __init__(self):
        self.t = pytest.importorskip("torch")
        if not self.t.cuda.is_available():
            pytest.skip("torch without CUDA")

    def rand(self, m, n, seed):
        g = self.t.Generator(device="cuda").manual_seed(seed)
        return self.t.randn((m, n), generator=g, device="cuda", dtype=self.t.float32).half()

    def ref(self, a, b):
        return self.t.matmul(a, b)

    def err(self, x, ref):
        x32, r32 = x.float(), ref.float()
        return float((x32 - r32).norm() / r32.norm().clamp_min(1e-30))

    def sync(self):
        self.t.cuda.current_stream().synchronize()


@pytest.fixture(params=["cupy", "torch"])
def be(request):
    return Cupy() if request.param == "cupy" else Torch()


@pytest.mark.parametrize("prebuilt", [True, False], ids=["prebuilt", "lazy"])
def test_matmul_agrees_with_cublas(export_dir, be, prebuilt):
    lib = runtime.load(export_dir, prefer_prebuilt=prebuilt, strict=True)
    shapes = [tuple(e["shape"]) for e in lib.manifest["kernels"]] + MISSING
    for i, (m, n, k) in enumerate(shapes):
        a, b = be.rand(m, k, 2 * i), be.rand(k, n, 2 * i + 1)
        c = lib.matmul(a, b)
        ref = be.ref(a, b)
        be.sync()
        assert tuple(c.shape) == (m, n)
        assert be.err(c, ref) < 5e-3, (be.name, (m, n, k), lib.route(m, n, k))
        out = be.rand(m, n, 99)
        assert lib.matmul(a, b, out=out) is out
        be.sync()
        assert be.err(out, ref) < 5e-3
    assert not lib._broken


def test_pad_policy_matches_cublas(export_dir, be):
    lib = runtime.load(export_dir, pad="nearest-larger", strict=True)
    for i, (m, n, k) in enumerate([(100, 60, 90), (1, 1, 1), (127, 128, 100)]):
        assert lib.route(m, n, k).kind == "pad"
        a, b = be.rand(m, k, i), be.rand(k, n, i + 7)
        c = lib.matmul(a, b)
        be.sync()
        assert be.err(c, be.ref(a, b)) < 5e-3


def test_argument_errors(export_dir, be):
    lib = runtime.load(export_dir)
    a, b = be.rand(128, 128, 0), be.rand(128, 128, 1)
    with pytest.raises(runtime.MatmulArgumentError, match="float32; this export's kernels take fp16"):
        lib.matmul(a.astype("float32") if be.name == "cupy" else a.float(), b)
    with pytest.raises(runtime.MatmulArgumentError, match="contiguous"):
        lib.matmul(a.T if be.name == "cupy" else a.t(), b[:, :64] if be.name == "cupy" else b)
    with pytest.raises(runtime.MatmulArgumentError, match="do not multiply"):
        lib.matmul(a, be.rand(64, 128, 2))
    with pytest.raises(runtime.MatmulArgumentError, match="2-D"):
        lib.matmul(a.reshape(2, 64, 128), b)
    with pytest.raises(runtime.MatmulArgumentError, match="shape"):
        lib.matmul(a, b, out=be.rand(64, 64, 3))
    if be.name == "torch":
        with pytest.raises(runtime.MatmulArgumentError, match="not a GPU"):
            lib.matmul(a.cpu(), b.cpu())


def test_mixed_libraries_are_refused(export_dir):
    cp = pytest.importorskip("cupy")
    torch = pytest.importorskip("torch")
    lib = runtime.load(export_dir)
    a = cp.zeros((128, 128), cp.float16)
    with pytest.raises(runtime.MatmulArgumentError, match="same library|different array libraries"):
        lib.matmul(a, torch.zeros((128, 128), dtype=torch.float16, device="cuda"))


def test_threads_and_streams(export_dir):
    """Threads on their own streams, lazy builds racing: every result right."""
    cp = pytest.importorskip("cupy")
    lib = runtime.load(export_dir, prefer_prebuilt=False, strict=True)
    shapes = [tuple(e["shape"]) for e in lib.manifest["kernels"]] + MISSING[:2]
    errors = []

    def work(i):
        try:
            with cp.cuda.Stream(non_blocking=True) as s:
                for j, (m, n, k) in enumerate(shapes):
                    rs = cp.random.RandomState(100 * i + j)
                    a = rs.standard_normal((m, k), dtype=cp.float32).astype(cp.float16)
                    b = rs.standard_normal((k, n), dtype=cp.float32).astype(cp.float16)
                    c = lib.matmul(a, b)
                    ref = cp.matmul(a, b)
                    s.synchronize()
                    e = float(cp.linalg.norm(c.astype(cp.float32) - ref.astype(cp.float32))
                              / cp.linalg.norm(ref.astype(cp.float32)))
                    if e > 5e-3:
                        errors.append(((m, n, k), e))
        except Exception as ex:  # noqa: BLE001
            errors.append(ex)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors


def test_c_dispatcher_agrees_with_cublas(export_dir):
    """The built library's l2hgemm itself, on exported, fallback and missing shapes."""
    import ctypes

    cp = pytest.importorskip("cupy")
    so = export_dir / "lib" / "libl2hgemm.so"
    lib = ctypes.CDLL(str(so))
    fn = runtime._argtypes(lib.l2hgemm)
    man = runtime.load(export_dir).manifest
    for i, (m, n, k) in enumerate([tuple(e["shape"]) for e in man["kernels"]] + MISSING):
        rs = cp.random.RandomState(i)
        a = rs.standard_normal((m, k), dtype=cp.float32).astype(cp.float16)
        b = rs.standard_normal((k, n), dtype=cp.float32).astype(cp.float16)
        c = cp.full((m, n), cp.nan, dtype=cp.float16)
        s = cp.cuda.get_current_stream()
        assert fn(a.data.ptr, b.data.ptr, c.data.ptr, m, n, k, s.ptr) == 0
        ref = cp.matmul(a, b)
        s.synchronize()
        e = float(cp.linalg.norm(c.astype(cp.float32) - ref.astype(cp.float32)) / cp.linalg.norm(ref.astype(cp.float32)))
        assert e < 5e-3, ((m, n, k), e)


# --------------------------------------------------------------------------- the cuBLASLt fallback

FALLBACK_SHAPES = [(96, 80, 48), (100, 60, 90), (333, 257, 129), (2048, 1024, 512)]


def _cdll(export_dir):
    import ctypes

    lib = ctypes.CDLL(str(export_dir / "lib" / "libl2hgemm.so"))
    for name in ("l2hgemm_fallback", "l2hgemm_cublas"):
        runtime._argtypes(getattr(lib, name))
    return lib


@pytest.mark.parametrize("prebuilt", [True, False], ids=["prebuilt", "fallback-only-lib"])
def test_fallback_matmul_agrees_on_missing_shapes(export_dir, be, prebuilt):
    """Shapes without a kernel go through the C fallback (not the array library) and agree with it."""
    lib = runtime.load(export_dir, prefer_prebuilt=prebuilt, strict=True)
    fallback_shapes = [tuple(e["shape"]) for e in lib.manifest["kernels"] if e["fallback"]]
    for i, (m, n, k) in enumerate(FALLBACK_SHAPES + fallback_shapes):
        assert lib.route(m, n, k).kind == lib.fallback_kind != "array"
        a, b = be.rand(m, k, 10 * i), be.rand(k, n, 10 * i + 1)
        ref = be.ref(a, b)
        for _ in range(2):  # the first call autotunes, the second uses the cached winner
            c = lib.matmul(a, b)
            be.sync()
            assert be.err(c, ref) < 5e-3, (be.name, (m, n, k))
    assert lib._fallbacks and not lib._fallback_broken
    # pointers that are not 256-byte aligned (a view one row in) take their own plan
    m, n, k = 333, 257, 129
    big, b = be.rand(m + 1, k, 7), be.rand(k, n, 8)
    a = big[1:]
    c = lib.matmul(a, b)
    be.sync()
    assert be.err(c, be.ref(a, b)) < 5e-3


def test_c_fallback_twice_matches_cublas(export_dir):
    """l2hgemm_fallback run twice = cublasGemmEx within fp16 tolerance, and the same bits both times."""
    cp = pytest.importorskip("cupy")
    lib = _cdll(export_dir)
    autotune = lib.l2hgemm_fallback_mode() == 0
    s = cp.cuda.get_current_stream()
    odd = [(1, 1, 1), (17, 3, 2049)]  # cuBLASLt may have nothing for these: cublasGemmEx then (tuned -1)
    for i, (m, n, k) in enumerate(FALLBACK_SHAPES + odd):
        rs = cp.random.RandomState(100 + i)
        a = rs.standard_normal((m, k), dtype=cp.float32).astype(cp.float16)
        b = rs.standard_normal((k, n), dtype=cp.float32).astype(cp.float16)
        outs = []
        for fn in (lib.l2hgemm_fallback, lib.l2hgemm_fallback, lib.l2hgemm_cublas):
            c = cp.full((m, n), cp.nan, dtype=cp.float16)
            assert fn(a.data.ptr, b.data.ptr, c.data.ptr, m, n, k, s.ptr) == 0
            outs.append(c)
        s.synchronize()
        first, second, cublas = (x.astype(cp.float32) for x in outs)
        norm = float(cp.linalg.norm(cublas))
        assert float(cp.linalg.norm(first - cublas)) / norm < 5e-3, (m, n, k)
        assert bool(cp.array_equal(first, second)), (m, n, k)  # the cached winner is what ran first
        tuned = lib.l2hgemm_fallback_tuned(m, n, k)
        if (m, n, k) in odd:
            assert tuned != 0 if autotune else tuned <= 0, ((m, n, k), tuned)
        else:
            assert (tuned > 0) if autotune else (tuned <= 0), ((m, n, k), tuned)


def test_c_fallback_under_graph_capture(export_dir):
    """A captured call does not autotune (events would be illegal) yet computes the right thing."""
    cp = pytest.importorskip("cupy")
    lib = _cdll(export_dir)
    m, n, k = 200, 136, 72  # a shape no other test uses: not tuned yet in this process
    rs = cp.random.RandomState(5)
    a = rs.standard_normal((m, k), dtype=cp.float32).astype(cp.float16)
    b = rs.standard_normal((k, n), dtype=cp.float32).astype(cp.float16)
    ref = cp.matmul(a, b).astype(cp.float32)
    s = cp.cuda.Stream(non_blocking=True)

    def captured() -> float:
        c = cp.full((m, n), cp.nan, dtype=cp.float16)
        s.synchronize()
        s.begin_capture()
        try:
            rc = lib.l2hgemm_fallback(a.data.ptr, b.data.ptr, c.data.ptr, m, n, k, s.ptr)
        finally:
            graph = s.end_capture()
        assert rc == 0
        graph.launch(s)
        s.synchronize()
        return float(cp.linalg.norm(c.astype(cp.float32) - ref) / cp.linalg.norm(ref))

    assert captured() < 5e-3
    assert lib.l2hgemm_fallback_tuned(m, n, k) == 0  # nothing was timed during the capture
    c = cp.empty((m, n), dtype=cp.float16)
    assert lib.l2hgemm_fallback(a.data.ptr, b.data.ptr, c.data.ptr, m, n, k, s.ptr) == 0
    s.synchronize()
    if lib.l2hgemm_fallback_mode() == 0:
        assert lib.l2hgemm_fallback_tuned(m, n, k) > 0  # tuned on the first uncaptured call
    assert captured() < 5e-3  # and the cached winner is what a later capture records


_MODE_PROBE = """
import ctypes, sys
import cupy as cp
from tests.fixtures.export import make_session as fx
lib = ctypes.CDLL(sys.argv[1])
fn = lib.l2hgemm_fallback
fn.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 3 + [ctypes.c_void_p]
m, n, k = 384, 200, 136
rs = cp.random.RandomState(3)
a = rs.standard_normal((m, k), dtype=cp.float32).astype(cp.float16)
b = rs.standard_normal((k, n), dtype=cp.float32).astype(cp.float16)
c = cp.empty((m, n), dtype=cp.float16)
s = cp.cuda.get_current_stream()
rc = fn(a.data.ptr, b.data.ptr, c.data.ptr, m, n, k, s.ptr)
ref = cp.matmul(a, b).astype(cp.float32)
s.synchronize()
err = float(cp.linalg.norm(c.astype(cp.float32) - ref) / cp.linalg.norm(ref))
print(rc, lib.l2hgemm_fallback_mode(), lib.l2hgemm_fallback_tuned(m, n, k), err)
"""


@pytest.mark.parametrize("value,code", [("cublaslt-autotune", 0), ("cublaslt-heuristic", 1), ("cublas", 2)])
def test_each_fallback_mode_computes_the_product(export_dir, value, code):
    """L2HGEMM_FALLBACK is read by the library in a fresh process: every path is right, only autotune times."""
    import os
    import subprocess
    import sys

    pytest.importorskip("cupy")
    env = dict(os.environ, L2HGEMM_FALLBACK=value)
    proc = subprocess.run([sys.executable, "-c", _MODE_PROBE, str(export_dir / "lib" / "libl2hgemm.so")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rc, mode, tuned, err = proc.stdout.split()
    assert (int(rc), int(mode)) == (0, code)
    assert (int(tuned) > 0) == (code == 0)
    assert float(err) < 5e-3


# --------------------------------------------------------------------------- one workspace, many streams

@pytest.fixture(scope="module")
def shared_ws_export(tmp_path_factory) -> Path:
    from harness.gpuinfo import require_gpu

    root = tmp_path_factory.mktemp("ws")
    return export_session(fx.make_shared_workspace_session(root / "run-ws"), root / "exp", build=True,
                          arch=require_gpu().arch).out


def _race(call, calls_per_thread: int = 12, threads: int = 4) -> list:
    """Threads on their own non-blocking streams call one shared-workspace kernel with their own
    operands; every result must be its own product (not a mix of another call's partial sums)."""
    cp = pytest.importorskip("cupy")
    m, n, k = fx.SHARED_WS_SHAPE
    errors: list = []
    start = threading.Barrier(threads)

    def work(i: int) -> None:
        try:
            with cp.cuda.Stream(non_blocking=True) as s:
                rs = cp.random.RandomState(1000 + i)
                ops = [(rs.standard_normal((m, k), dtype=cp.float32).astype(cp.float16),
                        rs.standard_normal((k, n), dtype=cp.float32).astype(cp.float16)) for _ in range(3)]
                refs = [cp.matmul(a, b) for a, b in ops]
                outs = []
                s.synchronize()
                start.wait()
                for j in range(calls_per_thread):
                    a, b = ops[j % 3]
                    outs.append((j % 3, call(a, b, s)))
                s.synchronize()
                for which, c in outs:
                    r32 = refs[which].astype(cp.float32)
                    e = float(cp.linalg.norm(c.astype(cp.float32) - r32) / cp.linalg.norm(r32))
                    if not e < 5e-3:
                        errors.append((i, which, e))
        except Exception as ex:  # noqa: BLE001
            errors.append(ex)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return errors


def test_c_dispatcher_orders_calls_of_one_kernel_across_streams(shared_ws_export):
    """l2hgemm on four streams at once, one kernel with one workspace: every result exact."""
    import ctypes

    cp = pytest.importorskip("cupy")
    fn = runtime._argtypes(ctypes.CDLL(str(shared_ws_export / "lib" / "libl2hgemm.so")).l2hgemm)
    m, n, k = fx.SHARED_WS_SHAPE

    def call(a, b, s):
        c = cp.full((m, n), cp.nan, dtype=cp.float16)
        assert fn(a.data.ptr, b.data.ptr, c.data.ptr, m, n, k, s.ptr) == 0
        return c

    assert not _race(call)


@pytest.mark.parametrize("prebuilt", [True, False], ids=["prebuilt", "lazy-build"])
def test_runtime_orders_calls_of_one_kernel_across_streams(shared_ws_export, prebuilt):
    """lib.matmul on four streams at once, one kernel with one workspace: every result exact."""
    lib = runtime.load(shared_ws_export, prefer_prebuilt=prebuilt, strict=True)
    assert lib.route(*fx.SHARED_WS_SHAPE).kind == "kernel"
    assert not _race(lambda a, b, s: lib.matmul(a, b))
