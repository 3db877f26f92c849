// l2tui ADVERSARIAL test kernel (must be rejected): never writes the last row of C.
// Expected failure: check 'written' (NaN poison left in C).
// l2: test gemm head
  if (row < M - 1 && col < N) C[(size_t)row * N + col] = __float2half(acc);
}

// l2: test gemm launch
