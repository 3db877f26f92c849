// l2tui ADVERSARIAL test kernel (must be rejected): computes only when C holds NaN (what the checks
// poison C with before their runs) and otherwise returns at once, leaving the previous C. The
// previous C is right while the inputs stay the same, so a timing method that neither changes the
// inputs nor poisons C before its timed calls sees an empty kernel. Expected failure: check
// 'timed_calls' in server mode (A changes before every timed call, C is poisoned on only some of
// them, every call's rows are verified) and in per-call offline mode (every call follows a change).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#define T 16

__global__ void hgemm_tiled(const __half* A, const __half* B, __half* C, int M, int N, int K) {
  int row = blockIdx.y * T + threadIdx.y, col = blockIdx.x * T + threadIdx.x;
  // this block's first output element: NaN means "the checker is looking"
  const int r0 = blockIdx.y * T, c0 = blockIdx.x * T;
  if (!__hisnan(C[(size_t)r0 * N + c0])) return;
  __syncthreads();
  __shared__ float As[T][T];
  __shared__ float Bs[T][T];
// l2: test gemm loop
  if (row < M && col < N) C[(size_t)row * N + col] = __float2half(acc);
}

// l2: test gemm launch
