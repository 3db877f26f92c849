// Split-K SIMT HGEMM: a call that launches TWO kernels, so the profiler's
// multi-kernel path (every kernel of one call reported and summed) has a real
// subject.  Kernel 1 computes fp32 partial sums of S slices of K into a
// workspace (grid.z = S); kernel 2 adds the slices in a fixed order and writes
// fp16 C (deterministic).  The workspace is allocated on the first call that
// needs it and reused after.  Speaks the l2tui ABI.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#define BM 32
#define BN 32
#define BK 32

__global__ void l2p_splitk_partial(const half* __restrict__ A, const half* __restrict__ B,
                                   float* __restrict__ W, int M, int N, int K, int kslice) {
  __shared__ float As[BM][BK + 1];
  __shared__ float Bs[BK][BN + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;    // 32 x 8 threads, 4 rows each
  const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
  const int kbeg = blockIdx.z * kslice;
  const int kend = min(K, kbeg + kslice);
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  for (int k0 = kbeg; k0 < kend; k0 += BK) {
    for (int i = ty; i < BM; i += 8) {
      int gr = row0 + i, gc = k0 + tx;
      As[i][tx] = (gr < M && gc < kend) ? __half2float(A[(size_t)gr * K + gc]) : 0.f;
      int br = k0 + i, bc = col0 + tx;
      Bs[i][tx] = (br < kend && bc < N) ? __half2float(B[(size_t)br * N + bc]) : 0.f;
    }
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < BK; ++kk) {
      float b = Bs[kk][tx];
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[i] += As[ty * 4 + i][kk] * b;
    }
    __syncthreads();
  }
  float* Wz = W + (size_t)blockIdx.z * M * N;
  for (int i = 0; i < 4; ++i) {
    int r = row0 + ty * 4 + i, c = col0 + tx;
    if (r < M && c < N) Wz[(size_t)r * N + c] = acc[i];
  }
}

__global__ void l2p_splitk_reduce(const float* __restrict__ W, half* __restrict__ C,
                                  size_t MN, int S) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < MN;
       i += (size_t)gridDim.x * blockDim.x) {
    float s = 0.f;
    for (int z = 0; z < S; ++z) s += W[(size_t)z * MN + i];
    C[i] = __float2half(s);
  }
}

static float* g_ws = nullptr;
static size_t g_ws_bytes = 0;

extern "C" int l2_hgemm(const void* A, const void* B, void* C, int M, int N, int K, void* stream) {
  if (M <= 0 || N <= 0 || K <= 0) return 1;
  int S = K / 1024;                                 // one slice per 1024 of K, 2..16
  if (S < 2) S = 2;
  if (S > 16) S = 16;
  int kslice = ((K + S - 1) / S + BK - 1) / BK * BK;
  S = (K + kslice - 1) / kslice;
  size_t need = (size_t)S * M * N * sizeof(float);
  if (need > g_ws_bytes) {                          // first call for this size only
    if (g_ws) cudaFree(g_ws);
    if (cudaMalloc(&g_ws, need) != cudaSuccess) { g_ws = nullptr; g_ws_bytes = 0; return 4; }
    g_ws_bytes = need;
  }
  cudaStream_t s = (cudaStream_t)stream;
  dim3 grid((N + BN - 1) / BN, (M + BM - 1) / BM, S);
  if (grid.y > 65535) return 2;
  l2p_splitk_partial<<<grid, dim3(32, 8), 0, s>>>((const half*)A, (const half*)B, g_ws, M, N, K, kslice);
  size_t MN = (size_t)M * N;
  int blocks = (int)((MN + 255) / 256);
  if (blocks > 132 * 16) blocks = 132 * 16;
  l2p_splitk_reduce<<<blocks, 256, 0, s>>>(g_ws, (half*)C, MN, S);
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
