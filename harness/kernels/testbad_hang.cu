// l2tui ADVERSARIAL test kernel: one thread spins forever.
// Expected: status 'timeout'; the worker is killed and restarted.
// l2: test gemm head
  // clock64() is volatile asm, so the compiler cannot drop the loop (a plain `while (spin)` on a local
  // volatile was optimised away on the H200 run of 2026-11-29).
  if (row == 0 && col == 0) { long long t0 = clock64(); while (clock64() - t0 >= 0) { __nanosleep(1000); } }
  if (row < M && col < N) C[(size_t)row * N + col] = __float2half(acc);
}

// l2: test gemm launch
