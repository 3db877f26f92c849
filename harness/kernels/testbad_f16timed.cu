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
  int row = blockIdx.y * T + threadIdx.y, col = blockIdx.x * T + threadIdx.x;
  if (*poisoned == 0) {  // a timed call: fp16 accumulation (the flag is the same for every thread)
    if (row < M && col < N) {
      __half acc16 = __float2half(0.f);
      for (int k = 0; k < K; ++k) acc16 = __hfma(A[(size_t)row * K + k], B[(size_t)k * N + col], acc16);
      C[(size_t)row * N + col] = acc16;
    }
    return;
  }
  __shared__ float As[T][T];
  __shared__ float Bs[T][T];
// l2: test gemm loop
  if (row < M && col < N) C[(size_t)row * N + col] = __float2half(acc);
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
