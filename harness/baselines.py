"""Baselines: cuBLAS and cuBLASLt (heuristic, autotuned) through the C shim's ABI entry points,
and torch.matmul (the framework path), in fp16 or bf16 (:func:`shim_entry`).

Two halves:

* parent side (no GPU, no cupy): :func:`build_shim` compiles ``kernels/cublas_shim.cu``
  with flags that find cuBLAS either in the CUDA toolkit next to nvcc or in the
  ``nvidia-cublas`` wheel (which has no unversioned ``libcublas.so``, so a private
  link directory with that symlink is made in the cache);
* worker side: :func:`abi_subject` and :func:`torch_subject` make callables that enqueue
  one GEMM on the worker's stream, all writing the same guarded C buffer as the candidate,
  so every subject is checked and timed by the same code; every library but torch is called
  through a C entry point of the shim by the same ctypes caller as a candidate, so the host
  path of a server-mode call is the same kind for all.

Imports of cupy and torch happen inside functions: this module is also
imported by the parent process, which must never create a CUDA context.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from .errors import HarnessError
from .paths import KERNELS_DIR, cache_dir

if TYPE_CHECKING:
    from .build import BuildResult

#: every baseline name ``--baselines`` accepts
BASELINES: tuple[str, ...] = ("cublas", "cublaslt_heuristic", "cublaslt_autotune", "torch")
DEFAULT_BASELINES: tuple[str, ...] = BASELINES
SHIM_FILE = KERNELS_DIR / "cublas_shim.cu"

#: autotune caps (documented in the README, "Checking and timing kernels")
AUTOTUNE_MAX_CANDIDATES = 100
AUTOTUNE_SCREEN_BUDGET_S = 0.08      # wall time spent screening candidates per shape
AUTOTUNE_MIN_CANDIDATES = 4          # screened even when the budget is spent


def parse_baselines(text: str | Sequence[str] | None) -> list[str]:
    """``"cublas,torch"`` -> ``["cublas", "torch"]``; ``none``/empty -> ``[]``."""
    if text is None:
        return list(DEFAULT_BASELINES)
    items = text.split(",") if isinstance(text, str) else list(text)
    out: list[str] = []
    for raw in items:
        name = raw.strip()
        if not name or name == "none":
            continue
        if name == "all":
            out.extend(b for b in BASELINES if b not in out)
            continue
        if name not in BASELINES:
            raise HarnessError(f"unknown baseline {name!r}: choose from {', '.join(BASELINES)} (comma separated)")
        if name not in out:
            out.append(name)
    return out


# --------------------------------------------------------------------------- parent side


def _nvcc_toolkit_dirs() -> list[Path]:
    nvcc = shutil.which("nvcc")
    dirs = []
    if nvcc:
        real = Path(os.path.realpath(nvcc)).parent.parent
        dirs.append(real)
    dirs += [Path("/usr/local/cuda"), Path("/usr/local/cuda-13.0")]
    return dirs


def _wheel_cublas_dirs() -> tuple[Path, Path] | None:
    """(include, lib) of an installed ``nvidia-cublas`` wheel (CUDA 13 or 12 layout)."""
    spec = importlib.util.find_spec("nvidia")
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        for sub in ("cu13", "cublas"):
            inc, lib = Path(root) / sub / "include", Path(root) / sub / "lib"
            if (inc / "cublas_v2.h").is_file() and any(lib.glob("libcublas.so*")):
                return inc, lib
    return None


def cublas_build_flags() -> list[str]:
    """nvcc flags that find cuBLAS headers and library, with an rpath so the worker loads it.

    Raises a one-line :class:`HarnessError` when cuBLAS cannot be found.
    """
    for tk in _nvcc_toolkit_dirs():
        for libdir in (tk / "lib64", tk / "lib", tk / "targets" / "x86_64-linux" / "lib"):
            if (tk / "include" / "cublas_v2.h").is_file() and any(libdir.glob("libcublas.so*")):
                return [f"-L{libdir}", f"-Xlinker=-rpath={libdir}"]
    wheel = _wheel_cublas_dirs()
    if wheel is None:
        raise HarnessError(
            "cuBLAS not found (no cublas_v2.h next to nvcc, no nvidia-cublas wheel): pip install nvidia-cublas"
        )
    inc, lib = wheel
    linkdir = cache_dir() / "cublas-link"
    linkdir.mkdir(parents=True, exist_ok=True)
    for stem in ("libcublas", "libcublasLt"):
        target = sorted(lib.glob(f"{stem}.so.*"))
        link = linkdir / f"{stem}.so"
        if target and not link.exists():
            try:
                link.symlink_to(target[0])
            except FileExistsError:
                pass
    return [f"-I{inc}", f"-L{linkdir}", f"-Xlinker=-rpath={lib}"]


def build_shim(arch: str | None = None) -> BuildResult:
    """Build (or fetch from the cache) the cuBLAS shim; returns the lead's ``BuildResult``."""
    from .build import build

    res = build(SHIM_FILE.read_text(), arch=arch, flags=cublas_build_flags(), name="cublas_shim", trusted=True)
    if not res.ok:
        first = res.errors[0] if res.errors else None
        raise HarnessError(f"building the cuBLAS shim failed: {first or 'see nvcc log'}")
    return res


# --------------------------------------------------------------------------- worker side


@dataclass
class Subject:
    """One thing that computes C = A @ B on the worker's stream (candidate or baseline).

    ``call()`` enqueues exactly one GEMM and returns the ABI status (0 = ok).
    ``light`` subjects (baselines in ``--checks fast``) get fewer checks.
    """

    label: str
    call: Callable[[], int]
    kind: str = "baseline"            # "candidate" | "baseline"
    nondeterministic: bool = False
    light: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    keep: list[Any] = field(default_factory=list)   # objects whose lifetime the graph needs


#: the element types a baseline runs in (the kernel ABI's ``dtype``)
DTYPES: tuple[str, ...] = ("fp16", "bf16")


def shim_entry(base: str, acc: str, dtype: str = "fp16") -> str:
    """The shim's entry point for baseline ``base`` (``l2_hgemm``, ``l2_hgemm_tn``,
    ``l2_hgemm_lt_heur``, ``l2_hgemm_lt_auto``) in an accumulation and element type: the suffix
    ``_f16`` is fp16 with f16 compute, ``_bf16`` bf16 with f32 compute (bf16 has no f16-accumulate
    mode, so that pair is refused in one line)."""
    if dtype not in DTYPES:
        raise HarnessError(f"unknown dtype {dtype!r}: choose from {', '.join(DTYPES)}")
    if dtype == "bf16":
        if acc != "f32":
            raise HarnessError("bf16 accumulates in f32 only: run bf16 with --acc f32")
        return base + "_bf16"
    return base if acc == "f32" else base + "_f16"


def lt_mode(acc: str, dtype: str = "fp16") -> int:
    """The shim's cuBLASLt plan mode (``l2_lt_plan``'s fourth argument): 0 fp16 with f32 compute,
    1 fp16 with f16 compute, 2 bf16 with f32 compute."""
    suffix = shim_entry("", acc, dtype)
    return {"": 0, "_f16": 1, "_bf16": 2}[suffix]


def ctypes_fn(lib: Any, name: str) -> Callable[..., int]:
    import ctypes

    fn = getattr(lib, name)
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    fn.restype = ctypes.c_int
    call: Callable[..., int] = fn
    return call


def abi_subject(label: str, fn: Callable[..., int], a_ptr: int, b_ptr: int, c_ptr: int,
                m: int, n: int, k: int, stream_ptr: int, **kw: Any) -> Subject:
    def call() -> int:
        return fn(a_ptr, b_ptr, c_ptr, m, n, k, stream_ptr)

    return Subject(label, call, **kw)


def torch_available() -> str | None:
    try:
        import torch
    except Exception as e:
        return f"torch not importable ({type(e).__name__})"
    if not torch.cuda.is_available():
        return "torch has no CUDA"
    return None


def torch_subject(label: str, a: Any, b: Any, c: Any, stream_ptr: int, dtype: str = "fp16",
                  **kw: Any) -> Subject:
    """torch.matmul(A, B, out=C) on our stream (zero-copy views through DLPack). bf16 buffers are
    uint16 storage on the worker (cupy has no bfloat16), so torch views their bits as bfloat16."""
    import torch

    ta, tb, tc = (torch.from_dlpack(x) for x in (a, b, c))
    if dtype == "bf16":
        ta, tb, tc = (t.view(torch.bfloat16) for t in (ta, tb, tc))
    ext = torch.cuda.ExternalStream(stream_ptr)

    def call() -> int:
        with torch.cuda.stream(ext):
            torch.matmul(ta, tb, out=tc)
        return 0

    s = Subject(label, call, **kw)
    s.keep += [ta, tb, tc, ext]
    return s
