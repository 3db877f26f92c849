// l2tui ADVERSARIAL test kernel (must be rejected): bf16 in and out, but accumulates in bf16
// (__hfma on __nv_bfloat16) where the contract is f32 accumulation.
// Expected failure: check 'accuracy' against the bf16 bound (passes 'exact' on 0/1 inputs: the
// exact check keeps partial sums <= 256, integers bf16 holds exactly).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#define T 16

__global__ void bgemm_bf16acc(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N,
                              int K) {
  __shared__ __nv_bfloat16 As[T][T];
  __shared__ __nv_bfloat16 Bs[T][T];
  int row = blockIdx.y * T + threadIdx.y, col = blockIdx.x * T + threadIdx.x;
  __nv_bfloat16 acc = __float2bfloat16(0.f);
  for (int k0 = 0; k0 < K; k0 += T) {
    int ka = k0 + threadIdx.x, kb = k0 + threadIdx.y;
    As[threadIdx.y][threadIdx.x] = (row < M && ka < K) ? A[(size_t)row * K + ka] : __float2bfloat16(0.f);
    Bs[threadIdx.y][threadIdx.x] = (kb < K && col < N) ? B[(size_t)kb * N + col] : __float2bfloat16(0.f);
    __syncthreads();
    for (int kk = 0; kk < T; ++kk) acc = __hfma(As[threadIdx.y][kk], Bs[kk][threadIdx.x], acc);
    __syncthreads();
  }
  if (row < M && col < N) C[(size_t)row * N + col] = acc;
}

extern "C" int l2_hgemm_bf16(const void* A, const void* B, void* C, int M, int N, int K, void* stream) {
  dim3 block(T, T), grid((N + T - 1) / T, (M + T - 1) / T);
  bgemm_bf16acc<<<grid, block, 0, (cudaStream_t)stream>>>((const __nv_bfloat16*)A, (const __nv_bfloat16*)B,
                                                          (__nv_bfloat16*)C, M, N, K);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
