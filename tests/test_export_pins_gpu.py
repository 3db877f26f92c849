"""On a GPU (``pytest -m gpu``): the fallback's pins run the algorithm the harness measured.

An export whose manifest pins, per shape, the library a session measured fastest: the built
library's ``l2hgemm_fallback_pinned`` must run exactly that cuBLASLt algorithm (bit-identical to
the harness's cuBLAS shim running the same heuristic index), run cublasGemmEx where the pin says
so, apply a pin inside a graph capture (it only asks the heuristic), and tune as before where a
pin no longer names the same algorithm (another cuBLASLt version, another list length).
"""

from __future__ import annotations

import ctypes
import json

import pytest

from l2tui.export import export_session
from l2tui.export.cdispatch import build_library
from l2tui.export.manifest import MANIFEST_NAME, validate
from tests.fixtures.export import make_session as fx

pytestmark = pytest.mark.gpu

#: l2hgemm_fallback_choice's codes
PINNED_LT, TUNED_LT, PINNED_GEMMEX, TUNED_GEMMEX = 1, 2, 3, 4
REQUESTED = 100  # what the harness asks the heuristic for (harness.baselines.AUTOTUNE_MAX_CANDIDATES)


def _fn(lib: ctypes.CDLL, name: str):
    fn = getattr(lib, name)
    fn.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 3 + [ctypes.c_void_p]
    return fn


@pytest.fixture(scope="module")
def shim():
    pytest.importorskip("cupy")
    from harness.baselines import AUTOTUNE_MAX_CANDIDATES, build_shim
    from harness.gpuinfo import require_gpu

    assert AUTOTUNE_MAX_CANDIDATES == REQUESTED
    res = build_shim(require_gpu().arch)
    lib = ctypes.CDLL(str(res.so_path))
    return lib


@pytest.fixture(scope="module")
def pinned(tmp_path_factory, shim):
    """The fixture session's export with a pin on every shape, rebuilt for this GPU."""
    from harness.gpuinfo import require_gpu

    arch = require_gpu().arch
    root = tmp_path_factory.mktemp("pins")
    out = export_session(fx.make_session(root / "run-1"), root / "exp").out
    man = json.loads((out / MANIFEST_NAME).read_text())
    version = shim.l2_lt_version()
    assert version > 0
    shapes = {}
    for e in man["kernels"]:
        m, n, k = e["shape"]
        count = shim.l2_lt_plan(m, n, k, 0, REQUESTED)
        assert count > 0, e["shape"]
        shapes[(m, n, k)] = count
    (s_idx, s_gemmex, s_version, s_count, s_capture) = sorted(shapes)[:5]
    lt = {"library": "cublaslt", "measured": "cublaslt_autotune", "requested": REQUESTED,
          "cublaslt_version": version}
    pins = {
        s_idx: dict(lt, index=min(1, shapes[s_idx] - 1), count=shapes[s_idx]),
        s_gemmex: {"library": "cublas", "measured": "cublas"},
        s_version: dict(lt, index=0, count=shapes[s_version], cublaslt_version=version + 1),
        s_count: dict(lt, index=0, count=shapes[s_count] + 1),
        s_capture: dict(lt, index=shapes[s_capture] - 1, count=shapes[s_capture]),
    }
    for e in man["kernels"]:
        e["fallback_pin"] = pins[tuple(e["shape"])]
    validate(man, out)
    (out / MANIFEST_NAME).write_text(json.dumps(man, indent=2))
    so = build_library(out, man, arch=arch).so_path
    return ctypes.CDLL(str(so)), pins, {"idx": s_idx, "gemmex": s_gemmex, "version": s_version,
                                        "count": s_count, "capture": s_capture}


def _operands(cp, m, n, k, seed):
    rs = cp.random.RandomState(seed)
    a = rs.standard_normal((m, k), dtype=cp.float32).astype(cp.float16)
    b = rs.standard_normal((k, n), dtype=cp.float32).astype(cp.float16)
    return a, b


def _run_pinned(cp, lib, shape, seed, stream=None):
    """One ``l2hgemm_fallback_pinned`` call on random operands: (a, b, c), synchronised."""
    m, n, k = shape
    a, b = _operands(cp, m, n, k, seed)
    s = stream or cp.cuda.get_current_stream()
    c = cp.full((m, n), cp.nan, dtype=cp.float16)
    assert _fn(lib, "l2hgemm_fallback_pinned")(a.data.ptr, b.data.ptr, c.data.ptr, m, n, k, s.ptr) == 0
    s.synchronize()
    return a, b, c


def _rel_err(cp, a, b, c) -> float:
    ref = cp.matmul(a, b).astype(cp.float32)
    return float(cp.linalg.norm(c.astype(cp.float32) - ref) / cp.linalg.norm(ref))


def _choice(lib, shape) -> tuple[int, int]:
    index = ctypes.c_int(-7)
    how = lib.l2hgemm_fallback_choice(*shape, ctypes.byref(index))
    return how, index.value


def test_a_pin_runs_the_harness_algorithm_bit_for_bit(pinned, shim):
    cp = pytest.importorskip("cupy")
    lib, pins, which = pinned
    m, n, k = shape = which["idx"]
    assert _choice(lib, shape) == (0, -1)   # not called yet
    a, b, mine = _run_pinned(cp, lib, shape, 1)
    # the shim's autotune slot running the same heuristic index
    s = cp.cuda.get_current_stream()
    assert shim.l2_lt_select(m, n, k, 0, 1, pins[shape]["index"]) == 0
    theirs = cp.full((m, n), cp.nan, dtype=cp.float16)
    assert _fn(shim, "l2_hgemm_lt_auto")(a.data.ptr, b.data.ptr, theirs.data.ptr, m, n, k, s.ptr) == 0
    s.synchronize()
    assert _choice(lib, shape) == (PINNED_LT, pins[shape]["index"])
    assert lib.l2hgemm_fallback_tuned(m, n, k) == 0   # nothing was timed
    assert bool(cp.array_equal(mine, theirs))
    assert _rel_err(cp, a, b, mine) < 5e-3


def test_a_gemmex_pin_runs_cublas(pinned):
    cp = pytest.importorskip("cupy")
    lib, _pins, which = pinned
    m, n, k = shape = which["gemmex"]
    a, b, mine = _run_pinned(cp, lib, shape, 2)
    s = cp.cuda.get_current_stream()
    cublas = cp.full((m, n), cp.nan, dtype=cp.float16)
    assert _fn(lib, "l2hgemm_cublas")(a.data.ptr, b.data.ptr, cublas.data.ptr, m, n, k, s.ptr) == 0
    s.synchronize()
    assert _choice(lib, shape) == (PINNED_GEMMEX, -1)
    assert bool(cp.array_equal(mine, cublas))


@pytest.mark.parametrize("stale", ["version", "count"])
def test_a_stale_pin_is_tuned_instead(pinned, stale):
    cp = pytest.importorskip("cupy")
    lib, _pins, which = pinned
    shape = which[stale]
    a, b, c = _run_pinned(cp, lib, shape, 3)
    how, _ = _choice(lib, shape)
    assert how in (TUNED_LT, TUNED_GEMMEX), how
    assert lib.l2hgemm_fallback_tuned(*shape) > 0
    assert _rel_err(cp, a, b, c) < 5e-3


def test_a_pin_applies_inside_a_graph_capture(pinned):
    cp = pytest.importorskip("cupy")
    lib, pins, which = pinned
    m, n, k = shape = which["capture"]
    a, b = _operands(cp, m, n, k, 4)
    s = cp.cuda.Stream(non_blocking=True)
    # the stream's workspace comes with its first call outside a capture (allocating is illegal
    # inside one, and a pinned algorithm may need it): one call of a shape the export lacks
    x, y = _operands(cp, 96, 80, 48, 5)
    z = cp.empty((96, 80), dtype=cp.float16)
    assert _fn(lib, "l2hgemm_fallback")(x.data.ptr, y.data.ptr, z.data.ptr, 96, 80, 48, s.ptr) == 0
    c = cp.full((m, n), cp.nan, dtype=cp.float16)
    s.synchronize()
    s.begin_capture()
    try:
        rc = _fn(lib, "l2hgemm_fallback_pinned")(a.data.ptr, b.data.ptr, c.data.ptr, m, n, k, s.ptr)
    finally:
        graph = s.end_capture()
    assert rc == 0
    assert _choice(lib, shape) == (PINNED_LT, pins[shape]["index"])
    graph.launch(s)
    s.synchronize()
    assert _rel_err(cp, a, b, c) < 5e-3
