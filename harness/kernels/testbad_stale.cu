// l2tui ADVERSARIAL test kernel (must be rejected): computes once per shape, then copies the
// cached answer. Expected failure: check 'stale' (output unchanged when the inputs changed).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#define T 16

__global__ void hgemm_tiled(const __half* A, const __half* B, __half* C, int M, int N, int K) {
  __shared__ float As[T][T];
  __shared__ float Bs[T][T];
  int row = blockIdx.y * T + threadIdx.y, col = blockIdx.x * T + threadIdx.x;
  float acc = 0.f;
  for (int k0 = 0; k0 < K; k0 += T) {
    int ka = k0 + threadIdx.x, kb = k0 + threadIdx.y;
    As[threadIdx.y][threadIdx.x] = (row < M && ka < K) ? __half2float(A[(size_t)row * K + ka]) : 0.f;
    Bs[threadIdx.y][threadIdx.x] = (kb < K && col < N) ? __half2float(B[(size_t)kb * N + col]) : 0.f;
    __syncthreads();
    for (int kk = 0; kk < T; ++kk) acc += As[threadIdx.y][kk] * Bs[kk][threadIdx.x];
    __syncthreads();
  }
  if (row < M && col < N) C[(size_t)row * N + col] = __float2half(acc);
}

static void* g_cache = nullptr;
static int g_m = 0, g_n = 0, g_k = 0;

extern "C" int l2_hgemm(const void* A, const void* B, void* C, int M, int N, int K, void* stream) {
  size_t bytes = (size_t)M * N * sizeof(__half);
  cudaStream_t s = (cudaStream_t)stream;
  if (g_cache && g_m == M && g_n == N && g_k == K) {  // "seen this problem": replay the cached answer
    cudaMemcpyAsync(C, g_cache, bytes, cudaMemcpyDeviceToDevice, s);
    return cudaGetLastError() == cudaSuccess ? 0 : 2;
  }
  dim3 block(T, T), grid((N + T - 1) / T, (M + T - 1) / T);
  hgemm_tiled<<<grid, block, 0, s>>>((const __half*)A, (const __half*)B, (__half*)C, M, N, K);
  if (g_cache) cudaFree(g_cache);
  cudaMalloc(&g_cache, bytes);
  cudaMemcpyAsync(g_cache, C, bytes, cudaMemcpyDeviceToDevice, s);
  g_m = M; g_n = N; g_k = K;
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
