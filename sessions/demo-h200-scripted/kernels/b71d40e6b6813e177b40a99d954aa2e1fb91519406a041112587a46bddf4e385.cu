// l2tui test seed: a small shared-memory tiled HGEMM (fp32 accumulate).
//
// Why it exists: the agent-loop tests need a kernel that is correct for every
// shape, compiles in a few seconds, and has real optimization structure
// (shared-memory tiles, register blocking, #pragma unroll) for the debugger
// guard to protect.  Each thread computes a TM x TN block of C.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

// l2: knobs begin
#define BM 64
#define BN 64
#define BK 16
#define TM 4
#define TN 4
// l2: knobs end

#define THREADS ((BM / TM) * (BN / TN))

__global__ void __launch_bounds__(THREADS)
hgemm_tiled(const __half* __restrict__ A, const __half* __restrict__ B, __half* __restrict__ C,
            int M, int N, int K) {
  __shared__ float As[BK][BM];
  __shared__ float Bs[BK][BN];
  const int tid = threadIdx.x;
  const int tx = tid % (BN / TN);
  const int ty = tid / (BN / TN);
  const int row0 = blockIdx.y * BM;
  const int col0 = blockIdx.x * BN;
  const float alpha = 1.0f;
  float acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;

  for (int k0 = 0; k0 < K; k0 += BK) {
    for (int idx = tid; idx < BM * BK; idx += THREADS) {
      int r = idx / BK, c = idx % BK;
      int gr = row0 + r, gc = k0 + c;
      As[c][r] = (gr < M && gc < K) ? __half2float(A[(size_t)gr * K + gc]) : 0.f;
    }
    for (int idx = tid; idx < BK * BN; idx += THREADS) {
      int r = idx / BN, c = idx % BN;
      int gr = k0 + r, gc = col0 + c;
      Bs[r][c] = (gr < K && gc < N) ? __half2float(B[(size_t)gr * N + gc]) : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      float a[TM], b[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i) a[i] = As[kk][ty * TM + i];
#pragma unroll
      for (int j = 0; j < TN; ++j) b[j] = Bs[kk][tx * TN + j];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j] * alpha;
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    int r = row0 + ty * TM + i;
    if (r >= M) continue;
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      int c = col0 + tx * TN + j;
      if (c < N) C[(size_t)r * N + c] = __float2half(acc[i][j]);
    }
  }
}

extern "C" int l2_hgemm(const void* A, const void* B, void* C, int M, int N, int K, void* stream) {
  if (M <= 0 || N <= 0 || K <= 0) return 1;
  dim3 grid((N + BN - 1) / BN, (M + BM - 1) / BM);
  hgemm_tiled<<<grid, THREADS, 0, (cudaStream_t)stream>>>((const __half*)A, (const __half*)B, (__half*)C, M, N, K);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
