// l2tui test kernel: simple correct HGEMM (16x16 shared-memory tiles, fp32 accumulation).
// Used by the GPU tests as the kernel that must pass every check.
// l2: test gemm head
  if (row < M && col < N) C[(size_t)row * N + col] = __float2half(acc);
}

// l2: test gemm launch
