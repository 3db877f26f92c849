"""l2tui.export.runtime without a GPU: routing, manifest/hash checks, lazy thread-safe builds with real nvcc."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from l2tui.export import runtime
from l2tui.export import export_session
from l2tui.export.manifest import ManifestError
from tests.fixtures.export import make_session as fx


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("rt")
    return export_session(fx.make_session(root / "run-1"), root / "exp").out


@pytest.fixture(autouse=True)
def default_fallback(monkeypatch):
    """Tests see the default fallback whatever the caller's environment says."""
    monkeypatch.delenv("L2HGEMM_FALLBACK", raising=False)


def test_routes_follow_the_manifest(export_dir):
    lib = runtime.load(export_dir)
    assert lib.kernel_shapes == sorted(s for s, v in fx.EXPECTED.items() if v[2] is None)
    for s, (_, _, fallback) in fx.EXPECTED.items():
        r = lib.route(*s)
        assert r.kind == ("cublaslt" if fallback else "kernel") and (r.shape is None) == bool(fallback)
    assert lib.route(96, 80, 48).kind == "cublaslt"  # not exported: the autotuned cuBLASLt fallback
    # pad: the smallest exported shape that contains (M, N, K); never into a fallback shape
    assert lib.route(100, 60, 90, pad="nearest-larger") == runtime.Route("pad", (192, 64, 96), "zero-padded into 192x64x96")
    assert lib.route(60, 60, 60, pad="nearest-larger").shape == (192, 64, 96)  # 64^3 is a fallback shape
    assert lib.route(64, 64, 64, pad="nearest-larger").kind == "cublaslt"     # exact fallback stays the fallback
    assert lib.route(4096, 1, 1, pad="nearest-larger").kind == "cublaslt"     # nothing large enough
    padded = runtime.load(export_dir, pad="nearest-larger")
    assert padded.route(100, 60, 90).kind == "pad" and lib.route(100, 60, 90).kind == "cublaslt"
    with pytest.raises(runtime.UserError, match="pad policy"):
        runtime.load(export_dir, pad="nearest")


def test_load_refuses_changed_or_missing_files(export_dir, tmp_path):
    import shutil

    copy = tmp_path / "exp"
    shutil.copytree(export_dir, copy)
    f = next((copy / "kernels").glob("*.cu"))
    f.write_text(f.read_text() + "\n// edited\n")
    with pytest.raises(runtime.KernelLoadError, match="changed after export"):
        runtime.load(copy)
    with pytest.raises(ManifestError, match="no manifest.json"):
        runtime.load(tmp_path)


def test_matmul_rejects_non_gpu_arrays(export_dir):
    np = pytest.importorskip("numpy")
    lib = runtime.load(export_dir)
    with pytest.raises(runtime.MatmulArgumentError, match="cupy arrays or torch tensors"):
        lib.matmul(np.zeros((4, 4), np.float16), np.zeros((4, 4), np.float16))


@pytest.mark.compile
def test_lazy_build_is_once_and_thread_safe(export_dir, monkeypatch):
    """Eight threads ask for the same kernel at once: one nvcc build, one ctypes function for all."""
    lib = runtime.load(export_dir, prefer_prebuilt=False)
    calls = []
    real = lib._build

    def counting(e, arch):
        calls.append(e["name"])
        return real(e, arch)

    monkeypatch.setattr(lib, "_build", counting)
    got, errors = [], []
    barrier = threading.Barrier(8)

    def worker():
        try:
            barrier.wait()
            got.append(lib.kernel((128, 128, 128), "sm_90a"))
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert calls == ["128_128_128"]
    assert len({id(f) for f in got}) == 1
    assert got[0].restype is not None and len(got[0].argtypes) == 7
    # the cuBLAS-shim kernel routes to the fallback: not shipped, so there is nothing to build
    with pytest.raises(runtime.KernelLoadError, match="routes to the library fallback"):
        lib.kernel((512, 256, 128), "sm_90a")


@pytest.mark.compile
def test_prebuilt_library_is_used_when_its_arch_matches(tmp_path_factory):
    root = tmp_path_factory.mktemp("rtb")
    out = export_session(fx.make_session(root / "run-1"), root / "exp", build=True, arch="sm_90a").out
    lib = runtime.load(out)
    fn = lib.kernel((128, 128, 128), "sm_90a")
    assert lib._prebuilt is not None and fn.__name__ == "l2_hgemm_128_128_128"
    # the fallback comes from it too, with the export's pins (what l2hgemm runs on fallback routes)
    assert lib.fallback_fn("sm_90a") is lib._prebuilt.l2hgemm_fallback_pinned
    # another arch: not the prebuilt one (it would be built lazily instead)
    assert lib._load_prebuilt("sm_80") is None


@pytest.mark.parametrize("value,mode,kind", [
    ("", "cublaslt-autotune", "cublaslt"),
    ("cublaslt-autotune", "cublaslt-autotune", "cublaslt"),
    ("cublaslt-heuristic", "cublaslt-heuristic", "cublaslt"),
    ("cublas", "cublas", "cublas"),
])
def test_fallback_env_sets_the_fallback_route(export_dir, monkeypatch, value, mode, kind):
    monkeypatch.setenv("L2HGEMM_FALLBACK", value)
    lib = runtime.load(export_dir)
    assert lib.fallback_mode == mode and lib.fallback_kind == kind
    assert lib.route(96, 80, 48).kind == kind and lib.route(64, 64, 64).kind == kind
    assert lib.route(128, 128, 128).kind == "kernel"
    monkeypatch.setenv("L2HGEMM_FALLBACK", "cublas" if mode != "cublas" else "")
    assert lib.route(96, 80, 48).kind == kind  # read once, at load()


def test_unknown_fallback_env_warns_and_uses_the_default(export_dir, monkeypatch):
    monkeypatch.setenv("L2HGEMM_FALLBACK", "fastest-please")
    with pytest.warns(RuntimeWarning, match="L2HGEMM_FALLBACK=fastest-please is not one of"):
        lib = runtime.load(export_dir)
    assert lib.fallback_mode == "cublaslt-autotune"


@pytest.mark.compile
def test_fallback_only_library_builds_when_there_is_no_prebuilt_one(export_dir):
    """No --build here: the fallback comes from a small library built from the same generated C (real nvcc)."""
    from l2tui.export.cdispatch import exported_symbols

    lib = runtime.load(export_dir)
    assert lib.manifest["library"] is None
    fn = lib.fallback_fn("sm_90a")
    assert fn is not None and fn.__name__ == "l2hgemm_fallback"
    assert fn.restype is not None and len(fn.argtypes) == 7
    assert lib.fallback_fn("sm_90a") is fn  # loaded once
    from harness.build import build
    from l2tui.export.cdispatch import cublas_flags, render_fallback_library

    res = build(render_fallback_library(), arch="sm_90a", flags=cublas_flags(), name="export-fallback", trusted=True)
    assert res.ok and res.cached  # the runtime's build is in the harness cache
    syms = exported_symbols(res.so_path)
    assert {"l2_hgemm", "l2hgemm_fallback", "l2hgemm_cublas", "l2hgemm_fallback_mode"} <= syms


@pytest.mark.compile
def test_fallback_only_library_is_built_for_an_old_prebuilt_library(export_dir, monkeypatch):
    """A library built before the fallback existed has no l2hgemm_fallback: the runtime builds its own."""
    import types

    lib = runtime.load(export_dir)
    monkeypatch.setattr(lib, "_load_prebuilt", lambda arch: types.SimpleNamespace())
    assert lib.fallback_fn("sm_90a").__name__ == "l2hgemm_fallback"


def test_unavailable_fallback_warns_once_and_routes_to_the_array_library(export_dir, monkeypatch):
    from harness.errors import HarnessError

    lib = runtime.load(export_dir)
    assert lib.route(96, 80, 48).kind == "cublaslt"
    calls = []

    def broken(arch):
        calls.append(arch)
        raise HarnessError("cuBLASLt not found next to cuBLAS in /nowhere: install nvidia-cublas")

    monkeypatch.setattr(lib, "_load_fallback", broken)
    with pytest.warns(RuntimeWarning, match="fallback is unavailable.*array library's matmul"):
        assert lib.fallback_fn("sm_90a") is None
    assert lib.fallback_fn("sm_90a") is None and calls == ["sm_90a"]  # not retried, not warned again
    assert lib.route(96, 80, 48).kind == "array" and lib.route(64, 64, 64).kind == "array"
    assert lib.route(128, 128, 128).kind == "kernel"
    strict = runtime.load(export_dir, strict=True)
    monkeypatch.setattr(strict, "_load_fallback", broken)
    with pytest.raises(HarnessError, match="cuBLASLt not found"):
        strict.fallback_fn("sm_90a")


class _FakeBackend:
    """What :meth:`ExportedLibrary._ordered` asks of an array library, recorded (no GPU)."""

    name = "fake"

    def __init__(self):
        self.log: list[tuple] = []
        self.capture = False
        self.events = 0

    def capturing(self, dev):
        return self.capture

    def new_event(self):
        self.events += 1
        return f"ev{self.events}"

    def record(self, ev):
        self.log.append(("record", ev))

    def wait(self, ev):
        self.log.append(("wait", ev))

    def event_handle(self, ev):
        return None  # no raw handle: every record and wait goes through the library


class _FakeDriver:
    """libcuda's three ordering calls, recorded; ``refuse`` makes them fail as a driver would."""

    def __init__(self, log):
        self.log = log
        self.capture: bool | None = False
        self.refuse = False

    def capturing(self, stream):
        return self.capture

    def record(self, event, stream):
        self.log.append(("drv-record", event, stream))
        return not self.refuse

    def wait(self, stream, event):
        self.log.append(("drv-wait", stream, event))
        return not self.refuse


@pytest.fixture
def no_driver(monkeypatch):
    monkeypatch.setattr(runtime, "_DRIVER", [None])


def test_calls_of_one_kernel_are_ordered_across_streams(export_dir, no_driver):
    """A call on another stream waits for the kernel's previous call; one on the same stream does
    not; cudaStreamPerThread always does; a capturing stream neither waits nor records; each
    kernel (and device) has its own order."""
    lib = runtime.load(export_dir)
    be = _FakeBackend()

    def call(name, stream, dev=0):
        with lib._ordered(be, dev, name, "sm_90a", stream):
            be.log.append(("call", name, stream))

    call("k1", 100)
    assert be.log == [("call", "k1", 100), ("record", "ev1")]  # nothing to wait for yet
    be.log.clear()
    call("k1", 100)
    assert be.log == [("call", "k1", 100), ("record", "ev1")]  # same stream: in order already
    be.log.clear()
    call("k1", 200)
    assert be.log == [("wait", "ev1"), ("call", "k1", 200), ("record", "ev1")]
    be.log.clear()
    call("k2", 300)  # another kernel: its own order
    call("k1", 200, dev=1)  # another device: its own order
    assert be.log == [("call", "k2", 300), ("record", "ev2"), ("call", "k1", 200), ("record", "ev3")]
    be.log.clear()
    call("k1", runtime._PER_THREAD_STREAM)
    call("k1", runtime._PER_THREAD_STREAM)
    assert [x[0] for x in be.log] == ["wait", "call", "record", "wait", "call", "record"]
    be.log.clear()
    be.capture = True
    call("k1", 400)
    assert be.log == [("call", "k1", 400)]


def test_ordering_goes_through_the_driver_once_the_event_exists(export_dir, monkeypatch):
    """The first call records through the array library (which creates the event); later records
    and waits go to libcuda with the raw handle; the driver's capture status wins over the
    library's, and where the driver refuses a call the library's path runs instead."""
    lib = runtime.load(export_dir)
    be = _FakeBackend()
    be.event_handle = lambda ev: 0xE1
    drv = _FakeDriver(be.log)
    monkeypatch.setattr(runtime, "_DRIVER", [drv])

    def call(stream):
        with lib._ordered(be, 0, "k1", "sm_90a", stream):
            be.log.append(("call", stream))

    call(100)
    call(100)
    call(200)
    assert be.log == [("call", 100), ("record", "ev1"),
                      ("call", 100), ("drv-record", 0xE1, 100),
                      ("drv-wait", 200, 0xE1), ("call", 200), ("drv-record", 0xE1, 200)]
    be.log.clear()
    drv.refuse = True
    call(300)
    assert be.log == [("drv-wait", 300, 0xE1), ("wait", "ev1"), ("call", 300),
                      ("drv-record", 0xE1, 300), ("record", "ev1")]
    be.log.clear()
    drv.capture, be.capture = True, False  # the driver sees the capture: nothing to order
    call(400)
    assert be.log == [("call", 400)]
    be.log.clear()
    drv.capture, be.capture = None, True  # the driver cannot tell: the library's answer counts
    call(500)
    assert be.log == [("call", 500)]


def test_an_ordered_call_holds_the_kernel_lock(export_dir, no_driver):
    """Two threads calling one kernel run their calls one after the other."""
    lib = runtime.load(export_dir)
    be = _FakeBackend()
    inside, most = [0], [0]
    guard = threading.Lock()

    def work(stream):
        for _ in range(200):
            with lib._ordered(be, 0, "k1", "sm_90a", stream):
                with guard:
                    inside[0] += 1
                    most[0] = max(most[0], inside[0])
                with guard:
                    inside[0] -= 1

    ts = [threading.Thread(target=work, args=(s,)) for s in (1, 3, 5, 7)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert most[0] == 1
    assert be.events == 1 and sum(1 for x in be.log if x[0] == "record") == 800
