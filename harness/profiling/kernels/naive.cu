// Naive SIMT HGEMM: one thread per C element, fp32 accumulate, no data reuse.
// A reference point for the profiler's prior body: on big shapes it is limited by
// the latency of its uncoalesced global loads (memory-latency-bound), on tiny ones
// by launch cost.  Speaks the l2tui ABI (see DESIGN.md).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

__global__ void l2p_naive_kernel(const half* __restrict__ A, const half* __restrict__ B,
                                 half* __restrict__ C, int M, int N, int K) {
  int col = blockIdx.x * blockDim.x + threadIdx.x;
  int row = blockIdx.y * blockDim.y + threadIdx.y;
  if (row >= M || col >= N) return;
  float acc = 0.f;
  for (int k = 0; k < K; ++k)
    acc += __half2float(A[(size_t)row * K + k]) * __half2float(B[(size_t)k * N + col]);
  C[(size_t)row * N + col] = __float2half(acc);
}

extern "C" int l2_hgemm(const void* A, const void* B, void* C, int M, int N, int K, void* stream) {
  if (M <= 0 || N <= 0 || K <= 0) return 1;
  dim3 block(16, 16);
  dim3 grid((N + 15) / 16, (M + 15) / 16);
  if (grid.y > 65535) return 2;
  l2p_naive_kernel<<<grid, block, 0, (cudaStream_t)stream>>>(
      (const half*)A, (const half*)B, (half*)C, M, N, K);
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
