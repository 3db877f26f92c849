// l2tui reference kernel: the simplest correct HGEMM in the ABI.
//
// What it is for: a known-good kernel for tests (build, check, timing plumbing)
// and the starting point a model may rewrite. One thread per C element, fp32
// accumulation, no shared memory. Slow on purpose; correct for every shape.
// Knobs: BLOCK_X, BLOCK_Y (threads per block in x/y; BLOCK_X*BLOCK_Y <= 1024).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

// l2: knobs begin
#define BLOCK_X 16
#define BLOCK_Y 16
// l2: knobs end

__global__ void hgemm_naive(const __half* __restrict__ A, const __half* __restrict__ B,
                            __half* __restrict__ C, int M, int N, int K) {
  int col = blockIdx.x * BLOCK_X + threadIdx.x;
  int row = blockIdx.y * BLOCK_Y + threadIdx.y;
  if (row >= M || col >= N) return;
  float acc = 0.f;
  for (int k = 0; k < K; ++k) {
    acc += __half2float(A[(size_t)row * K + k]) * __half2float(B[(size_t)k * N + col]);
  }
  C[(size_t)row * N + col] = __float2half(acc);
}

extern "C" int l2_hgemm(const void* A, const void* B, void* C, int M, int N, int K, void* stream) {
  if (M <= 0 || N <= 0 || K <= 0) return 1;
  dim3 block(BLOCK_X, BLOCK_Y);
  dim3 grid((N + BLOCK_X - 1) / BLOCK_X, (M + BLOCK_Y - 1) / BLOCK_Y);
  hgemm_naive<<<grid, block, 0, (cudaStream_t)stream>>>((const __half*)A, (const __half*)B, (__half*)C, M, N, K);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
