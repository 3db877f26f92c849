
template <bool BF16>
__device__ __forceinline__ void l2_separate_body(unsigned short* a, const unsigned short* c, const float* x,
                                                 const float* y, int m, int n, int k, unsigned int* counter,
                                                 unsigned int* row, float* worst, unsigned int capacity,
                                                 const unsigned short* values, int nvalues, unsigned int steps,
                                                 int perturb, unsigned int salt) {
  __shared__ float part[3][32];
  __shared__ float worst_s;
  const unsigned int t = *counter;   // one block: read here, written by thread 0 at the end
  const bool verify = t > 0 && (!perturb || (t % steps) != 0);
  if (threadIdx.x == 0) worst_s = 0.f;
  __syncthreads();
  if (verify) {
    for (int i = 0; i < 4; ++i) {
      unsigned int r;
      if (i == 0) {
        r = *row;
      } else {
        r = l2_salted_row(salt, t * 4u + i, m);
      }
      if (r >= (unsigned int)m) r = 0;
      const float d = l2_row_residual<BF16>(a, c, x, y, n, k, r, part);
      if (threadIdx.x == 0) worst_s = (d == d) ? fmaxf(worst_s, d) : __int_as_float(0x7f800000);
      __syncthreads();
    }
    if (threadIdx.x == 0 && t - 1u < capacity) worst[t - 1u] = worst_s;
  }
  if (perturb && threadIdx.x == 0) {   // after every read of A above (one block, past the barriers)
    unsigned long long h = (unsigned long long)(t + 1u) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    const unsigned long long total = (unsigned long long)m * (unsigned long long)k;
    a[h % total] = values[t % (unsigned int)nvalues];
    *row = (unsigned int)((h % total) / (unsigned long long)k);
    *counter = t + 1u;
  }
}
// the fp16 and bf16 entries (values: the perturbing values' bits in the element type)
extern "C" __global__ void l2_separate(unsigned short* a, const unsigned short* c, const float* x, const float* y,
                                       int m, int n, int k, unsigned int* counter, unsigned int* row, float* worst,
                                       unsigned int capacity, const unsigned short* values, int nvalues,
                                       unsigned int steps, int perturb, unsigned int salt) {
  l2_separate_body<false>(a, c, x, y, m, n, k, counter, row, worst, capacity, values, nvalues, steps, perturb, salt);
}
extern "C" __global__ void l2_separate_bf16(unsigned short* a, const unsigned short* c, const float* x,
                                            const float* y, int m, int n, int k, unsigned int* counter,
                                            unsigned int* row, float* worst, unsigned int capacity,
                                            const unsigned short* values, int nvalues, unsigned int steps,
                                            int perturb, unsigned int salt) {
  l2_separate_body<true>(a, c, x, y, m, n, k, counter, row, worst, capacity, values, nvalues, steps, perturb, salt);
}
