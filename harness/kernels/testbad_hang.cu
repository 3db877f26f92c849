// l2tui ADVERSARIAL test kernel: one thread spins forever.
// Expected: status 'timeout'; the worker is killed and restarted.
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
  // clock64() is volatile asm, so the compiler cannot drop the loop (a plain `while (spin)` on a local
  // volatile was optimised away on the H200 run of 2026-11-29).
  if (row == 0 && col == 0) { long long t0 = clock64(); while (clock64() - t0 >= 0) { __nanosleep(1000); } }
  if (row < M && col < N) C[(size_t)row * N + col] = __float2half(acc);
}

extern "C" int l2_hgemm(const void* A, const void* B, void* C, int M, int N, int K, void* stream) {
  dim3 block(T, T), grid((N + T - 1) / T, (M + T - 1) / T);
  hgemm_tiled<<<grid, block, 0, (cudaStream_t)stream>>>((const __half*)A, (const __half*)B, (__half*)C, M, N, K);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
