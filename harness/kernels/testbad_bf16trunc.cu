// l2tui ADVERSARIAL test kernel (must be rejected): bf16 in and out, f32 accumulation, but the
// f32 result becomes bf16 by truncation (the high 16 bits kept) instead of round-to-nearest-even.
// Truncation is biased toward zero by half an ulp on average, so its error is about twice that
// of rounding and systematic. Expected failure: check 'accuracy' against the bf16 bound (passes
// 'exact': the 0/1 check's sums are integers <= 256, which truncation keeps exactly).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#define T 16

__device__ __forceinline__ __nv_bfloat16 truncate_to_bf16(float f) {
  return __ushort_as_bfloat16((unsigned short)(__float_as_uint(f) >> 16));
}

__global__ void bgemm_trunc(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K) {
  __shared__ float As[T][T];
  __shared__ float Bs[T][T];
  int row = blockIdx.y * T + threadIdx.y, col = blockIdx.x * T + threadIdx.x;
  float acc = 0.f;
  for (int k0 = 0; k0 < K; k0 += T) {
    int ka = k0 + threadIdx.x, kb = k0 + threadIdx.y;
    As[threadIdx.y][threadIdx.x] = (row < M && ka < K) ? __bfloat162float(A[(size_t)row * K + ka]) : 0.f;
    Bs[threadIdx.y][threadIdx.x] = (kb < K && col < N) ? __bfloat162float(B[(size_t)kb * N + col]) : 0.f;
    __syncthreads();
    for (int kk = 0; kk < T; ++kk) acc = fmaf(As[threadIdx.y][kk], Bs[kk][threadIdx.x], acc);
    __syncthreads();
  }
  if (row < M && col < N) C[(size_t)row * N + col] = truncate_to_bf16(acc);
}

extern "C" int l2_hgemm_bf16(const void* A, const void* B, void* C, int M, int N, int K, void* stream) {
  dim3 block(T, T), grid((N + T - 1) / T, (M + T - 1) / T);
  bgemm_trunc<<<grid, block, 0, (cudaStream_t)stream>>>((const __nv_bfloat16*)A, (const __nv_bfloat16*)B,
                                                        (__nv_bfloat16*)C, M, N, K);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
