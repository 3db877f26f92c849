// l2tui ADVERSARIAL test kernel (must be rejected): accumulates in fp16 (hfma).
// Expected failure: check 'accuracy' against the f32 bound (passes 'exact' on 0/1 inputs).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#define T 16

__global__ void hgemm_tiled(const __half* A, const __half* B, __half* C, int M, int N, int K) {
  __shared__ __half As[T][T];
  __shared__ __half Bs[T][T];
  int row = blockIdx.y * T + threadIdx.y, col = blockIdx.x * T + threadIdx.x;
  __half acc = __float2half(0.f);
  for (int k0 = 0; k0 < K; k0 += T) {
    int ka = k0 + threadIdx.x, kb = k0 + threadIdx.y;
    As[threadIdx.y][threadIdx.x] = (row < M && ka < K) ? A[(size_t)row * K + ka] : __float2half(0.f);
    Bs[threadIdx.y][threadIdx.x] = (kb < K && col < N) ? B[(size_t)kb * N + col] : __float2half(0.f);
    __syncthreads();
    for (int kk = 0; kk < T; ++kk) acc = __hfma(As[threadIdx.y][kk], Bs[kk][threadIdx.x], acc);
    __syncthreads();
  }
  if (row < M && col < N) C[(size_t)row * N + col] = acc;
}

// l2: test gemm launch
