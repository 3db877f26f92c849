// l2tui ADVERSARIAL test kernel (must be rejected): computes once per shape, then copies the
// cached answer. Expected failure: check 'stale' (output unchanged when the inputs changed).
// l2: test gemm head
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
