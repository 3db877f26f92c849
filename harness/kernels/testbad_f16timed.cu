// l2tui ADVERSARIAL test kernel (must be rejected): accumulates in fp32 when it is checked and in
// fp16 when it is timed. Every checked call runs on a C poisoned with NaN and a timed one does not,
// so a one-thread kernel first reads C[0] into a flag, and the multiply that follows on the same
// stream accumulates in fp32 when the flag says NaN, else in fp16 (hfma).
// Expected failure per call and in server mode: check 'timed_calls' (its timed calls' rows are off
// by ~5e-3 at K = 2048, over the f32 limit); back to back: 'graph_replay' (the timed graph
// replayed on poisoned C computes its first call in fp32, the rest in fp16).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#define T 16

__global__ void look_at_c(const __half* C, int* poisoned) {
  *poisoned = __hisnan(C[0]) ? 1 : 0;
}

__global__ void hgemm_tiled(const __half* A, const __half* B, __half* C, int M, int N, int K, const int* poisoned) {
  __shared__ __half As[T][T];
  __shared__ __half Bs[T][T];
  int row = blockIdx.y * T + threadIdx.y, col = blockIdx.x * T + threadIdx.x;
  const bool careful = *poisoned != 0;
  float acc32 = 0.f;
  __half acc16 = __float2half(0.f);
  for (int k0 = 0; k0 < K; k0 += T) {
    int ka = k0 + threadIdx.x, kb = k0 + threadIdx.y;
    As[threadIdx.y][threadIdx.x] = (row < M && ka < K) ? A[(size_t)row * K + ka] : __float2half(0.f);
    Bs[threadIdx.y][threadIdx.x] = (kb < K && col < N) ? B[(size_t)kb * N + col] : __float2half(0.f);
    __syncthreads();
    if (careful) {
      for (int kk = 0; kk < T; ++kk) acc32 += __half2float(As[threadIdx.y][kk]) * __half2float(Bs[kk][threadIdx.x]);
    } else {
      for (int kk = 0; kk < T; ++kk) acc16 = __hfma(As[threadIdx.y][kk], Bs[kk][threadIdx.x], acc16);
    }
    __syncthreads();
  }
  if (row < M && col < N) C[(size_t)row * N + col] = careful ? __float2half(acc32) : acc16;
}

static int* g_flag = nullptr;

extern "C" int l2_hgemm(const void* A, const void* B, void* C, int M, int N, int K, void* stream) {
  cudaStream_t s = (cudaStream_t)stream;
  if (!g_flag && cudaMalloc(&g_flag, sizeof(int)) != cudaSuccess) return 2;
  look_at_c<<<1, 1, 0, s>>>((const __half*)C, g_flag);
  dim3 block(T, T), grid((N + T - 1) / T, (M + T - 1) / T);
  hgemm_tiled<<<grid, block, 0, s>>>((const __half*)A, (const __half*)B, (__half*)C, M, N, K, g_flag);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
