// l2tui ADVERSARIAL test kernel: writes through a bad pointer (illegal address, a sticky CUDA error).
// Expected: status 'crashed'; the worker restarts and the next request works.
// l2: test gemm head
  if (row < M && col < N) C[(size_t)row * N + col] = __float2half(acc);
  if (row == 0 && col == 0) *(volatile int*)(size_t)(0x10) = 1;  // illegal address
}

// l2: test gemm launch
