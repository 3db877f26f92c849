"""Call exported kernels from Python: ``lib = load(DIR); lib.matmul(a, b)``.

``DIR`` is a folder written by ``l2tui export``.  ``matmul`` takes cupy arrays
or torch tensors (2-D, row-major contiguous, on one GPU) of the export's element
type (``lib.dtype``, the manifest's ``dtype``): fp16 is ``torch.float16`` /
``cupy.float16``; bf16 is ``torch.bfloat16``, or for cupy (which has no bfloat16
arithmetic) a ``uint16`` array holding the bf16 bit patterns, e.g.
``cupy.asarray(x_ml.view(numpy.uint16))`` from an ``ml_dtypes.bfloat16`` array.
An array of the other half type is refused in one line (bf16 data read as fp16
gives numbers, all wrong).  ``matmul`` then:

* runs the exported kernel for the shape when there is one;
* else, with ``pad="nearest-larger"``, zero-pads into the smallest exported
  shape that contains it (exact: zero rows/columns add nothing to the product)
  and copies the result back;
* else, or where the manifest says a library was faster on that shape
  (``"fallback"``), or when a kernel reports the shape unsupported, runs the
  export's C fallback ``l2hgemm_fallback``: cuBLASLt (fp32 compute) with the
  fastest of its heuristic algorithms, timed on the first call of each shape
  (``L2HGEMM_FALLBACK`` picks a simpler path).  It comes from the prebuilt
  library, or from a small fallback-only library built from the same
  generated C on first use.  Only when that cannot be built or loaded does
  ``matmul`` warn once and call the array library's own matmul.

Kernels are built lazily on first use with :func:`harness.build.build` (its
content-addressed cache makes later processes fast), or taken from the
prebuilt ``lib/libl2hgemm.so`` when ``export --build`` made one for this GPU's
architecture.  Building and loading happen under locks, so threads may call
``matmul`` concurrently.  Calls of one exported kernel never overlap, as in the
C dispatcher: a kernel may keep its launch arguments and workspace once per
process (CUTLASS stream-K / split-K do), so a per-kernel lock orders the host
side and an event recorded after each call makes a call on another stream wait
for it on the GPU (not inside a CUDA-graph capture, where the caller orders
graph launches); those per-call event calls go straight to libcuda through ctypes,
since the libraries' own wrappers cost tens of microseconds each.  Work goes on
the array library's *current* stream.  cupy and torch are imported only inside
functions: importing this module needs neither.
"""

from __future__ import annotations

import ctypes
import hashlib
import threading
from contextlib import contextmanager
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterator, Protocol, TypeAlias

from harness.errors import HarnessError
from l2tui.errors import UserError
from l2tui.export.cdispatch import FALLBACK_SYMBOL, PINNED_FALLBACK_SYMBOL, fallback_mode
from l2tui.export.manifest import ENTRY_POINTS, manifest_dtype
from l2tui.export.manifest import load as load_manifest

PAD_POLICIES = (None, "nearest-larger")

#: a cupy array or a torch tensor on the GPU: neither library ships types, so it is untyped here
Array: TypeAlias = Any
#: a cupy or torch CUDA event (untyped for the same reason)
DeviceEvent: TypeAlias = Any
#: an exported kernel or the fallback through ctypes: (A, B, C, M, N, K, stream) -> status
KernelFn: TypeAlias = Callable[[int, int, int, int, int, int, int], int]
Shape3: TypeAlias = tuple[int, int, int]


class MatmulArgumentError(UserError, ValueError):
    """Arrays ``matmul`` cannot take (dtype, rank, layout, device, shapes)."""


class KernelLoadError(UserError):
    """An exported kernel that cannot be built or loaded here."""


@dataclass(frozen=True)
class Route:
    """How one (M, N, K) is computed.

    ``kind``: "kernel" (the exported kernel), "pad" (a larger exported kernel on
    zero-padded copies), or the fallback: "cublaslt" (cuBLASLt, autotuned or
    heuristic per ``L2HGEMM_FALLBACK``), "cublas" (``L2HGEMM_FALLBACK=cublas``)
    or "array" (the array library's matmul: the C fallback is unavailable here).
    """

    kind: str
    shape: tuple[int, int, int] | None  # the exported shape that runs (kernel / pad)
    reason: str


def _argtypes(fn: "ctypes._NamedFuncPointer") -> KernelFn:
    """``fn`` with the kernel ABI's C signature, so ctypes passes pointers and ints as C does."""
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                   ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    fn.restype = ctypes.c_int
    return fn  # type: ignore[return-value]  # ctypes returns an int for restype c_int


# --------------------------------------------------------------------------- array backends


class ArrayBackend(Protocol):
    """What the library needs of an array library (cupy or torch): checks, pointers, streams,
    allocation and event ordering, each in that library's own terms."""

    name: str

    def check(self, x: object, what: str, dtype: str) -> int: ...
    def ptr(self, x: Array) -> int: ...
    def device(self, dev: int) -> ContextManager[object] | None: ...
    def stream(self, dev: int) -> int: ...
    def cc(self, dev: int) -> tuple[int, int]: ...
    def empty(self, like: Array, m: int, n: int) -> Array: ...
    def zeros(self, like: Array, m: int, n: int) -> Array: ...
    def matmul(self, a: Array, b: Array, out: Array | None) -> Array: ...
    def copy_into(self, dst: Array, src: Array) -> None: ...
    def new_event(self) -> DeviceEvent: ...
    def record(self, ev: DeviceEvent) -> None: ...
    def wait(self, ev: DeviceEvent) -> None: ...
    def event_handle(self, ev: DeviceEvent) -> int | None: ...
    def capturing(self, dev: int) -> bool: ...


def _wrong_half(what: str, has: str, dtype: str) -> MatmulArgumentError:
    """The one line for data of the other half type: bf16 bits read as fp16 (or the reverse) give
    numbers, all wrong, so the call is refused rather than run."""
    return MatmulArgumentError(f"{what} holds {has} but this export's kernels take {dtype}: "
                               f"export the session with --dtype {has}, or convert {what} to {dtype}")


class _Cupy:
    name = "cupy"

    def __init__(self) -> None:
        import cupy

        self.cp = cupy

    def check(self, x: object, what: str, dtype: str) -> int:
        cp = self.cp
        if not isinstance(x, cp.ndarray):
            raise MatmulArgumentError(f"{what} is a {type(x).__name__}, not a cupy array: pass a and b from the same library")
        has = self.half_type(x)
        if has is not None and has != dtype:
            raise _wrong_half(what, has, dtype)
        if has is None:
            use = "x.astype(cupy.float16)" if dtype == "fp16" else "a uint16 array of bf16 bit patterns"
            raise MatmulArgumentError(f"{what} has dtype {x.dtype}; this export's kernels take {dtype}: use {use}")
        if x.ndim != 2:
            raise MatmulArgumentError(f"{what} has {x.ndim} dimensions; matmul takes 2-D arrays")
        if not x.flags.c_contiguous:
            raise MatmulArgumentError(f"{what} is not row-major contiguous: use cupy.ascontiguousarray({what})")
        return int(x.device.id)

    def half_type(self, x: Array) -> str | None:
        """The half type a cupy array holds: float16 is fp16; uint16 (bf16 bit patterns) or an
        ``ml_dtypes.bfloat16`` dtype is bf16; anything else none."""
        if x.dtype == self.cp.float16:
            return "fp16"
        if x.dtype == self.cp.uint16 or str(x.dtype) == "bfloat16":
            return "bf16"
        return None

    def ptr(self, x: Array) -> int:
        return int(x.data.ptr)

    def device(self, dev: int) -> ContextManager[object] | None:
        cp = self.cp
        if cp.cuda.runtime.getDevice() == dev:
            return None
        switch: ContextManager[object] = cp.cuda.Device(dev)
        return switch

    def stream(self, dev: int) -> int:
        return int(self.cp.cuda.get_current_stream().ptr)

    def cc(self, dev: int) -> tuple[int, int]:
        s = str(self.cp.cuda.Device(dev).compute_capability)
        return int(s[:-1]), int(s[-1])

    def empty(self, like: Array, m: int, n: int) -> Array:
        return self.cp.empty((m, n), dtype=like.dtype)

    def zeros(self, like: Array, m: int, n: int) -> Array:
        return self.cp.zeros((m, n), dtype=like.dtype)

    def matmul(self, a: Array, b: Array, out: Array | None) -> Array:
        if self.half_type(a) == "bf16":   # integer arithmetic on bit patterns: refused, never returned
            raise KernelLoadError("the C fallback is unavailable and cupy cannot multiply bf16 arrays; "
                                  "install the CUDA toolkit (nvcc) and cuBLAS so the export's fallback builds")
        return self.cp.matmul(a, b, out=out)

    def copy_into(self, dst: Array, src: Array) -> None:
        dst[...] = src

    def new_event(self) -> DeviceEvent:
        return self.cp.cuda.Event(disable_timing=True)

    def record(self, ev: DeviceEvent) -> None:
        ev.record(self.cp.cuda.get_current_stream())

    def wait(self, ev: DeviceEvent) -> None:
        self.cp.cuda.get_current_stream().wait_event(ev)

    def event_handle(self, ev: DeviceEvent) -> int | None:
        return int(ev.ptr) or None

    def capturing(self, dev: int) -> bool:
        return bool(self.cp.cuda.get_current_stream().is_capturing())


class _Torch:
    name = "torch"

    def __init__(self) -> None:
        import torch

        self.t = torch

    def check(self, x: object, what: str, dtype: str) -> int:
        t = self.t
        if not isinstance(x, t.Tensor):
            raise MatmulArgumentError(f"{what} is a {type(x).__name__}, not a torch tensor: pass a and b from the same library")
        halves = {t.float16: "fp16", t.bfloat16: "bf16"}
        has = halves.get(x.dtype)
        if has is not None and has != dtype:
            raise _wrong_half(what, has, dtype)
        if has is None:
            use = "x.half()" if dtype == "fp16" else "x.bfloat16()"
            raise MatmulArgumentError(f"{what} has dtype {x.dtype}; this export's kernels take {dtype}: use {use}")
        if x.dim() != 2:
            raise MatmulArgumentError(f"{what} has {x.dim()} dimensions; matmul takes 2-D tensors")
        if not x.is_cuda:
            raise MatmulArgumentError(f"{what} is on {x.device}, not a GPU: use x.cuda()")
        if not x.is_contiguous():
            raise MatmulArgumentError(f"{what} is not row-major contiguous: use {what}.contiguous()")
        return int(x.device.index if x.device.index is not None else self.t.cuda.current_device())

    def ptr(self, x: Array) -> int:
        return int(x.data_ptr())

    def device(self, dev: int) -> ContextManager[object] | None:
        if self.t.cuda.current_device() == dev:
            return None
        switch: ContextManager[object] = self.t.cuda.device(dev)
        return switch

    def stream(self, dev: int) -> int:
        return int(self.t.cuda.current_stream(dev).cuda_stream)

    def cc(self, dev: int) -> tuple[int, int]:
        major, minor = self.t.cuda.get_device_capability(dev)
        return int(major), int(minor)

    def empty(self, like: Array, m: int, n: int) -> Array:
        return self.t.empty((m, n), dtype=like.dtype, device=like.device)

    def zeros(self, like: Array, m: int, n: int) -> Array:
        return self.t.zeros((m, n), dtype=like.dtype, device=like.device)

    def matmul(self, a: Array, b: Array, out: Array | None) -> Array:
        return self.t.matmul(a, b, out=out)

    def copy_into(self, dst: Array, src: Array) -> None:
        dst.copy_(src)

    def new_event(self) -> DeviceEvent:
        return self.t.cuda.Event(enable_timing=False)

    def record(self, ev: DeviceEvent) -> None:
        ev.record(self.t.cuda.current_stream())

    def wait(self, ev: DeviceEvent) -> None:
        self.t.cuda.current_stream().wait_event(ev)

    def event_handle(self, ev: DeviceEvent) -> int | None:
        return int(ev.cuda_event) or None

    def capturing(self, dev: int) -> bool:
        return bool(self.t.cuda.is_current_stream_capturing())


_BACKENDS: dict[str, ArrayBackend] = {}
_BACKENDS_LOCK = threading.Lock()


def _backend_for(x: object) -> ArrayBackend:
    mod = type(x).__module__.split(".", 1)[0]
    if mod not in ("cupy", "torch"):
        raise MatmulArgumentError(f"matmul takes cupy arrays or torch tensors, not {type(x).__module__}.{type(x).__name__}")
    be = _BACKENDS.get(mod)
    if be is None:
        with _BACKENDS_LOCK:
            made: ArrayBackend = _BACKENDS.get(mod) or (_Cupy() if mod == "cupy" else _Torch())
            _BACKENDS[mod] = be = made
    return be


class _nullctx:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


#: cudaStreamPerThread: one handle value for a different stream in every thread
_PER_THREAD_STREAM = 2


class _Order:
    """One exported kernel's call order: the lock its calls hold, and the event recorded after
    the last call made outside a graph capture (on ``stream``; ``handle`` is its CUevent)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.event: DeviceEvent = None
        self.handle: int | None = None
        self.stream: int | None = None


class _Driver:
    """The three CUDA driver calls the per-call ordering makes, through ctypes.

    Why: the array libraries' wrappers (``torch.cuda.current_stream()``, ``Event.record``,
    ``is_current_stream_capturing``) cost tens of microseconds a call in Python (on the H200
    ``lib.matmul`` through them took +30 us with cupy, +80 us with torch), while one
    ctypes call into libcuda costs about one.  Every method returns None (or False) when the
    driver refuses, and the caller then takes the array library's path instead.
    """

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib
        vp, ui = ctypes.c_void_p, ctypes.c_uint
        lib.cuStreamIsCapturing.argtypes = [vp, ctypes.POINTER(ctypes.c_int)]
        lib.cuEventRecord.argtypes = [vp, vp]
        lib.cuStreamWaitEvent.argtypes = [vp, vp, ui]
        for f in (lib.cuStreamIsCapturing, lib.cuEventRecord, lib.cuStreamWaitEvent):
            f.restype = ctypes.c_int

    def capturing(self, stream: int) -> bool | None:
        status = ctypes.c_int(0)
        if self.lib.cuStreamIsCapturing(stream, ctypes.byref(status)) != 0:
            return None
        return status.value != 0  # CU_STREAM_CAPTURE_STATUS_NONE is 0

    def record(self, event: int, stream: int) -> bool:
        return bool(self.lib.cuEventRecord(event, stream) == 0)

    def wait(self, stream: int, event: int) -> bool:
        return bool(self.lib.cuStreamWaitEvent(stream, event, 0) == 0)


_DRIVER: list[_Driver | None] = []


def _driver() -> _Driver | None:
    """libcuda's ordering calls, loaded once; None where there is no driver (CPU machines)."""
    if not _DRIVER:
        with _BACKENDS_LOCK:
            if not _DRIVER:
                try:
                    _DRIVER.append(_Driver(ctypes.CDLL("libcuda.so.1")))
                except (OSError, AttributeError):
                    _DRIVER.append(None)
    return _DRIVER[0]


# --------------------------------------------------------------------------- the library


def _shape3(shape: list[int]) -> Shape3:
    """A manifest shape ([M, N, K], validated) as the tuple routes are keyed by."""
    m, n, k = shape
    return int(m), int(n), int(k)



class ExportedLibrary:
    """An export folder ready to call; create with :func:`load`."""

    def __init__(self, root: Path, manifest: dict, *, pad: str | None = None,
                 prefer_prebuilt: bool = True, strict: bool = False):
        if pad not in PAD_POLICIES:
            raise UserError(f"unknown pad policy {pad!r}: use None or 'nearest-larger'")
        self.root = root
        self.manifest = manifest
        #: the element type of every array ``matmul`` takes ("fp16" or "bf16"; a manifest without one: fp16)
        self.dtype = manifest_dtype(manifest, str(root))
        self.pad = pad
        self.prefer_prebuilt = prefer_prebuilt
        self.strict = strict
        self._entries: dict[Shape3, dict] = {_shape3(e["shape"]): e for e in manifest["kernels"]}
        #: shapes that run an exported kernel (no fallback marker)
        self.kernel_shapes: list[Shape3] = sorted(s for s, e in self._entries.items() if not e.get("fallback"))
        self._fns: dict[tuple[str, str], KernelFn] = {}      # (name, arch) -> ctypes function
        self._broken: set[tuple[str, str]] = set()      # failed to build / reported unsupported
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._orders: dict[tuple[str, str, str, int], _Order] = {}  # (backend, kernel, arch, device)
        self._lock = threading.Lock()
        self._prebuilt: ctypes.CDLL | None = None
        self._prebuilt_lock = threading.Lock()
        self._routes: dict[Shape3, Route] = {}
        self._arch_of: dict[tuple[str, int], str] = {}
        #: L2HGEMM_FALLBACK, read once like the C library does
        self.fallback_mode = fallback_mode()
        self._fallbacks: dict[str, KernelFn] = {}       # arch -> ctypes l2hgemm_fallback
        self._fallback_broken: set[str] = set()    # archs where it could not be built or loaded
        self._warned: set[str] = set()

    @property
    def fallback_kind(self) -> str:
        """What fallback routes run: "cublaslt", "cublas", or "array" once the C fallback proved unavailable."""
        if self._fallback_broken:
            return "array"
        return "cublas" if self.fallback_mode == "cublas" else "cublaslt"

    # ------------------------------------------------------------- routing (no GPU needed)
    def route(self, m: int, n: int, k: int, pad: str | None | bool = True) -> Route:
        """How (M, N, K) is computed, from the manifest alone."""
        use_pad = self.pad if pad is True else pad
        key = (m, n, k)
        if pad is True:
            r = self._routes.get(key)
            if r is not None:
                return r
        e = self._entries.get(key)
        if e is not None and not e.get("fallback"):
            r = Route("kernel", key, "exported kernel")
        elif e is not None:
            r = Route(self.fallback_kind, None, "manifest: a library was faster than the kernel")
        elif use_pad == "nearest-larger" and min(key) > 0:
            fits = [s for s in self.kernel_shapes if s[0] >= m and s[1] >= n and s[2] >= k]
            if fits:
                best = min(fits, key=lambda s: (s[0] * s[1] * s[2], s))
                r = Route("pad", best, f"zero-padded into {best[0]}x{best[1]}x{best[2]}")
            else:
                r = Route(self.fallback_kind, None, "no exported shape is large enough to pad into")
        else:
            r = Route(self.fallback_kind, None, "no exported kernel for this shape")
        if pad is True:
            self._routes[key] = r
        return r

    # ------------------------------------------------------------- building / loading
    def _arch(self, be: ArrayBackend, dev: int) -> str:
        key = (be.name, dev)
        a = self._arch_of.get(key)
        if a is None:
            from harness.gpuinfo import arch_for_cc

            a = self._arch_of[key] = arch_for_cc(be.cc(dev))
        return a

    def _load_prebuilt(self, arch: str) -> ctypes.CDLL | None:
        lib = self.manifest.get("library")
        if not self.prefer_prebuilt or not lib or lib.get("arch") != arch:
            return None
        with self._prebuilt_lock:  # one CDLL shared by every shape
            if self._prebuilt is None:
                so = self.root / lib["file"]
                if not so.is_file() or hashlib.sha256(so.read_bytes()).hexdigest() != lib["sha256"]:
                    return None
                self._prebuilt = ctypes.CDLL(str(so))
            return self._prebuilt

    def _build(self, e: dict, arch: str) -> KernelFn:
        pre = self._load_prebuilt(arch)
        if pre is not None:
            return _argtypes(getattr(pre, e["symbol"]))
        from harness.build import build

        from l2tui.export.cdispatch import check_flags, cublas_flags

        source = (self.root / e["file"]).read_text()
        flags = check_flags(e.get("flags", []), e["file"])
        if "cublas" in source:
            flags = flags + [f for f in cublas_flags() if f not in flags]
        # trusted: an exported library's own kernels (the policy applies when candidates are evaluated)
        res = build(source, arch=arch, flags=flags, name=f"export-{e['name']}", trusted=True, dtype=self.dtype)
        if not res.ok:
            first = res.errors[0] if res.errors else res.log.strip()[-200:]
            raise KernelLoadError(f"{e['file']} does not build for {arch}: {first}")
        return _argtypes(getattr(ctypes.CDLL(str(res.so_path)), ENTRY_POINTS[self.dtype]))

    def kernel(self, shape: Shape3, arch: str) -> KernelFn:
        """The ctypes function of the kernel for ``shape`` (built on first use; thread-safe).

        A shape the export routes to the library fallback has no kernel file (it was not shipped):
        asking for its kernel is refused in one line rather than building nothing."""
        e = self._entries[shape]
        if not e.get("file"):
            raise KernelLoadError(f"{self.root}: {e['name']} routes to the library fallback; no kernel was exported "
                                  "for it (lib.matmul calls the fallback)")
        key = (e["name"], arch)
        fn = self._fns.get(key)
        if fn is not None:
            return fn
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            fn = self._fns.get(key)
            if fn is None:
                fn = self._build(e, arch)
                self._fns[key] = fn
        return fn

    def warmup(self, arch: str | None = None, shapes: list[Shape3] | None = None,
               fallback: bool = True) -> None:
        """Build and load every kernel (and the fallback) now, for servers that must not build on a request.

        The fallback's per-shape autotuning still happens on each shape's first call:
        it times algorithms on the caller's stream and data, which only a call has.
        """
        if arch is None:
            from harness.gpuinfo import detect_arch

            arch = detect_arch() or str(self.manifest.get("arch"))
        for s in shapes or self.kernel_shapes:
            self.kernel(s, arch)
        if fallback:
            self.fallback_fn(arch)

    # ------------------------------------------------------------- the fallback
    def fallback_fn(self, arch: str) -> KernelFn | None:
        """The ctypes ``l2hgemm_fallback`` for ``arch`` (loaded or built once; thread-safe), None if unavailable."""
        fn = self._fallbacks.get(arch)
        if fn is not None or arch in self._fallback_broken:
            return fn
        with self._lock:
            lock = self._locks.setdefault(("<fallback>", arch), threading.Lock())
        with lock:
            fn = self._fallbacks.get(arch)
            if fn is None and arch not in self._fallback_broken:
                try:
                    fn = self._fallbacks[arch] = self._load_fallback(arch)
                except (HarnessError, OSError, AttributeError) as err:
                    if self.strict:
                        raise
                    with self._lock:
                        self._fallback_broken.add(arch)
                        self._routes.clear()  # cached routes name the fallback kind
                    self._warn_once(f"fallback:{arch}", f"the cuBLASLt fallback is unavailable ({err}); "
                                    "shapes without a kernel use the array library's matmul")
        return fn

    def _load_fallback(self, arch: str) -> KernelFn:
        """From the prebuilt library when it has one, else a fallback-only library from the same generated C."""
        pre = self._load_prebuilt(arch)
        if pre is not None and hasattr(pre, PINNED_FALLBACK_SYMBOL):  # with the export's measured choice per shape
            return _argtypes(getattr(pre, PINNED_FALLBACK_SYMBOL))
        if pre is not None and hasattr(pre, FALLBACK_SYMBOL):  # libraries built before the fallback lack it
            return _argtypes(getattr(pre, FALLBACK_SYMBOL))
        from harness.build import build

        from l2tui.export.cdispatch import cublas_flags, render_fallback_library

        res = build(render_fallback_library(self.dtype), arch=arch, flags=cublas_flags(),
                    name=f"export-fallback-{self.dtype}", trusted=True, dtype=self.dtype)
        if not res.ok:
            first = res.errors[0] if res.errors else res.log.strip()[-200:]
            raise KernelLoadError(f"the fallback library does not build for {arch}: {first}")
        return _argtypes(getattr(ctypes.CDLL(str(res.so_path)), FALLBACK_SYMBOL))

    def _fallback(self, be: ArrayBackend, dev: int, a: Array, b: Array, out: Array | None,
                  m: int, n: int, k: int) -> Array:
        """One call's fallback: the C ``l2hgemm_fallback``, else (unavailable, or an error) the array library's matmul."""
        fn = self.fallback_fn(self._arch(be, dev)) if min(m, n, k) > 0 else None
        if fn is None:
            return be.matmul(a, b, out)
        if out is None:
            out = be.empty(a, m, n)
        rc = fn(be.ptr(a), be.ptr(b), be.ptr(out), m, n, k, be.stream(dev))
        if rc != 0:
            self._warn_once(f"fallback-rc:{rc}", f"the fallback returned {rc} (a CUDA/cuBLAS error) on {m}x{n}x{k}; "
                            f"using {be.name}.matmul for such calls")
            return be.matmul(a, b, out)
        return out

    def _warn_once(self, key: str, text: str) -> None:
        with self._lock:
            if key in self._warned:
                return
            self._warned.add(key)
        warnings.warn(f"l2tui.export.runtime: {text}", RuntimeWarning, stacklevel=4)

    # ------------------------------------------------------------- the call
    def matmul(self, a: Array, b: Array, out: Array | None = None) -> Array:
        """C = a @ b for 2-D row-major arrays of the export's element type (``self.dtype``); returns
        ``out`` (allocated when None)."""
        be = _backend_for(a)
        if type(b) is not type(a) and _backend_for(b) is not be:
            raise MatmulArgumentError("a and b come from different array libraries: pass two cupy arrays or two torch tensors")
        dev = be.check(a, "a", self.dtype)
        if be.check(b, "b", self.dtype) != dev:
            raise MatmulArgumentError("a and b are on different GPUs: move them to one device")
        m, k = (int(d) for d in a.shape)
        k2, n = (int(d) for d in b.shape)
        if k != k2:
            raise MatmulArgumentError(f"shapes {m}x{k} and {k2}x{n} do not multiply: a's columns must equal b's rows")
        if out is not None:
            if be.check(out, "out", self.dtype) != dev:
                raise MatmulArgumentError("out is on another GPU than a and b")
            if tuple(int(d) for d in out.shape) != (m, n):
                raise MatmulArgumentError(f"out has shape {tuple(out.shape)}; it must be ({m}, {n})")
        r = self.route(m, n, k)
        ctx = be.device(dev) or _nullctx()
        with ctx:
            if r.kind not in ("kernel", "pad") or min(m, n, k) == 0:
                return self._fallback(be, dev, a, b, out, m, n, k)
            arch = self._arch(be, dev)
            fn = self._fn_or_none(r.shape, arch) if r.shape is not None else None
            if fn is None:
                return self._fallback(be, dev, a, b, out, m, n, k)
            if out is None:
                out = be.empty(a, m, n)
            stream = be.stream(dev)
            shape = r.shape
            assert shape is not None  # a kernel or pad route names the exported shape
            with self._ordered(be, dev, self._entries[shape]["name"], arch, stream):
                if r.kind == "kernel":
                    rc = fn(be.ptr(a), be.ptr(b), be.ptr(out), m, n, k, stream)
                else:
                    rc = self._padded(be, fn, shape, a, b, out, m, n, k, stream)
            if rc != 0:
                self._mark_broken(r.shape, arch, f"returned {rc} (unsupported shape or launch error)")
                return self._fallback(be, dev, a, b, out, m, n, k)
            return out

    @contextmanager
    def _ordered(self, be: ArrayBackend, dev: int, name: str, arch: str, stream: int) -> Iterator[None]:
        """Hold the kernel's lock for the call; outside a graph capture, make ``stream`` wait for
        the kernel's previous call on another stream, and record the event after this one."""
        key = (be.name, name, arch, dev)
        order = self._orders.get(key)
        if order is None:
            with self._lock:
                order = self._orders.setdefault(key, _Order())
        drv = _driver()
        with order.lock:
            captured = drv.capturing(stream) if drv is not None else None
            if captured is None:
                captured = be.capturing(dev)
            if not captured and order.event is not None and (order.stream != stream or stream == _PER_THREAD_STREAM):
                if not (drv is not None and order.handle and drv.wait(stream, order.handle)):
                    be.wait(order.event)
            yield
            if not captured:
                if order.event is None:
                    order.event = be.new_event()
                    be.record(order.event)  # the library creates the event on its first record
                    order.handle = be.event_handle(order.event)
                elif not (drv is not None and order.handle and drv.record(order.handle, stream)):
                    be.record(order.event)
                order.stream = stream

    def _padded(self, be: ArrayBackend, fn: KernelFn, shape: Shape3, a: Array, b: Array, out: Array,
                m: int, n: int, k: int, stream: int) -> int:
        pm, pn, pk = shape
        ap = a
        if (pm, pk) != (m, k):
            ap = be.zeros(a, pm, pk)
            be.copy_into(ap[:m, :k], a)
        bp = b
        if (pk, pn) != (k, n):
            bp = be.zeros(a, pk, pn)
            be.copy_into(bp[:k, :n], b)
        cp_ = out if (pm, pn) == (m, n) else be.empty(a, pm, pn)
        rc = fn(be.ptr(ap), be.ptr(bp), be.ptr(cp_), pm, pn, pk, stream)
        if rc == 0 and cp_ is not out:
            be.copy_into(out, cp_[:m, :n])
        return rc

    def _fn_or_none(self, shape: Shape3, arch: str) -> KernelFn | None:
        key = (self._entries[shape]["name"], arch)
        fn = self._fns.get(key)
        if fn is not None:
            return fn
        if key in self._broken:
            return None
        try:
            return self.kernel(shape, arch)
        except (HarnessError, OSError, AttributeError) as err:
            if self.strict:
                raise
            self._mark_broken(shape, arch, str(err))
            return None

    def _mark_broken(self, shape: Shape3 | None, arch: str, why: str) -> None:
        if shape is None:
            return
        name = self._entries[shape]["name"]
        with self._lock:
            self._broken.add((name, arch))
            self._fns.pop((name, arch), None)
        warnings.warn(f"l2tui.export.runtime: kernel {name} {why}; using the fallback for it", RuntimeWarning, stacklevel=3)

    def __repr__(self) -> str:
        return (f"ExportedLibrary({str(self.root)!r}, kernels={len(self.kernel_shapes)}, "
                f"fallback={len(self._entries) - len(self.kernel_shapes)} ({self.fallback_kind}), pad={self.pad!r})")


def load(path: str | Path, *, pad: str | None = None, prefer_prebuilt: bool = True,
         strict: bool = False) -> ExportedLibrary:
    """Open an export folder.  Checks the manifest and that every kernel file matches its hash.

    ``pad="nearest-larger"`` zero-pads shapes without a kernel into the smallest
    exported shape that contains them.  ``strict=True`` raises when a kernel or
    the fallback cannot be built, instead of warning and falling back (to the
    fallback, or to the array library's matmul).  ``L2HGEMM_FALLBACK`` is read now.
    """
    root = Path(path).expanduser()
    manifest = load_manifest(root)
    for e in manifest["kernels"]:
        if not e["file"]:   # a fallback shape: its kernel was not shipped, the library never calls it
            continue
        text = (root / e["file"]).read_bytes()
        if hashlib.sha256(text).hexdigest() != e["sha256"]:
            raise KernelLoadError(f"{root / e['file']} was changed after export (hash mismatch); re-export it")
    return ExportedLibrary(root.resolve(), manifest, pad=pad, prefer_prebuilt=prefer_prebuilt, strict=strict)
