// l2tui ADVERSARIAL test kernel (must be rejected): skips its work when it is called again within
// GATE_NS of its previous call (read from the GPU's global timer), leaving the previous C. That C
// is right as long as the inputs stay the same, as in every timed replay and in the graph-replay
// check, whose first call (after the host poisoned C) does compute; so without a check of every
// call on changing inputs it times as three empty kernels.
//   GATE_NS 20000: skips in the fresh-input graph too (its calls follow a perturbing kernel and a
//                  verification by microseconds); expected failure: check 'fresh', verification
//   GATE_NS 3000:  may skip only back-to-back calls; then the fresh-input calls do the work and
//                  cost far more than the timed ones. Expected failure: check 'fresh' either way
//   GATE_CALLS n:  no timer: after n calls every other call is skipped (a count on the GPU); the
//                  eager checks with new inputs come first, within n. Expected failure: 'fresh',
//                  verification
// The timer's name is split across two string literals, which the source policy (a static first
// layer that refuses a plain %globaltimer) does not join: the run-time check has to catch it.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#define T 16
#define GATE_NS 20000
#define GATE_CALLS 0   // > 0: ignore the timer; after this many calls, skip every other call

__device__ unsigned long long g_last;  // global timer at the end of the previous call
__device__ int g_skip;
__device__ unsigned long long g_calls;

__device__ __forceinline__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%global" "timer;" : "=l"(t));  // split: the source policy looks for the whole name
  return t;
}

__global__ void gate() {
#if GATE_CALLS > 0
  const unsigned long long n = ++g_calls;  // a count kept on the GPU: the same in graph replays
  g_skip = (n > (unsigned long long)GATE_CALLS && (n & 1ull)) ? 1 : 0;
#else
  const unsigned long long t = now_ns();
  g_skip = (g_last != 0ull && t - g_last < (unsigned long long)GATE_NS) ? 1 : 0;
#endif
}

__global__ void stamp() { g_last = now_ns(); }

__global__ void hgemm_tiled(const __half* A, const __half* B, __half* C, int M, int N, int K) {
  if (g_skip) return;  // called again right away: keep the last C
  __shared__ float As[T][T];
  __shared__ float Bs[T][T];
  int row = blockIdx.y * T + threadIdx.y, col = blockIdx.x * T + threadIdx.x;
// l2: test gemm loop
  if (row < M && col < N) C[(size_t)row * N + col] = __float2half(acc);
}

extern "C" int l2_hgemm(const void* A, const void* B, void* C, int M, int N, int K, void* stream) {
  cudaStream_t s = (cudaStream_t)stream;
  dim3 block(T, T), grid((N + T - 1) / T, (M + T - 1) / T);
  gate<<<1, 1, 0, s>>>();
  hgemm_tiled<<<grid, block, 0, s>>>((const __half*)A, (const __half*)B, (__half*)C, M, N, K);
  stamp<<<1, 1, 0, s>>>();
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
