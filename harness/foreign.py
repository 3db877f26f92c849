"""Kernels written for another calling convention, benched through the same harness.

Why: a published set of kernels is only comparable with ours when it runs through the same
checks and the same timing. Each foreign layout gets an adapter that turns one of its files
into a source of our ABI (``extern "C" int l2_hgemm(A, B, C, M, N, K, stream)``, see
``harness/build.py`` check_abi) by adding a C shim written here; the file's own text is never
edited, so the source policy and the sandbox judge exactly what the authors wrote, with our glue
around it. Nothing of a foreign project is stored in this repository: the user names its folder
at run time (``l2tui bench --kernels DIR --abi cuda-l2``).

An adapter also says which B its kernels read: ``row`` (K x N row-major, as our ABI) or ``col``
(the column-major copy the worker already keeps for cuBLAS's TN layout, filled outside the timed
region, so the copy costs the foreign kernel nothing).

Registry: :data:`ABIS`. The ``cuda-l2`` adapter reads the layout of the files of the CUDA-L2
release (one ``M_N_K.cu`` per shape, fp16 in and out, f32 accumulation): a CUDA section, then a
PyTorch binding section from the first ``#include <torch/...>`` line on, whose entry point takes
four tensors ``(a, b, b_col_major, c)``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from .errors import HarnessError, KernelSourceError
from .gemm_shape import Shape

#: the largest foreign file an adapter reads (the largest CUDA-L2 H100 file is about 60 KB)
MAX_FOREIGN_BYTES = 1 << 20
#: the B layouts a kernel may read: ours (row-major K x N) or the worker's column-major copy
B_LAYOUTS = ("row", "col")


@dataclass(frozen=True)
class Translated:
    """A foreign file turned into a source of our ABI, and the B layout its kernel reads."""

    source: str
    b_layout: str


@dataclass(frozen=True)
class ForeignAbi:
    """One calling convention: how its files become our ABI and how they must be built.

    ``flags`` are nvcc flags the glue relies on; ``acc`` the accumulator the layout promises
    (a run with another one is refused: the accuracy bound would be the wrong one)."""

    name: str
    summary: str
    acc: str
    flags: tuple[str, ...]
    translate: Callable[[str, Shape, str], Translated]


def _identity(text: str, shape: Shape, name: str) -> Translated:
    """Our own ABI: the file is the source."""
    return Translated(text, "row")


# --------------------------------------------------------------------------- cuda-l2

_TORCH_INCLUDE = re.compile(r"(?m)^[ \t]*#[ \t]*include[ \t]*<torch/[^>\n]*>[ \t]*$")
_ENTRY = re.compile(r"\bvoid\s+([A-Za-z_]\w*)\s*\(\s*torch::Tensor\s+([A-Za-z_]\w*)\s*,\s*torch::Tensor\s+([A-Za-z_]\w*)"
                    r"\s*,\s*torch::Tensor\s+([A-Za-z_]\w*)\s*,\s*torch::Tensor\s+([A-Za-z_]\w*)\s*\)\s*\{")

#: what the binding section's tensors need: their element type, sizes and data pointer. A
#: binding that uses more of PyTorch fails to compile and is charged with a compile error.
_TENSOR_VIEW = """\
#include <cstdint>
#include <iostream>
#include <stdexcept>
#include <cuda_fp16.h>
namespace torch {
enum ScalarType { kHalf, kFloat };
struct TensorOptions {
  ScalarType type;
  ScalarType dtype() const { return type; }
};
inline std::ostream& operator<<(std::ostream& o, const TensorOptions&) { return o << "half"; }
struct Tensor {
  void* ptr;
  std::int64_t rows, cols;
  void* data_ptr() const { return ptr; }
  template <typename T> T* data_ptr() const { return static_cast<T*>(ptr); }
  std::int64_t size(int d) const { return d == 0 ? rows : cols; }
  std::int64_t stride(int d) const { return d == 0 ? cols : 1; }
  std::int64_t dim() const { return 2; }
  bool is_contiguous() const { return true; }
  bool is_cuda() const { return true; }
  TensorOptions options() const { return TensorOptions{kHalf}; }
  ScalarType scalar_type() const { return kHalf; }
};
}  // namespace torch
namespace at { using Half = __half; }
"""

#: the glue before the file: a fork from the caller's stream onto the per-thread default stream
#: (handle 0 under ``--default-stream=per-thread``), where the file's launches go because they
#: name no stream, and a join back; inside a graph capture the fork pulls those launches into the
#: caller's graph. The events are made on the first call only.
_GLUE_HEAD = """\
// l2tui {abi} adapter: the file {name} follows unchanged but for its <torch/...> includes,
// which the tensor view below replaces
static cudaEvent_t l2f_fork_ev = nullptr;
static cudaEvent_t l2f_join_ev = nullptr;
static int l2f_fork(cudaStream_t caller) {{
  if (!l2f_fork_ev && cudaEventCreateWithFlags(&l2f_fork_ev, cudaEventDisableTiming) != cudaSuccess) return 1;
  if (!l2f_join_ev && cudaEventCreateWithFlags(&l2f_join_ev, cudaEventDisableTiming) != cudaSuccess) return 1;
  if (cudaEventRecord(l2f_fork_ev, caller) != cudaSuccess) return 1;
  return cudaStreamWaitEvent(0, l2f_fork_ev, 0) != cudaSuccess;
}}
static int l2f_join(cudaStream_t caller) {{
  if (cudaEventRecord(l2f_join_ev, 0) != cudaSuccess) return 1;
  return cudaStreamWaitEvent(caller, l2f_join_ev, 0) != cudaSuccess;
}}
"""

_GLUE_TAIL = """\
// l2tui {abi} adapter: our ABI around the file's entry point; B is the {layout} copy
extern "C" int l2_hgemm(const void* A, const void* B, void* C, int M, int N, int K, void* stream) {{
  if (M != {m} || N != {n} || K != {k}) return 1;
  cudaStream_t caller = static_cast<cudaStream_t>(stream);
  void* b = const_cast<void*>(B);
  torch::Tensor ta{{const_cast<void*>(A), M, K}};
  torch::Tensor tb{{{b_row}, K, N}};
  torch::Tensor tbt{{{b_col}, N, K}};
  torch::Tensor tc{{C, M, N}};
  if (l2f_fork(caller)) return 2;
  try {{
    {entry}(ta, tb, tbt, tc);
  }} catch (...) {{
    l2f_join(caller);
    return 3;
  }}
  if (l2f_join(caller)) return 2;
  return cudaGetLastError() == cudaSuccess ? 0 : 4;
}}
"""


def _blank_comments(text: str) -> str:
    from .source_policy import blank_comments_and_strings

    return blank_comments_and_strings(text)


def cuda_l2_layout(binding: str, name: str) -> tuple[str, str]:
    """(entry point, B layout) of a CUDA-L2 binding section (comments and strings blanked).

    The layout is the tensor whose data the binding reads: ``b`` (row-major) or
    ``b_col_major``; a binding that reads both, or neither, is refused, since one call of our
    ABI carries one B. The entry point may be defined more than once with one signature (the
    branches of an ``#if``, a stub for other architectures): the preprocessor keeps one, and a
    file that defines it twice for real fails to compile, charged to that file."""
    entries = set(_ENTRY.findall(binding))
    if len(entries) != 1:
        raise KernelSourceError(f"{name}: cuda-l2 layout: expected one entry point taking four torch::Tensor "
                                f"(a, b, b_col_major, c), found {len(entries)}")
    entry, _a, b, bt, _c = entries.pop()
    reads = [lay for lay, t in (("row", b), ("col", bt)) if re.search(rf"\b{t}\s*\.\s*data_ptr\b", binding)]
    if len(reads) != 1:
        what = "both B tensors" if reads else "neither B tensor"
        raise KernelSourceError(f"{name}: cuda-l2 layout: the entry point {entry} reads {what} ({b}, {bt}); "
                                "one call carries one B")
    return entry, reads[0]


def translate_cuda_l2(text: str, shape: Shape, name: str) -> Translated:
    """A CUDA-L2 file as a source of our ABI: our glue, the file with its ``<torch/...>``
    include lines replaced by a tensor view, and an ``l2_hgemm`` that calls its entry point on
    this shape only (the file is tuned for it) and returns non-zero on any other."""
    if len(text.encode()) > MAX_FOREIGN_BYTES:
        raise KernelSourceError(f"{name}: larger than {MAX_FOREIGN_BYTES >> 10} KiB: not a kernel file")
    first = _TORCH_INCLUDE.search(text)
    if first is None:
        raise KernelSourceError(f"{name}: cuda-l2 layout: no #include <torch/...> line starts a binding section")
    entry, layout = cuda_l2_layout(_blank_comments(text[first.start():]), name)
    body = _TORCH_INCLUDE.sub("", text[:first.start()]) + _TENSOR_VIEW + _TORCH_INCLUDE.sub("", text[first.start():])
    ptr = {"row": ("b", "nullptr"), "col": ("nullptr", "b")}[layout]
    head = _GLUE_HEAD.format(abi="cuda-l2", name=name.replace("\n", " ")[:200])
    tail = _GLUE_TAIL.format(abi="cuda-l2", layout="row-major" if layout == "row" else "column-major",
                             m=shape.m, n=shape.n, k=shape.k, b_row=ptr[0], b_col=ptr[1], entry=entry)
    return Translated(head + body + ("\n" if not body.endswith("\n") else "") + tail, layout)


ABIS: dict[str, ForeignAbi] = {
    "l2": ForeignAbi("l2", "this project's ABI (l2_hgemm)", acc="", flags=(), translate=_identity),
    "cuda-l2": ForeignAbi("cuda-l2", "CUDA-L2 release files (M_N_K.cu, PyTorch binding (a, b, b_col_major, c), "
                                     "fp16 with f32 accumulation)",
                          acc="f32", flags=("--default-stream=per-thread",), translate=translate_cuda_l2),
}


def foreign_abi(name: str) -> ForeignAbi:
    """The adapter called ``name``; an unknown one is refused in one line naming those known."""
    abi = ABIS.get(name)
    if abi is None:
        shown = name if len(name) <= 40 else name[:37] + "..."
        raise HarnessError(f"unknown --abi {shown!r}: use one of {', '.join(ABIS)}")
    return abi


def abis_for(names: list[str] | str | None, count: int) -> list[ForeignAbi]:
    """One adapter per ``--kernels`` set, from the repeatable ``--abi`` (our ABI when absent)."""
    given = [names] if isinstance(names, str) else list(names or [])
    if not given:
        return [ABIS["l2"]] * count
    if len(given) != count:
        raise HarnessError(f"give one --abi per --kernels ({count} --kernels, {len(given)} --abi)")
    return [foreign_abi(n) for n in given]
