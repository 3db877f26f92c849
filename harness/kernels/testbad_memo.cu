// l2tui ADVERSARIAL test kernel (must be rejected): memoizes by content. Every call hashes A and
// B on the GPU; when the hash matches the last computed problem it copies the cached C instead of
// multiplying. It passes every check that re-runs it on unchanged inputs (deterministic, graph
// replay) or on wholly new ones (stale), and times as a hash plus a copy.
//   MEMO_SAMPLES 0: hash every element, so it is correct on any input; expected failure: check
//                   'fresh', timing part (a call right after a change of A costs far more than
//                   a call in the timed graph)
//   MEMO_SAMPLES n: hash n fixed positions of each matrix (cheaper; stale after a sparse change);
//                   expected failure: check 'fresh', correctness part
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#define T 16
#define MEMO_SAMPLES 0

struct MemoState {
  unsigned long long cur;     // hash of this call's inputs (reset to 0 by commit)
  unsigned long long cached;  // hash of the inputs whose product is in the cache
  int valid;
};

__device__ __forceinline__ unsigned long long mix(unsigned long long i, unsigned short bits) {
  unsigned long long x = (i + 1) * 0x9E3779B97F4A7C15ull ^ (bits + 0x51ull) * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 31;
  return x * 0x94D049BB133111EBull;
}

__global__ void hash_all(const unsigned short* A, const unsigned short* B, size_t na, size_t nb, MemoState* st) {
  unsigned long long h = 0;
#if MEMO_SAMPLES == 0
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < na + nb; i += stride)
    h ^= mix(i, i < na ? A[i] : B[i - na]);
#else
  if (blockIdx.x == 0 && threadIdx.x < 2 * MEMO_SAMPLES) {  // fixed, evenly spread positions
    const int j = threadIdx.x % MEMO_SAMPLES;
    const size_t i = threadIdx.x < MEMO_SAMPLES ? (na - 1) * j / MEMO_SAMPLES : na + (nb - 1) * j / MEMO_SAMPLES;
    h = mix(i, i < na ? A[i] : B[i - na]);
  }
#endif
  for (int o = 16; o > 0; o >>= 1) h ^= __shfl_xor_sync(0xffffffffu, h, o);
  if ((threadIdx.x & 31) == 0) atomicXor(&st->cur, h);
}

__global__ void gemm_or_copy(const __half* A, const __half* B, __half* C, __half* cache, int M, int N, int K,
                             const MemoState* st) {
  int row = blockIdx.y * T + threadIdx.y, col = blockIdx.x * T + threadIdx.x;
  if (st->valid && st->cur == st->cached) {  // seen these inputs: replay the cached answer
    if (row < M && col < N) C[(size_t)row * N + col] = cache[(size_t)row * N + col];
    return;
  }
  __shared__ float As[T][T];
  __shared__ float Bs[T][T];
// l2: test gemm loop
  if (row < M && col < N) {
    __half v = __float2half(acc);
    C[(size_t)row * N + col] = v;
    cache[(size_t)row * N + col] = v;
  }
}

__global__ void commit(MemoState* st) {
  st->cached = st->cur;
  st->valid = 1;
  st->cur = 0;
}

static MemoState* g_state = nullptr;
static __half* g_cache = nullptr;
static size_t g_cache_elems = 0;

extern "C" int l2_hgemm(const void* A, const void* B, void* C, int M, int N, int K, void* stream) {
  cudaStream_t s = (cudaStream_t)stream;
  const size_t elems = (size_t)M * N;
  if (!g_state) {
    if (cudaMalloc(&g_state, sizeof(MemoState)) != cudaSuccess) return 2;
    cudaMemset(g_state, 0, sizeof(MemoState));
  }
  if (elems > g_cache_elems) {  // first call of a bigger shape (never during graph capture)
    if (g_cache) cudaFree(g_cache);
    if (cudaMalloc(&g_cache, elems * sizeof(__half)) != cudaSuccess) return 2;
    g_cache_elems = elems;
    cudaMemset(g_state, 0, sizeof(MemoState));
  }
  hash_all<<<264, 256, 0, s>>>((const unsigned short*)A, (const unsigned short*)B, (size_t)M * K, (size_t)K * N,
                               g_state);
  dim3 block(T, T), grid((N + T - 1) / T, (M + T - 1) / T);
  gemm_or_copy<<<grid, block, 0, s>>>((const __half*)A, (const __half*)B, (__half*)C, g_cache, M, N, K, g_state);
  commit<<<1, 1, 0, s>>>(g_state);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
