// l2tui ADVERSARIAL test kernel (must be rejected): computes C correctly, then flips the lowest bit
// of A[0], a mark it could recognise on the next call (and replay a cached C) while every other
// element stays as it was. A and B are inputs: a call must leave them bit for bit unchanged.
// Expected failure: check 'inputs'.
// l2: test gemm head
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
