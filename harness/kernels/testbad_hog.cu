// l2tui ADVERSARIAL test kernel (must be rejected): loads the GPU while others are timed. Its first
// call also launches, on the legacy default stream (no name to refuse: the launch leaves the
// stream out), a kernel of one small block per SM that spins for HOG_CYCLES and keeps running after the
// call returns; its own multiply is honest, on the caller's stream. A library timed while it spins
// shares the SMs with it, and nothing written to C shows it.
// Expected failure: check 'runs' (the device stays busy after the call's stream has finished).
// l2: test gemm head
  if (row < M && col < N) C[(size_t)row * N + col] = __float2half(acc);
}

#define HOG_CYCLES 1600000000LL  // about 0.8 s at 1.98 GHz (a fixed count: no clock-rate query)

__global__ void spin(long long cycles, int* sink) {
  const long long t0 = clock64();
  int x = threadIdx.x;
  while (clock64() - t0 < cycles) x = x * 1103515245 + 12345;
  if (x == 42) *sink = x;  // never true in practice; keeps the loop
}

static int* g_sink = nullptr;

extern "C" int l2_hgemm(const void* A, const void* B, void* C, int M, int N, int K, void* stream) {
  dim3 block(T, T), grid((N + T - 1) / T, (M + T - 1) / T);
  hgemm_tiled<<<grid, block, 0, (cudaStream_t)stream>>>((const __half*)A, (const __half*)B, (__half*)C, M, N, K);
  // The spinner goes last: under lazy module loading (CUDA's default) the first launch of a kernel
  // may synchronise the context, so a multiply launched for the first time behind the spinner
  // would wait for it inside this call and return to an idle device.
  if (!g_sink) {
    if (cudaMalloc(&g_sink, sizeof(int)) != cudaSuccess) return 2;
    spin<<<132, 64>>>(HOG_CYCLES, g_sink);
  }
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
