// l2tui ADVERSARIAL test kernel (must be rejected): computes C correctly, then flips the lowest bit
// of A[0], a mark it could recognise on the next call (and replay a cached C) while every other
// element stays as it was. A and B are inputs: a call must leave them bit for bit unchanged.
// Expected failure: check 'inputs'.
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

__global__ void mark(unsigned short* a) { a[0] ^= 1u; }

extern "C" int l2_hgemm(const void* A, const void* B, void* C, int M, int N, int K, void* stream) {
  cudaStream_t s = (cudaStream_t)stream;
  dim3 block(T, T), grid((N + T - 1) / T, (M + T - 1) / T);
  hgemm_tiled<<<grid, block, 0, s>>>((const __half*)A, (const __half*)B, (__half*)C, M, N, K);
  mark<<<1, 1, 0, s>>>((unsigned short*)A);  // after the multiply: C is right for the inputs it was given
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
