
// (no headers: NVRTC through cupy compiles it as is; fp16 bits are widened with one PTX cvt, bf16
// bits are the high half of an fp32's). Every kernel has an fp16 entry (l2_gemv, l2_verify_rows)
// and a bf16 one (the same name with _bf16), one template instantiated for each element type.
template <bool BF16>
__device__ __forceinline__ float l2_bits_to_float(unsigned short h) {
  if (BF16) return __int_as_float((int)((unsigned int)h << 16));
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
// out[r] = sum_c m[r][c] x[c] (fp32), one warp per row; norms[r] = the row's 2-norm when asked
template <bool BF16>
__device__ __forceinline__ void l2_gemv_body(const unsigned short* m, const float* x, float* out, float* norms,
                                             int rows, int cols) {
  const int warp = (int)((blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
  if (warp >= rows) return;
  const unsigned short* row = m + (size_t)warp * cols;
  float s = 0.f, q = 0.f;
  for (int c = lane; c < cols; c += 32) {
    const float v = l2_bits_to_float<BF16>(row[c]);
    s += v * x[c];
    q += v * v;
  }
  for (int o = 16; o > 0; o >>= 1) {
    s += __shfl_xor_sync(0xffffffffu, s, o);
    q += __shfl_xor_sync(0xffffffffu, q, o);
  }
  if (lane == 0) {
    out[warp] = s;
    if (norms) norms[warp] = sqrtf(q);
  }
}
extern "C" __global__ void l2_gemv(const unsigned short* m, const float* x, float* out, float* norms, int rows,
                                   int cols) {
  l2_gemv_body<false>(m, x, out, norms, rows, cols);
}
extern "C" __global__ void l2_gemv_bf16(const unsigned short* m, const float* x, float* out, float* norms, int rows,
                                        int cols) {
  l2_gemv_body<true>(m, x, out, norms, rows, cols);
}
// sum_j row[j] v[j] (and sum_j row[j]^2 when q is given) over this block's threads: eight elements
// per 16-byte load when the row allows it, loads unrolled so they are all in flight at once (a
// loop waiting on one load at a time took ~15 us per row of 16,384 and, slower still right after
// the call wrote C, was not subtracted away: honest calls looked 2x slower in the fresh graph)
template <bool BF16>
__device__ __forceinline__ void l2_row_dot(const unsigned short* __restrict__ row, const float* __restrict__ v,
                                           int len, float& s, float* q) {
  if ((len & 7) == 0) {
    const uint4* __restrict__ r8 = reinterpret_cast<const uint4*>(row);
    const float4* __restrict__ v4 = reinterpret_cast<const float4*>(v);
#pragma unroll 4
    for (int j = threadIdx.x; j < (len >> 3); j += blockDim.x) {
      const uint4 h = r8[j];
      const float4 lo = v4[2 * j], hi = v4[2 * j + 1];
      const unsigned int w[4] = {h.x, h.y, h.z, h.w};
      const float f[4][2] = {{lo.x, lo.y}, {lo.z, lo.w}, {hi.x, hi.y}, {hi.z, hi.w}};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float a0 = l2_bits_to_float<BF16>((unsigned short)(w[e] & 0xffffu));
        const float a1 = l2_bits_to_float<BF16>((unsigned short)(w[e] >> 16));
        s += a0 * f[e][0] + a1 * f[e][1];
        if (q) *q += a0 * a0 + a1 * a1;
      }
    }
  } else {
    for (int j = threadIdx.x; j < len; j += blockDim.x) {
      const float a0 = l2_bits_to_float<BF16>(row[j]);
      s += a0 * v[j];
      if (q) *q += a0 * a0;
    }
  }
}
// the i-th row of C to verify, spread over 0 .. m-1 by a hash of a counter i and a salt: the salt
// is a kernel argument drawn from the OS's entropy per verifier, so the rows are not a function of
// anything a kernel under test can read or count (with a public hash of a counter alone, a kernel
// could compute only the rows due to be verified after a change of all of A)
__device__ __forceinline__ unsigned int l2_salted_row(unsigned int salt, unsigned int i, int m) {
  unsigned long long h = (((unsigned long long)salt << 32) | i) * 0xD1B54A32D192ED03ull;
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 29;
  return (unsigned int)(h % (unsigned long long)m);
}
// |C[r] x - A[r] y| / |C[r]| for row r (Freivalds on one row), by the whole block: every thread
// calls it (it holds a barrier), thread 0 gets the value. part: shared scratch, one slot per warp.
template <bool BF16>
__device__ __forceinline__ float l2_row_residual(const unsigned short* a, const unsigned short* c, const float* x,
                                                 const float* y, int n, int k, unsigned int r, float (*part)[32]) {
  float w = 0.f, q = 0.f, z = 0.f;
  l2_row_dot<BF16>(c + (size_t)r * n, x, n, w, &q);
  l2_row_dot<BF16>(a + (size_t)r * k, y, k, z, nullptr);
  for (int o = 16; o > 0; o >>= 1) {
    w += __shfl_xor_sync(0xffffffffu, w, o);
    q += __shfl_xor_sync(0xffffffffu, q, o);
    z += __shfl_xor_sync(0xffffffffu, z, o);
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  if (lane == 0) {
    part[0][warp] = w;
    part[1][warp] = q;
    part[2][warp] = z;
  }
  __syncthreads();
  float d = 0.f;
  if (threadIdx.x == 0) {
    float sw = 0.f, sq = 0.f, sz = 0.f;
    for (int j = 0; j < warps; ++j) {
      sw += part[0][j];
      sq += part[1][j];
      sz += part[2][j];
    }
    d = fabsf(sw - sz) / fmaxf(sqrtf(sq), 1e-20f);
  }
  return d;
}
// One block per verified row r: |C[r] x - A[r] y| / |C[r]| (NaN-safe: a NaN row counts as
// infinite) into worst[i], i from a launch counter (a launch's blocks all finish before the next
// launch starts, so launch L fills worst[L * gridDim.x ...]). Block 0 takes the row the perturbing
// kernel changed last, the others rows drawn from i and the salt (l2_salted_row).
template <bool BF16>
__device__ __forceinline__ void l2_verify_rows_body(const unsigned short* a, const unsigned short* c, const float* x,
                                                    const float* y, int m, int n, int k,
                                                    const unsigned int* changed_row, unsigned int* counter,
                                                    float* worst, unsigned int capacity, unsigned int salt) {
  __shared__ unsigned int slot;
  __shared__ float part[3][32];
  if (threadIdx.x == 0) slot = atomicAdd(counter, 1u);
  __syncthreads();
  unsigned int r;
  if (blockIdx.x == 0) {
    r = *changed_row;
  } else {
    r = l2_salted_row(salt, slot, m);
  }
  if (r >= (unsigned int)m) r = 0;
  const float d = l2_row_residual<BF16>(a, c, x, y, n, k, r, part);
  if (threadIdx.x == 0 && slot < capacity) worst[slot] = (d == d) ? d : __int_as_float(0x7f800000);
}
extern "C" __global__ void l2_verify_rows(const unsigned short* a, const unsigned short* c, const float* x,
                                          const float* y, int m, int n, int k, const unsigned int* changed_row,
                                          unsigned int* counter, float* worst, unsigned int capacity,
                                          unsigned int salt) {
  l2_verify_rows_body<false>(a, c, x, y, m, n, k, changed_row, counter, worst, capacity, salt);
}
extern "C" __global__ void l2_verify_rows_bf16(const unsigned short* a, const unsigned short* c, const float* x,
                                               const float* y, int m, int n, int k,
                                               const unsigned int* changed_row, unsigned int* counter,
                                               float* worst, unsigned int capacity, unsigned int salt) {
  l2_verify_rows_body<true>(a, c, x, y, m, n, k, changed_row, counter, worst, capacity, salt);
}
