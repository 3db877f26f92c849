"""The C/C++ side of an export: one shared library that dispatches by shape.

Why it is built this way:

* Every exported kernel is its own translation unit defining ``l2_hgemm``.
  Each is compiled to an object with ``-Dl2_hgemm=l2_hgemm_M_N_K`` so the entry
  points get distinct names.
* Kernels written independently reuse names (every seed of a family has a
  ``__global__ void hgemm_...`` with different macro values).  Linked as-is that
  is either a duplicate-symbol error or, for templates and inline functions, a
  silent ODR merge where one shape would launch another shape's code.  So every
  other symbol an object *defines* is renamed with a per-kernel suffix
  (``objcopy --redefine-syms``) before linking; device code is per object
  (whole-program nvcc, no ``-rdc``), so nothing on the GPU side depends on
  those host names.
* One dispatcher TU (``src/l2hgemm_dispatch.cu``) holds a sorted table
  ``{M, N, K, fn}``; ``fn == NULL`` marks a shape where a library was faster
  than the kernel (manifest ``"fallback"``), and any shape not in the table,
  or a kernel returning non-zero, goes to the fallback ``l2hgemm_fallback``.
* The fallback is cuBLASLt (fp16 in/out, fp32 compute) with the fastest of up
  to 32 heuristic algorithms, timed on the caller's stream the first time a
  shape is seen.  A plain cuBLAS call would be the heuristic's pick, and the
  export bench compares against *autotuned* cuBLASLt: on the shapes where that
  wins, a heuristic fallback would make the library lose.  Timing needs events
  and a synchronisation, which a CUDA-graph capture forbids, so a captured
  call uses the cached winner or heuristic #1.  ``cublasGemmEx`` is the last
  resort; ``L2HGEMM_FALLBACK`` selects a simpler path for comparisons.  The
  same C++ (:data:`_FALLBACK`) is built alone for :mod:`l2tui.runtime`.
* A linker version script exports only the API (``l2hgemm*`` and the
  ``l2_hgemm_M_N_K`` entries), so the static CUDA runtime and the renamed
  helpers stay private.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from harness.errors import HarnessError, ToolMissing

from .manifest import kernel_name, safe_label, symbol_name
from .values import sh_word

LIB_FILE = "lib/libl2hgemm.so"
HEADER_FILE = "include/l2hgemm.h"
DISPATCH_FILE = "src/l2hgemm_dispatch.cu"
EXPORTS_FILE = "src/l2hgemm.map"
CMAKE_FILE = "l2hgemm.cmake"
CMAKE_EXAMPLE = "CMakeLists.txt"
BUILD_SCRIPT = "build.sh"
TABLE_BEGIN = "// l2hgemm-table begin"
TABLE_END = "// l2hgemm-table end"
FALLBACK_SYMBOL = "l2hgemm_fallback"
#: environment variable the generated C reads once per process (and l2tui.runtime mirrors)
FALLBACK_ENV = "L2HGEMM_FALLBACK"
#: its values, in the order of ``l2hgemm_fallback_mode()``'s return codes; the first is the default
FALLBACK_MODES = ("cublaslt-autotune", "cublaslt-heuristic", "cublas")
#: libraries the combined library and the fallback link
CUBLAS_LIBS = ("-lcublas", "-lcublasLt")

#: flags a session may carry into a build (anything else is refused: a session is data, not a script)
_FLAG_OK = re.compile(
    r"^(-D[A-Za-z_][A-Za-z0-9_]*(=[A-Za-z0-9_.+\-]*)?|-U[A-Za-z_][A-Za-z0-9_]*|-O[0-3]|-std=c\+\+(17|20)"
    r"|--?use_fast_math|--expt-relaxed-constexpr|--expt-extended-lambda|-lineinfo"
    r"|-Xptxas=-?-?[A-Za-z0-9_=,.\-]+|--?maxrregcount=\d+|--?ftz=(true|false)|--?prec-div=(true|false)"
    r"|--?prec-sqrt=(true|false)|--?fmad=(true|false)|-lcublas|-lcublasLt|--extra-device-vectorization)$"
)


#: architecture flags build.sh may carry (what :func:`l2tui.export.values.gencode` makes)
_GENCODE_OK = re.compile(r"^-gencode=arch=compute_[0-9]{2,3}[af]?,code=sm_[0-9]{2,3}[af]?$")

#: machine-specific search paths a session may have recorded; the export supplies its own
_FLAG_DROP = re.compile(r"^(-I|-L|-Xlinker=-rpath=|-Xlinker=-rpath,)")


def fallback_mode(environ: Mapping[str, str] | None = None) -> str:
    """The fallback ``L2HGEMM_FALLBACK`` selects, parsed like the generated C does.

    Unset or empty means the default (autotuned cuBLASLt); an unknown value warns
    once per call site and falls back to the default too, rather than failing a
    program over a tuning knob.
    """
    value = (os.environ if environ is None else environ).get(FALLBACK_ENV, "")
    if value == "":
        return FALLBACK_MODES[0]
    if value not in FALLBACK_MODES:
        warnings.warn(f"{FALLBACK_ENV}={value[:64]} is not one of {', '.join(FALLBACK_MODES)}; "
                      f"using {FALLBACK_MODES[0]}", RuntimeWarning, stacklevel=2)
        return FALLBACK_MODES[0]
    return value


def check_flags(flags: Sequence[str], where: str) -> list[str]:
    """The kernel's nvcc flags, refusing any that could escape the build (outputs, plugins, includes).

    Include/library search paths recorded on the machine that ran the session are
    dropped: the build adds the paths of the machine it runs on.
    """
    out = []
    for f in flags:
        if isinstance(f, str) and _FLAG_DROP.match(f):
            continue
        if not isinstance(f, str) or not _FLAG_OK.match(f):
            raise HarnessError(f"{where}: nvcc flag {f!r} is not allowed in an export; remove it from the kernel's flags")
        out.append(f)
    return out


@dataclass
class TableEntry:
    m: int
    n: int
    k: int
    symbol: str | None  # None: the fallback runs this shape
    note: str


def entries_from_manifest(manifest: dict) -> list[TableEntry]:
    out = []
    for e in manifest["kernels"]:
        m, n, k = e["shape"]
        if e.get("fallback"):
            out.append(TableEntry(m, n, k, None, "fallback: a library was measured faster than the kernel"))
        else:
            out.append(TableEntry(m, n, k, e["symbol"], f"{e['file']} sha256={e['sha256'][:16]}"))
    out.sort(key=lambda t: (t.m, t.n, t.k))
    return out


# --------------------------------------------------------------------------- generated text

_HEADER = """\
/* l2hgemm.h: HGEMM kernels exported by l2tui, dispatched by shape.
 *
 * C = A * B with A (M x K), B (K x N), C (M x N), all row-major fp16 on the
 * device, beta = 0.  Work is enqueued on `stream` (a cudaStream_t; NULL is the
 * legacy default stream).  Shapes without an exported kernel, shapes where a
 * library was measured faster, and kernels that return non-zero run the fallback
 * (l2hgemm_fallback): cuBLASLt (fp32 compute) with the fastest of its heuristic
 * algorithms, timed on the caller's stream on the first call of each shape
 * (never while the stream is being captured into a CUDA graph); cublasGemmEx when
 * cuBLASLt cannot run a call.  L2HGEMM_FALLBACK=cublaslt-autotune (default),
 * cublaslt-heuristic or cublas picks the path (read once per process).
 * Returns 0 on success, non-zero on a CUDA/cuBLAS error.
 *
 * Generated by `l2tui export` for @ARCH@; @COUNT@ exported shape(s).
 */
#ifndef L2HGEMM_H
#define L2HGEMM_H

#ifdef __cplusplus
extern "C" {
#endif

#define L2HGEMM_NUM_SHAPES @COUNT@

typedef int (*l2hgemm_fn)(const void* A, const void* B, void* C, int M, int N, int K, void* stream);

int l2hgemm(const void* A, const void* B, void* C, int M, int N, int K, void* stream);

/* The fallback on its own (what l2hgemm runs for shapes it has no kernel for). */
int l2hgemm_fallback(const void* A, const void* B, void* C, int M, int N, int K, void* stream);

/* cublasGemmEx alone (fp32 compute): the fallback's last resort. */
int l2hgemm_cublas(const void* A, const void* B, void* C, int M, int N, int K, void* stream);

/* The fallback in use: 0 cublaslt-autotune, 1 cublaslt-heuristic, 2 cublas. */
int l2hgemm_fallback_mode(void);

/* Algorithms the autotune timed for (M, N, K) on the current device (256-byte aligned
 * pointers): > 0 once tuned, 0 not yet, -1 when it could not tune (heuristic or cuBLAS). */
int l2hgemm_fallback_tuned(int M, int N, int K);

/* 1 when (M, N, K) runs an exported kernel, 0 when it runs the fallback. */
int l2hgemm_has_kernel(int M, int N, int K);

/* Table introspection: shape i of L2HGEMM_NUM_SHAPES, and whether it runs a kernel. */
int l2hgemm_num_shapes(void);
int l2hgemm_shape(int i, int* M, int* N, int* K, int* has_kernel);

/* The exported kernels themselves, one per shape (same ABI as l2hgemm). */
@DECLS@

#ifdef __cplusplus
}
#endif

#endif /* L2HGEMM_H */
"""

#: the fallback (cuBLASLt autotuned per shape, cublasGemmEx last), shared by the combined
#: library's dispatcher and the runtime's fallback-only library; self-contained C++
_FALLBACK = r"""// ---------------------------------------------------------------------------------------------
// The fallback: what runs every shape without an exported kernel.
//
// cuBLASLt, with the fastest of its heuristic algorithms timed on the caller's stream the first
// time a shape is seen (a plain heuristic pick loses to autotuned cuBLASLt on some shapes, and the
// library promises never to be slower than the best library); cublasGemmEx is timed with them and
// runs the shapes where it wins.  It is also the last resort when cuBLASLt cannot run a call.  L2HGEMM_FALLBACK (read once) picks the path:
// cublaslt-autotune (default), cublaslt-heuristic (heuristic #1, never timed) or cublas.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

extern "C" int l2hgemm_cublas(const void* A, const void* B, void* C, int M, int N, int K, void* stream);

namespace l2fb {

constexpr int kMaxDevices = 64;
constexpr size_t kWorkspaceBytes = size_t(32) << 20;  // what cuBLAS itself uses on Hopper
constexpr int kMaxWorkspaces = 16;     // per device; streams beyond get algorithms without workspace
constexpr int kMaxAlgos = 32;          // heuristic candidates timed per shape
constexpr int kTimedBatches = 3;       // after one warm-up run
constexpr float kBatchMs = 0.2f;       // a timed batch lasts about this long (events resolve ~1 us)
constexpr int kMaxBatchReps = 64;
constexpr float kTuneBudgetMs = 1000.f;  // GPU time after which no further candidate is timed...
constexpr int kMinTimed = 4;             // ...once this many were

enum Mode { kAutotune = 0, kHeuristic = 1, kCublas = 2 };

int parse_mode(const char* s) {
  if (s == nullptr || *s == '\0' || std::strcmp(s, "cublaslt-autotune") == 0) return kAutotune;
  if (std::strcmp(s, "cublaslt-heuristic") == 0) return kHeuristic;
  if (std::strcmp(s, "cublas") == 0) return kCublas;
  std::fprintf(stderr,
               "l2hgemm: L2HGEMM_FALLBACK=%.64s is not cublaslt-autotune, cublaslt-heuristic or cublas; "
               "using cublaslt-autotune\n", s);
  return kAutotune;
}

// Read once: a process does not switch fallbacks half-way.
int mode() {
  static const int m = parse_mode(std::getenv("L2HGEMM_FALLBACK"));
  return m;
}

// Plan state bits, published (release) after the fields they guard are written.
enum : int { kHeurReady = 1, kTuned = 2, kTuneFailed = 4, kLtFailed = 8 };

// One (M, N, K, alignment) on one device: its layouts and chosen algorithms.  Never freed.
struct Plan {
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  std::mutex mu;  // one thread asks the heuristic / tunes this shape at a time
  std::atomic<int> state{0};
  cublasLtMatmulAlgo_t heur{}, best{};
  size_t heur_ws = 0, best_ws = 0;
  int timed = 0;  // algorithms the autotune timed (cublasGemmEx included)
  bool best_gemmex = false;  // cublasGemmEx beat every cuBLASLt candidate on this shape
};

using Key = std::array<int, 4>;  // M, N, K, pointer alignment

struct Device {
  std::once_flag once;
  int init_rc = 0;
  cublasLtHandle_t lt = nullptr;  // thread-safe: stream and workspace are per call
  cublasLtMatmulDesc_t op = nullptr;
  std::mutex mu;  // guards the maps; held for lookups and inserts only
  std::map<Key, Plan*> plans;
  std::map<uintptr_t, void*> workspaces;  // per stream: concurrent split-K runs must not share one
};

// Heap-allocated and never destroyed, so calls racing with process exit find them intact.
Device& device(int dev) {
  static Device* devices = new Device[kMaxDevices];
  return devices[dev];
}

int init(Device& d) {
  std::call_once(d.once, [&d] {
    cublasOperation_t op_n = CUBLAS_OP_N;
    if (cublasLtCreate(&d.lt) != CUBLAS_STATUS_SUCCESS) d.init_rc = 20;
    else if (cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS) d.init_rc = 21;
    else if (cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_n, sizeof op_n) != CUBLAS_STATUS_SUCCESS ||
             cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof op_n) != CUBLAS_STATUS_SUCCESS)
      d.init_rc = 22;
  });
  return d.init_rc;
}

// The largest power of two (at most 256, cuBLASLt's default assumption) dividing all three pointers.
int alignment(const void* A, const void* B, const void* C) {
  uintptr_t bits = reinterpret_cast<uintptr_t>(A) | reinterpret_cast<uintptr_t>(B) |
                   reinterpret_cast<uintptr_t>(C) | uintptr_t(256);
  return static_cast<int>(bits & (~bits + 1));
}

// Events and allocations are "unsafe" while another thread captures a graph in global mode;
// relaxed mode for this thread makes them legal (this thread's own stream is checked separately).
struct RelaxedCapture {
  cudaStreamCaptureMode prev = cudaStreamCaptureModeRelaxed;
  RelaxedCapture() { cudaThreadExchangeStreamCaptureMode(&prev); }
  ~RelaxedCapture() { cudaThreadExchangeStreamCaptureMode(&prev); }
};

// True when `s` is being captured into a graph, or when that cannot be asked (then: no timing).
bool capturing(cudaStream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &st) != cudaSuccess) {
    cudaGetLastError();  // do not leave our error for the caller's next check
    return true;
  }
  return st != cudaStreamCaptureStatusNone;
}

uintptr_t stream_key(cudaStream_t s) {
  if (s == cudaStreamPerThread) {  // one handle value, a different stream in every thread
    thread_local char token;
    return reinterpret_cast<uintptr_t>(&token);
  }
  return reinterpret_cast<uintptr_t>(s);
}

void destroy_layouts(Plan* p) {
  if (p->a) cublasLtMatrixLayoutDestroy(p->a);
  if (p->b) cublasLtMatrixLayoutDestroy(p->b);
  if (p->c) cublasLtMatrixLayoutDestroy(p->c);
}

Plan* plan_for(Device& d, const Key& key) {
  std::lock_guard<std::mutex> g(d.mu);
  auto it = d.plans.find(key);
  if (it != d.plans.end()) return it->second;
  const int M = key[0], N = key[1], K = key[2];
  Plan* p = new Plan;
  // Row-major C = A B is column-major C^T = B^T A^T: cuBLASLt's "A" is our B (N x K, ld N),
  // its "B" is our A (K x M, ld K), and C is N x M with ld N.
  if (cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16F, N, K, N) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16F, K, M, K) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatrixLayoutCreate(&p->c, CUDA_R_16F, N, M, N) != CUBLAS_STATUS_SUCCESS) {
    destroy_layouts(p);
    delete p;
    return nullptr;
  }
  d.plans.emplace(key, p);
  return p;
}

// This stream's workspace (allocated on first use; none while capturing or past the cap).
size_t workspace_for(Device& d, cudaStream_t s, void** ws) {
  const uintptr_t key = stream_key(s);
  std::lock_guard<std::mutex> g(d.mu);
  auto it = d.workspaces.find(key);
  if (it != d.workspaces.end()) {
    *ws = it->second;
    return it->second ? kWorkspaceBytes : 0;
  }
  *ws = nullptr;
  if (static_cast<int>(d.workspaces.size()) >= kMaxWorkspaces || capturing(s)) return 0;
  void* p = nullptr;
  {
    RelaxedCapture relaxed;
    if (cudaMalloc(&p, kWorkspaceBytes) != cudaSuccess) {
      cudaGetLastError();
      p = nullptr;  // remembered: out of memory is not retried on every call
    }
  }
  d.workspaces.emplace(key, p);
  *ws = p;
  return p ? kWorkspaceBytes : 0;
}

struct Call {
  const void* A;
  const void* B;
  void* C;
  cudaStream_t s;
  void* ws;
  size_t ws_size;
  int M, N, K;
};

cublasStatus_t run(const Device& d, const Plan& p, const cublasLtMatmulAlgo_t& algo, const Call& c) {
  const float alpha = 1.0f, beta = 0.0f;
  return cublasLtMatmul(d.lt, d.op, &alpha, c.B, p.a, c.A, p.b, &beta, c.C, p.c, c.C, p.c, &algo, c.ws,
                        c.ws_size, c.s);
}

// cuBLASLt's candidates for a plan, best first.  Split-K partial sums only in fp32 (the INPLACE and
// OUTPUT_TYPE schemes add them up in fp16, which would break the fp32-compute contract).
int candidates(const Device& d, const Plan& p, int align, size_t ws, cublasLtMatmulHeuristicResult_t* out,
               int max) {
  cublasLtMatmulPreference_t pref = nullptr;
  if (cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS) return 0;
  const uint64_t ws64 = ws;
  const uint32_t mask = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE, al = static_cast<uint32_t>(align);
  const cublasLtMatmulPreferenceAttributes_t aligns[] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  bool ok = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws64,
                                                 sizeof ws64) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &mask,
                                                 sizeof mask) == CUBLAS_STATUS_SUCCESS;
  for (auto attr : aligns)
    ok = ok && cublasLtMatmulPreferenceSetAttribute(pref, attr, &al, sizeof al) == CUBLAS_STATUS_SUCCESS;
  int n = 0;
  if (!ok || cublasLtMatmulAlgoGetHeuristic(d.lt, d.op, p.a, p.b, p.c, p.c, pref, max, out, &n) !=
                 CUBLAS_STATUS_SUCCESS)
    n = 0;
  cublasLtMatmulPreferenceDestroy(pref);
  int kept = 0;
  for (int i = 0; i < n; ++i)
    if (out[i].state == CUBLAS_STATUS_SUCCESS && out[i].workspaceSize <= ws) out[kept++] = out[i];
  return kept;
}

// Per-run milliseconds of `reps` back-to-back runs between two events, or -1.
float time_batch(const Device& d, const Plan& p, const cublasLtMatmulAlgo_t& algo, const Call& c, int reps,
                 cudaEvent_t e0, cudaEvent_t e1, float* spent) {
  if (cudaEventRecord(e0, c.s) != cudaSuccess) return -1.0f;
  for (int r = 0; r < reps; ++r)
    if (run(d, p, algo, c) != CUBLAS_STATUS_SUCCESS) return -1.0f;
  float ms = 0.0f;
  if (cudaEventRecord(e1, c.s) != cudaSuccess || cudaEventSynchronize(e1) != cudaSuccess ||
      cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess)
    return -1.0f;
  *spent += ms;
  return ms / reps;
}

// Times the candidates on the caller's stream (1 warm-up, then the fastest of kTimedBatches
// batches) and keeps the fastest in the plan.  The caller holds p.mu.  False when none ran.
bool autotune(const Device& d, Plan& p, int align, const Call& c) {
  cublasLtMatmulHeuristicResult_t cand[kMaxAlgos];
  const int n = candidates(d, p, align, c.ws_size, cand, kMaxAlgos);
  if (n == 0) return false;
  RelaxedCapture relaxed;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) {
    if (e0) cudaEventDestroy(e0);
    cudaGetLastError();
    return false;
  }
  int best = -1, timed = 0, reps = 0;
  float best_ms = INFINITY, spent = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (timed >= kMinTimed && spent > kTuneBudgetMs) break;
    if (run(d, p, cand[i].algo, c) != CUBLAS_STATUS_SUCCESS) {  // warm-up; some refuse a shape
      cudaGetLastError();
      continue;
    }
    if (reps == 0) {  // batch length from the first candidate that runs
      float one = time_batch(d, p, cand[i].algo, c, 1, e0, e1, &spent);
      if (one < 0.0f) break;  // events failing: the stream is unusable for timing
      reps = one > 0.0f ? static_cast<int>(std::ceil(kBatchMs / one)) : kMaxBatchReps;
      reps = reps < 1 ? 1 : (reps > kMaxBatchReps ? kMaxBatchReps : reps);
    }
    float ms = INFINITY;
    for (int b = 0; b < kTimedBatches; ++b) {
      float t = time_batch(d, p, cand[i].algo, c, reps, e0, e1, &spent);
      if (t < 0.0f) { ms = -1.0f; break; }
      ms = t < ms ? t : ms;
    }
    if (ms < 0.0f) {
      cudaGetLastError();
      continue;
    }
    ++timed;
    if (ms < best_ms) {
      best_ms = ms;
      best = i;
    }
  }
  // cublasGemmEx is a candidate too: its own algorithm choice beats every cuBLASLt candidate on
  // some shapes, and the fallback must not lose to plain cuBLAS.
  bool gemmex = false;
  if (reps > 0) {
    float ms = INFINITY;
    for (int b = 0; b < kTimedBatches; ++b) {
      if (cudaEventRecord(e0, c.s) != cudaSuccess) { ms = -1.0f; break; }
      bool ok = true;
      for (int r = 0; r < reps && ok; ++r) ok = l2hgemm_cublas(c.A, c.B, c.C, c.M, c.N, c.K, c.s) == 0;
      float t = 0.0f;
      if (!ok || cudaEventRecord(e1, c.s) != cudaSuccess || cudaEventSynchronize(e1) != cudaSuccess ||
          cudaEventElapsedTime(&t, e0, e1) != cudaSuccess) { ms = -1.0f; break; }
      spent += t;
      t /= reps;
      ms = t < ms ? t : ms;
    }
    if (ms >= 0.0f) {
      ++timed;
      gemmex = ms < best_ms;
    } else {
      cudaGetLastError();
    }
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  if (best < 0) {
    cudaGetLastError();
    return false;
  }
  p.best = cand[best].algo;
  p.best_ws = cand[best].workspaceSize;
  p.best_gemmex = gemmex;
  p.timed = timed;
  return true;
}

// Heuristic #1 for this call's workspace; cached when the workspace is the full one.
bool heuristic(const Device& d, Plan& p, int align, const Call& c, cublasLtMatmulAlgo_t* out) {
  int st = p.state.load(std::memory_order_acquire);
  if ((st & kHeurReady) && p.heur_ws <= c.ws_size) {
    *out = p.heur;
    return true;
  }
  cublasLtMatmulHeuristicResult_t r[1];
  if (c.ws_size != kWorkspaceBytes) {  // a smaller workspace than the plan's: ask, do not cache
    if (candidates(d, p, align, c.ws_size, r, 1) == 0) return false;
    *out = r[0].algo;
    return true;
  }
  std::lock_guard<std::mutex> g(p.mu);
  st = p.state.load(std::memory_order_acquire);
  if (!(st & kHeurReady)) {
    if (candidates(d, p, align, c.ws_size, r, 1) == 0) {
      p.state.fetch_or(kLtFailed, std::memory_order_release);  // cuBLASLt has nothing for this shape
      return false;
    }
    p.heur = r[0].algo;
    p.heur_ws = r[0].workspaceSize;
    p.state.fetch_or(kHeurReady, std::memory_order_release);
  }
  *out = p.heur;
  return true;
}

// The algorithm for this call: the autotuned one (tuning now on first use, never during a graph
// capture, where events and synchronization are illegal), else heuristic #1.  *gemmex is set
// when the tuning found cublasGemmEx faster than every cuBLASLt algorithm.
bool choose(const Device& d, Plan& p, int align, const Call& c, int m, cublasLtMatmulAlgo_t* out,
            bool* gemmex) {
  *gemmex = false;
  if (m == kAutotune) {
    int st = p.state.load(std::memory_order_acquire);
    if ((st & kTuned) && p.best_gemmex) {
      *gemmex = true;
      return true;
    }
    if ((st & kTuned) && p.best_ws <= c.ws_size) {
      *out = p.best;
      return true;
    }
    if (!(st & (kTuned | kTuneFailed)) && c.ws_size == kWorkspaceBytes && !capturing(c.s)) {
      std::lock_guard<std::mutex> g(p.mu);
      st = p.state.load(std::memory_order_acquire);
      if (!(st & (kTuned | kTuneFailed))) {
        const int bit = autotune(d, p, align, c) ? kTuned : kTuneFailed;
        st = p.state.fetch_or(bit, std::memory_order_release) | bit;
      }
      if ((st & kTuned) && p.best_gemmex) {
        *gemmex = true;
        return true;
      }
      if (st & kTuned) {
        *out = p.best;
        return true;
      }
    }
  }
  return heuristic(d, p, align, c, out);
}

// C = A B through cuBLASLt; non-zero when cuBLASLt cannot (the caller then uses cublasGemmEx).
int lt_gemm(const void* A, const void* B, void* C, int M, int N, int K, cudaStream_t s, int m) {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return 30;
  }
  if (dev < 0 || dev >= kMaxDevices) return 30;
  Device& d = device(dev);
  if (init(d) != 0) return 31;
  const int align = alignment(A, B, C);
  Plan* p = plan_for(d, Key{M, N, K, align});
  if (p == nullptr || (p->state.load(std::memory_order_acquire) & kLtFailed)) return 32;
  Call c{A, B, C, s, nullptr, 0, M, N, K};
  c.ws_size = workspace_for(d, s, &c.ws);
  cublasLtMatmulAlgo_t algo;
  bool gemmex = false;
  if (!choose(d, *p, align, c, m, &algo, &gemmex)) return 33;
  if (gemmex) return 35;  // the caller runs cublasGemmEx, the tuned winner
  if (run(d, *p, algo, c) != CUBLAS_STATUS_SUCCESS) {  // after tuning: the winner runs last
    cudaGetLastError();
    return 34;
  }
  return 0;
}

}  // namespace l2fb

extern "C" int l2hgemm_cublas(const void* A, const void* B, void* C, int M, int N, int K, void* stream) {
  if (M < 0 || N < 0 || K < 0) return 1;
  if (M == 0 || N == 0) return 0;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= l2fb::kMaxDevices) return 3;
  // One handle per thread and device: a handle's workspace must not be shared by
  // streams running concurrently.  Handles live until the process ends.
  thread_local cublasHandle_t handles[l2fb::kMaxDevices] = {};
  if (handles[dev] == nullptr && cublasCreate(&handles[dev]) != CUBLAS_STATUS_SUCCESS) return 4;
  cublasHandle_t h = handles[dev];
  if (cublasSetStream(h, static_cast<cudaStream_t>(stream)) != CUBLAS_STATUS_SUCCESS) return 5;
  const float alpha = 1.0f, beta = 0.0f;
  // Row-major C = A B is column-major C^T = B^T A^T.
  cublasStatus_t st = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &alpha, B, CUDA_R_16F, N, A,
                                   CUDA_R_16F, K, &beta, C, CUDA_R_16F, N, CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT);
  return st == CUBLAS_STATUS_SUCCESS ? 0 : 6;
}

extern "C" int l2hgemm_fallback(const void* A, const void* B, void* C, int M, int N, int K, void* stream) {
  if (M < 0 || N < 0 || K < 0) return 1;
  if (M == 0 || N == 0) return 0;
  const int m = l2fb::mode();
  // K == 0 (C = 0) is cublasGemmEx's: cuBLASLt layouts need a positive leading dimension.
  if (m != l2fb::kCublas && K > 0 &&
      l2fb::lt_gemm(A, B, C, M, N, K, static_cast<cudaStream_t>(stream), m) == 0)
    return 0;
  return l2hgemm_cublas(A, B, C, M, N, K, stream);
}

extern "C" int l2hgemm_fallback_mode(void) { return l2fb::mode(); }

extern "C" int l2hgemm_fallback_tuned(int M, int N, int K) {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  if (dev < 0 || dev >= l2fb::kMaxDevices) return 0;
  l2fb::Device& d = l2fb::device(dev);
  std::lock_guard<std::mutex> g(d.mu);
  auto it = d.plans.find(l2fb::Key{M, N, K, 256});
  if (it == d.plans.end()) return 0;
  const int st = it->second->state.load(std::memory_order_acquire);
  if (st & l2fb::kTuned) return it->second->timed;
  return (st & (l2fb::kTuneFailed | l2fb::kLtFailed)) ? -1 : 0;
}
"""

_DISPATCH = """\
// Generated by `l2tui export`: the shape dispatcher of libl2hgemm.so.
// Do not edit; re-export instead.  See l2hgemm.h for the contract.
#include <cstddef>

#include "l2hgemm.h"

@FALLBACK@
// ---------------------------------------------------------------------------------------------
// The shape table.
namespace {

struct Entry {
  int m, n, k;
  l2hgemm_fn fn;  // nullptr: a library was measured faster for this shape (the fallback runs it)
};

// Sorted by (M, N, K) for binary search.
@BEGIN@
const Entry kTable[] = {
@ROWS@
};
@END@
constexpr int kCount = @COUNT@;

const Entry* find(int m, int n, int k) {
  int lo = 0, hi = kCount - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    const Entry& e = kTable[mid];
    if (e.m == m && e.n == n && e.k == k) return &e;
    bool less = e.m < m || (e.m == m && (e.n < n || (e.n == n && e.k < k)));
    if (less) lo = mid + 1; else hi = mid - 1;
  }
  return nullptr;
}

// Calls of one exported kernel never overlap. A kernel may keep its launch arguments, and a
// stream-K or split-K one its workspace, once per process (the kernel ABI allows it), so two calls
// of one shape at once (two threads, or two streams) could race on the host, or on the GPU mix
// each other's partial sums or deadlock on each other's barriers. Per kernel, a mutex orders the
// host side, and an event recorded after each call makes a call on another stream wait for it on
// the GPU. A stream being captured into a CUDA graph neither waits nor records (an event recorded
// outside the capture cannot be waited on inside it): the caller orders graph launches.
struct Guard {
  std::mutex mu;
  cudaEvent_t done = nullptr;   // recorded after the last call made outside a capture ...
  cudaStream_t last = nullptr;  // ... on this stream
  bool pending = false;
};

Guard& guard(const Entry* e) {
  static Guard guards[kCount > 0 ? kCount : 1];
  return guards[e - kTable];
}

int call_ordered(const Entry* e, const void* A, const void* B, void* C, int M, int N, int K, void* stream) {
  Guard& g = guard(e);
  std::lock_guard<std::mutex> lock(g.mu);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &cap) != cudaSuccess) {  // e.g. the legacy stream during a global capture
    cudaGetLastError();
    cap = cudaStreamCaptureStatusActive;
  }
  const bool captured = cap != cudaStreamCaptureStatusNone;
  // cudaStreamPerThread is one handle for a different stream in every thread: always wait
  if (!captured && g.pending && (s != g.last || s == cudaStreamPerThread)) {
    if (cudaStreamWaitEvent(s, g.done, 0) != cudaSuccess) cudaGetLastError();
  }
  const int rc = e->fn(A, B, C, M, N, K, stream);
  if (rc == 0 && !captured) {
    if (g.done == nullptr && cudaEventCreateWithFlags(&g.done, cudaEventDisableTiming) != cudaSuccess) {
      cudaGetLastError();
      g.done = nullptr;
    }
    g.pending = g.done != nullptr && cudaEventRecord(g.done, s) == cudaSuccess;
    if (!g.pending) cudaGetLastError();
    g.last = s;
  }
  return rc;
}

}  // namespace

extern "C" int l2hgemm(const void* A, const void* B, void* C, int M, int N, int K, void* stream) {
  const Entry* e = find(M, N, K);
  if (e != nullptr && e->fn != nullptr && call_ordered(e, A, B, C, M, N, K, stream) == 0) return 0;
  return l2hgemm_fallback(A, B, C, M, N, K, stream);
}

extern "C" int l2hgemm_has_kernel(int M, int N, int K) {
  const Entry* e = find(M, N, K);
  return e != nullptr && e->fn != nullptr;
}

extern "C" int l2hgemm_num_shapes(void) { return kCount; }

extern "C" int l2hgemm_shape(int i, int* M, int* N, int* K, int* has_kernel) {
  if (i < 0 || i >= kCount) return 1;
  if (M) *M = kTable[i].m;
  if (N) *N = kTable[i].n;
  if (K) *K = kTable[i].k;
  if (has_kernel) *has_kernel = kTable[i].fn != nullptr;
  return 0;
}
"""

_FALLBACK_LIBRARY = """\
// Generated by l2tui: the fallback of an export on its own, in the kernel ABI, for
// l2tui.runtime where no combined libl2hgemm.so was built for this GPU.  See l2hgemm.h.
@FALLBACK@
extern "C" int l2_hgemm(const void* A, const void* B, void* C, int M, int N, int K, void* stream) {
  return l2hgemm_fallback(A, B, C, M, N, K, stream);
}
"""

_EXPORTS = """\
{
  global:
    l2hgemm;
    l2hgemm_*;
    l2_hgemm_*;
  local:
    *;
};
"""

_CMAKE = """\
# l2hgemm.cmake: link the HGEMM library exported by l2tui.
#
#   include(path/to/export/l2hgemm.cmake)
#   target_link_libraries(my_app PRIVATE l2hgemm::l2hgemm)
#
# Needs cuBLAS and cuBLASLt at run time.  The library was built for {arch}.
cmake_minimum_required(VERSION 3.18)
find_package(CUDAToolkit REQUIRED)
set(L2HGEMM_ROOT "${{CMAKE_CURRENT_LIST_DIR}}")
if(NOT EXISTS "${{L2HGEMM_ROOT}}/{lib}")
  message(FATAL_ERROR "l2hgemm: ${{L2HGEMM_ROOT}}/{lib} is missing; run `l2tui export SESSION --out DIR --build` (or sh build.sh)")
endif()
if(NOT TARGET l2hgemm::l2hgemm)
  add_library(l2hgemm::l2hgemm SHARED IMPORTED)
  set_target_properties(l2hgemm::l2hgemm PROPERTIES
    IMPORTED_LOCATION "${{L2HGEMM_ROOT}}/{lib}"
    IMPORTED_SONAME "libl2hgemm.so"
    INTERFACE_INCLUDE_DIRECTORIES "${{L2HGEMM_ROOT}}/include")
  # libl2hgemm.so finds cuBLAS and cuBLASLt itself (DT_NEEDED + RUNPATH); these give your code
  # the CUDA headers and the same libraries on its link line
  target_link_libraries(l2hgemm::l2hgemm INTERFACE CUDA::cudart)
  if(TARGET CUDA::cublas)
    target_link_libraries(l2hgemm::l2hgemm INTERFACE CUDA::cublas)
  endif()
  if(TARGET CUDA::cublasLt)
    target_link_libraries(l2hgemm::l2hgemm INTERFACE CUDA::cublasLt)
  endif()
endif()
"""

_CMAKE_EXAMPLE = """\
# Example: a program that calls the exported HGEMM library.
#   cmake -S . -B build && cmake --build build && ./build/l2hgemm_example
cmake_minimum_required(VERSION 3.18)
project(l2hgemm_example LANGUAGES CXX)
include(${CMAKE_CURRENT_SOURCE_DIR}/l2hgemm.cmake)
add_executable(l2hgemm_example src/example.cpp)
target_link_libraries(l2hgemm_example PRIVATE l2hgemm::l2hgemm)
"""

_EXAMPLE = """\
// Calls l2hgemm on every exported shape and on one shape it has no kernel for.
#include <cstdio>
#include <cuda_runtime.h>
#include "l2hgemm.h"

int main() {
  int shapes = l2hgemm_num_shapes();
  int extra[3] = {96, 80, 48};  // not exported: runs the fallback (cuBLASLt, autotuned on this first call)
  for (int i = 0; i <= shapes; ++i) {
    int M, N, K, has = 0;
    if (i < shapes) l2hgemm_shape(i, &M, &N, &K, &has);
    else { M = extra[0]; N = extra[1]; K = extra[2]; }
    void *A, *B, *C;
    cudaMalloc(&A, (size_t)M * K * 2); cudaMalloc(&B, (size_t)K * N * 2); cudaMalloc(&C, (size_t)M * N * 2);
    cudaMemset(A, 0, (size_t)M * K * 2); cudaMemset(B, 0, (size_t)K * N * 2);
    int rc = l2hgemm(A, B, C, M, N, K, nullptr);
    cudaError_t err = cudaDeviceSynchronize();
    std::printf("%dx%dx%d %s rc=%d %s\\n", M, N, K, has ? "kernel" : "fallback", rc, cudaGetErrorString(err));
    cudaFree(A); cudaFree(B); cudaFree(C);
    if (rc != 0 || err != cudaSuccess) return 1;
  }
  return 0;
}
"""


def render_header(manifest: dict) -> str:
    ents = entries_from_manifest(manifest)
    decls = "\n".join(
        f"int {e.symbol}(const void* A, const void* B, void* C, int M, int N, int K, void* stream);"
        for e in ents if e.symbol
    ) or "/* (none: every shape runs the fallback) */"
    return _fill(_HEADER, ARCH=safe_label(manifest.get("arch")), COUNT=str(len(ents)), DECLS=decls)


def render_dispatch(manifest: dict) -> str:
    ents = entries_from_manifest(manifest)
    rows = [
        f"    {{{e.m}, {e.n}, {e.k}, {'&' + e.symbol if e.symbol else 'nullptr'}}},  // {e.note}"
        for e in ents
    ]
    if not rows:
        rows = ["    {0, 0, 0, nullptr},  // (empty export: never matches real shapes)"]
    return _fill(_DISPATCH, FALLBACK=_FALLBACK, BEGIN=TABLE_BEGIN, END=TABLE_END, ROWS="\n".join(rows),
                 COUNT=str(len(ents)))


def render_fallback_library() -> str:
    """The fallback alone as an ABI kernel source (``l2_hgemm`` = ``l2hgemm_fallback``).

    :mod:`l2tui.runtime` builds it with the harness's cached nvcc driver when no combined
    library was built for the GPU at hand, so Python callers get the same fallback as C ones.
    The text does not depend on the export, so one build serves every export on a machine.
    """
    return _fill(_FALLBACK_LIBRARY, FALLBACK=_FALLBACK)


def _fill(template: str, **values: str) -> str:
    """``@NAME@`` placeholders (not ``str.format``: the C++ is full of braces)."""
    out = template
    for name, value in values.items():
        out = out.replace(f"@{name}@", value)
    left = re.search(r"@[A-Z]+@", out)
    if left:
        raise AssertionError(f"unfilled placeholder {left.group(0)} in generated source")
    return out


def parse_table(dispatch_source: str) -> list[tuple[int, int, int, str | None]]:
    """Read the dispatch table back from generated source (what the tests check against the manifest)."""
    body = dispatch_source.split(TABLE_BEGIN, 1)[1].split(TABLE_END, 1)[0]
    rows = re.findall(r"\{(\d+), (\d+), (\d+), (&l2_hgemm_\d+_\d+_\d+|nullptr)\}", body)
    return [(int(m), int(n), int(k), None if fn == "nullptr" else fn[1:]) for m, n, k, fn in rows
            if (m, n, k) != ("0", "0", "0")]


def _checked_name(e: dict) -> tuple[str, str]:
    """A kernel entry's file stem and symbol, re-derived from its shape (digits and underscores only)."""
    shape = e.get("shape")
    if not isinstance(shape, list) or len(shape) != 3:
        raise HarnessError("an export entry's shape is not [M, N, K]; re-run l2tui export")
    name, sym = kernel_name(*shape), symbol_name(*shape)
    if e.get("name") != name or e.get("symbol") != sym:
        raise HarnessError(f"export entry {name}: name or symbol does not match its shape; re-run l2tui export")
    return name, sym


def render_build_script(manifest: dict, arch_flags: Sequence[str]) -> str:
    """A POSIX sh script that rebuilds lib/libl2hgemm.so with the same steps as ``--build``.

    Every value in it is either a constant, derived from a checked shape (digits), an nvcc flag
    from :func:`check_flags`' allow-list, or a checked architecture name, and each is quoted as one
    shell word anyway.
    """
    from .values import check_arch

    for f in arch_flags:
        if not _GENCODE_OK.match(f):
            raise HarnessError("the export's architecture flags are not nvcc -gencode flags; pass --arch sm_90a")
    check_arch(manifest.get("arch"), "the export's arch")
    lines = [
        "#!/bin/sh",
        "# Rebuild lib/libl2hgemm.so from the exported sources (what `l2tui export --build` does).",
        "# Needs nvcc, nm and objcopy; CUTLASS headers via CUTLASS_INC=\"-I/path/include -I/path/tools/util/include\".",
        "set -eu",
        'cd "$(dirname "$0")"',
        'NVCC="${NVCC:-nvcc}"',
        # the default is a single-quoted word: nothing recorded in a session is ever expanded by the shell
        f'ARCH_DEFAULT={sh_word(" ".join(arch_flags))}',
        'ARCH="${ARCH:-$ARCH_DEFAULT}"',
        'CUTLASS_INC="${CUTLASS_INC:-}"',
        '# cuBLAS/cuBLASLt outside the toolkit (the nvidia-cublas wheel): CUBLAS_INC="-I.../include" CUBLAS_LINK="-L.../lib"',
        'CUBLAS_INC="${CUBLAS_INC:-}"',
        'CUBLAS_LINK="${CUBLAS_LINK:-}"',
        "OBJ=$(mktemp -d)",
        "trap 'rm -rf \"$OBJ\"' EXIT",
        "mkdir -p lib",
    ]
    libs = set(CUBLAS_LIBS)
    for e in manifest["kernels"]:
        if e.get("fallback"):
            continue
        name, sym = _checked_name(e)
        ok_flags = check_flags(e.get("flags", []), e["file"])
        flags = " ".join(sh_word(f) for f in ok_flags if not f.startswith("-l"))
        libs.update(f for f in ok_flags if f.startswith("-l"))
        lines += [
            f'"$NVCC" -c -O3 -std=c++17 -Xcompiler=-fPIC --expt-relaxed-constexpr $ARCH $CUTLASS_INC $CUBLAS_INC {flags} '
            f'-Dl2_hgemm={sym} kernels/{name}.cu -o "$OBJ/{name}.o"',
            f'nm --defined-only -g "$OBJ/{name}.o" | awk \'$3 != "{sym}" {{print $3, $3 "__l2k_{name}"}}\' > "$OBJ/{name}.syms"',
            f'objcopy --redefine-syms="$OBJ/{name}.syms" "$OBJ/{name}.o"',
        ]
    lines += [
        '"$NVCC" -c -O3 -std=c++17 -Xcompiler=-fPIC $ARCH $CUBLAS_INC -Iinclude src/l2hgemm_dispatch.cu -o "$OBJ/dispatch.o"',
        f'"$NVCC" -shared $ARCH "$OBJ"/*.o -o {LIB_FILE} -Xlinker --version-script=src/l2hgemm.map -Xlinker -soname=libl2hgemm.so $CUBLAS_LINK {" ".join(sh_word(x) for x in sorted(libs))}',
        f'echo "built {LIB_FILE}"',
    ]
    return "\n".join(lines) + "\n"


def write_sources(root: Path, manifest: dict, arch_flags: Sequence[str]) -> list[str]:
    """Write header, dispatcher, exports map, CMake files and build.sh into an export folder."""
    files = {
        HEADER_FILE: render_header(manifest),
        DISPATCH_FILE: render_dispatch(manifest),
        EXPORTS_FILE: _EXPORTS,
        CMAKE_FILE: _CMAKE.format(arch=safe_label(manifest.get("arch")), lib=LIB_FILE),
        CMAKE_EXAMPLE: _CMAKE_EXAMPLE,
        "src/example.cpp": _EXAMPLE,
        BUILD_SCRIPT: render_build_script(manifest, arch_flags),
    }
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    os.chmod(root / BUILD_SCRIPT, 0o755)
    return sorted(files)


# --------------------------------------------------------------------------- building


def cublas_flags() -> list[str]:
    """nvcc flags that find cuBLAS and cuBLASLt here (toolkit or the nvidia-cublas wheel), from the harness.

    The harness looks for cuBLAS; the fallback also needs cuBLASLt, which ships next
    to it in both layouts.  Checked here so a missing one is a one-line error, not a
    link failure deep in the build log.
    """
    try:
        from harness.baselines import cublas_build_flags
    except ImportError:  # older harness: rely on the toolkit next to nvcc
        return []
    flags = list(cublas_build_flags())
    libdirs = [Path(f[2:]) for f in flags if f.startswith("-L")]
    if libdirs and not any(any(d.glob("libcublasLt.so*")) for d in libdirs):
        raise ToolMissing(f"cuBLASLt not found next to cuBLAS in {libdirs[0]}: install nvidia-cublas or a full CUDA toolkit")
    return flags


def _tool(name: str) -> str:
    p = shutil.which(name)
    if not p:
        raise ToolMissing(f"{name} not found: install binutils (it comes with the compiler toolchain)")
    return p


def _run(cmd: list[str], what: str, cwd: Path, timeout_s: float) -> None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise HarnessError(f"{what}: timed out after {timeout_s:.0f} s; retry with fewer shapes (--shapes)") from None
    if proc.returncode != 0:
        log = (proc.stderr or proc.stdout or "").strip().splitlines()
        errs = [ln for ln in log if "error" in ln.lower()] or log[-1:] or [f"exit status {proc.returncode}"]
        raise HarnessError(f"{what} failed: {errs[0].strip()[:300]}")


def _defined_globals(nm: str, obj: Path) -> list[str]:
    proc = subprocess.run([nm, "--defined-only", "-g", str(obj)], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise HarnessError(f"nm {obj.name} failed: {proc.stderr.strip()[:200]}")
    out = []
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            out.append(parts[-1])
    return out


@dataclass
class LibraryBuild:
    so_path: Path
    arch: str
    nvcc_version: str
    sha256: str
    seconds: float


def build_library(
    root: Path,
    manifest: dict,
    *,
    arch: str,
    jobs: int | None = None,
    timeout_s: float = 1800.0,
    progress: Callable[[str], None] | None = None,
) -> LibraryBuild:
    """Compile every non-fallback kernel of an export folder plus the dispatcher into one .so."""
    import time

    from harness.build import ARCH_GENCODE, cutlass_include_dirs, normalize_arch, nvcc_path, nvcc_version

    t0 = time.monotonic()
    arch_n = normalize_arch(arch)
    gencode = ARCH_GENCODE[arch_n]
    nvcc, nm, objcopy = nvcc_path(), _tool("nm"), _tool("objcopy")
    cub = cublas_flags()
    incs = [f"-I{d}" for d in cutlass_include_dirs()] + [f for f in cub if f.startswith("-I")]
    link_extra = [f for f in cub if not f.startswith("-I")]
    common = ["-c", "-O3", "-std=c++17", "-Xcompiler=-fPIC", "--expt-relaxed-constexpr", *gencode]
    write_sources(root, manifest, gencode)
    kernels = [e for e in manifest["kernels"] if not e.get("fallback")]
    libs = set(CUBLAS_LIBS)
    for e in kernels:
        e["_flags"] = check_flags(e.get("flags", []), e["file"])
        libs.update(f for f in e["_flags"] if f.startswith("-l"))
    tmp = Path(tempfile.mkdtemp(prefix="l2hgemm-build-"))
    try:
        def one(e: dict) -> Path:
            name, sym = e["name"], e["symbol"]
            obj = tmp / f"{name}.o"
            flags = [f for f in e["_flags"] if not f.startswith("-l")]
            _run([nvcc, *common, *incs, *flags, f"-Dl2_hgemm={sym}", str(root / e["file"]), "-o", str(obj)],
                 f"compiling {e['file']}", root, timeout_s)
            defined = _defined_globals(nm, obj)
            if sym not in defined:
                raise HarnessError(f"{e['file']} does not define l2_hgemm as an extern \"C\" non-static function")
            syms = tmp / f"{name}.syms"
            syms.write_text("".join(f"{s} {s}__l2k_{name}\n" for s in defined if s != sym))
            _run([objcopy, f"--redefine-syms={syms}", str(obj)], f"renaming symbols of {e['file']}", root, 300)
            if progress:
                progress(f"compiled {e['file']}")
            return obj

        with ThreadPoolExecutor(max_workers=jobs or max(1, os.cpu_count() or 1)) as pool:
            objs = list(pool.map(one, kernels))
        disp = tmp / "dispatch.o"
        _run([nvcc, *common, *incs, f"-I{root / 'include'}", str(root / DISPATCH_FILE), "-o", str(disp)],
             "compiling the dispatcher", root, timeout_s)
        so = root / LIB_FILE
        so.parent.mkdir(parents=True, exist_ok=True)
        _run([nvcc, "-shared", *gencode, *map(str, objs), str(disp), "-o", str(so),
              "-Xlinker", f"--version-script={root / EXPORTS_FILE}", "-Xlinker", "-soname=libl2hgemm.so",
              *link_extra, *sorted(libs)],
             "linking libl2hgemm.so", root, timeout_s)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        for e in kernels:
            e.pop("_flags", None)
    digest = hashlib.sha256(so.read_bytes()).hexdigest()
    return LibraryBuild(so, arch_n, nvcc_version(), digest, time.monotonic() - t0)


def exported_symbols(so: Path) -> set[str]:
    """Dynamic symbols a shared library defines (``nm -D --defined-only``)."""
    proc = subprocess.run([_tool("nm"), "-D", "--defined-only", str(so)], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise HarnessError(f"nm -D {so} failed: {proc.stderr.strip()[:200]}")
    return {ln.split()[-1] for ln in proc.stdout.splitlines() if ln.strip()}
