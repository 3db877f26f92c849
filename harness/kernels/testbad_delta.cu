// l2tui ADVERSARIAL test kernel (must be rejected): updates its last product instead of computing.
// It keeps a copy of the A and B it last saw and the fp32 product of them. Every call diffs A and B
// against the copies; when B is unchanged and at most DELTA_CAP elements of A changed, it adds
// (new - old) x B[k] to row r of the kept product for each changed A[r][k] and writes all of C from
// it; otherwise it multiplies in full. So it is right on every call, on unchanged inputs, on
// wholly new ones and after a sparse change, and a call that follows a change of one element of A
// (every per-call, server and fresh-graph call) costs a read of A and B, not a GEMM.
// Expected failure: check 'fresh', part (3) (a call right after a dense change of A costs far more
// than one right after a one-element change).
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#define T 16
#define DELTA_CAP 1024

struct DeltaState {
  unsigned int changed;  // elements of A that differ from the copy (counted past DELTA_CAP too)
  unsigned int b_changed;
  unsigned int valid;    // the kept product is that of the copies
};

struct Change {
  unsigned long long at;  // r * K + k
  float delta;            // new - old
};

__global__ void diff_inputs(const unsigned short* A, const unsigned short* B, unsigned short* copy_a,
                            unsigned short* copy_b, size_t na, size_t nb, DeltaState* st, Change* list) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < na + nb; i += stride) {
    if (i < na) {
      const unsigned short now = A[i], was = copy_a[i];
      if (now != was) {
        const unsigned int slot = atomicAdd(&st->changed, 1u);
        if (slot < DELTA_CAP) {
          list[slot].at = i;
          list[slot].delta = __half2float(__ushort_as_half(now)) - __half2float(__ushort_as_half(was));
        }
        copy_a[i] = now;
      }
    } else {
      const unsigned short now = B[i - na];
      if (now != copy_b[i - na]) {
        st->b_changed = 1u;
        copy_b[i - na] = now;
      }
    }
  }
}

__global__ void update_or_multiply(const __half* A, const __half* B, __half* C, float* kept, int M, int N, int K,
                                   const DeltaState* st, const Change* list) {
  __shared__ float As[T][T];
  __shared__ float Bs[T][T];
  int row = blockIdx.y * T + threadIdx.y, col = blockIdx.x * T + threadIdx.x;
  const bool update = st->valid && !st->b_changed && st->changed <= DELTA_CAP;
  if (update) {  // the kept product plus every change's contribution to this row
    if (row < M && col < N) {
      float acc = kept[(size_t)row * N + col];
      for (unsigned int j = 0; j < st->changed; ++j) {
        const unsigned long long at = list[j].at;
        if (at / K == (unsigned long long)row) acc += list[j].delta * __half2float(B[(at % K) * N + col]);
      }
      kept[(size_t)row * N + col] = acc;
      C[(size_t)row * N + col] = __float2half(acc);
    }
    return;
  }
// l2: test gemm loop
  if (row < M && col < N) {
    kept[(size_t)row * N + col] = acc;
    C[(size_t)row * N + col] = __float2half(acc);
  }
}

__global__ void settle(DeltaState* st) {
  st->valid = 1u;
  st->changed = 0u;
  st->b_changed = 0u;
}

static DeltaState* g_state = nullptr;
static Change* g_list = nullptr;
static unsigned short* g_copy = nullptr;  // A's copy, then B's
static float* g_kept = nullptr;
static size_t g_copy_elems = 0, g_kept_elems = 0;
static int g_m = -1, g_n = -1, g_k = -1;

extern "C" int l2_hgemm(const void* A, const void* B, void* C, int M, int N, int K, void* stream) {
  cudaStream_t s = (cudaStream_t)stream;
  const size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N;
  if (!g_state) {
    if (cudaMalloc(&g_state, sizeof(DeltaState)) != cudaSuccess) return 2;
    if (cudaMalloc(&g_list, DELTA_CAP * sizeof(Change)) != cudaSuccess) return 2;
  }
  if (na + nb > g_copy_elems) {  // first call of a bigger shape (never during graph capture)
    if (g_copy) cudaFree(g_copy);
    if (cudaMalloc(&g_copy, (na + nb) * sizeof(unsigned short)) != cudaSuccess) return 2;
    g_copy_elems = na + nb;
  }
  if (nc > g_kept_elems) {
    if (g_kept) cudaFree(g_kept);
    if (cudaMalloc(&g_kept, nc * sizeof(float)) != cudaSuccess) return 2;
    g_kept_elems = nc;
  }
  if (M != g_m || N != g_n || K != g_k) {  // another shape: nothing kept is of use
    if (cudaMemsetAsync(g_state, 0, sizeof(DeltaState), s) != cudaSuccess) return 2;
    g_m = M;
    g_n = N;
    g_k = K;
  }
  diff_inputs<<<264, 256, 0, s>>>((const unsigned short*)A, (const unsigned short*)B, g_copy, g_copy + na, na, nb,
                                  g_state, g_list);
  dim3 block(T, T), grid((N + T - 1) / T, (M + T - 1) / T);
  update_or_multiply<<<grid, block, 0, s>>>((const __half*)A, (const __half*)B, (__half*)C, g_kept, M, N, K, g_state,
                                            g_list);
  settle<<<1, 1, 0, s>>>(g_state);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
