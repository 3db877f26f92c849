// l2tui ADVERSARIAL test kernel (must be rejected): correct, but one thread also writes one element past the end of C.
// Expected failure: check 'guards'.
// l2: test gemm head
  if (row < M && col < N) C[(size_t)row * N + col] = __float2half(acc);
  if (row == M - 1 && col == N - 1) C[(size_t)M * N + 5] = __float2half(1.0f);
}

// l2: test gemm launch
