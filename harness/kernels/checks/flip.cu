
// Flips the sign of a fresh pseudo-random half of A's elements at every launch: each 32-bit word
// (two fp16) takes bits 15 and 31 of a hash of its index, the launch counter and a salt. The call
// after it then has new inputs everywhere, with no shortcut from the last product: A' - A =
// -2 (A o S) for a random 0/1 mask S is as dense as A, so (A' - A) B costs a whole GEMM (a mask of
// all ones would give C' = -C for free). Magnitudes do not change, so an honest C stays as accurate.
// The last block to finish advances the counter (every block read it before it arrived) and draws
// *row, the row the verification after the call takes first.
extern "C" __global__ void l2_flip_signs(unsigned int* a, unsigned long long n, unsigned int* counter,
                                         unsigned int* arrived, unsigned int salt, unsigned int m,
                                         unsigned int* row) {
  const unsigned int t = *(volatile unsigned int*)counter;
  const unsigned long long key = ((unsigned long long)salt << 32 | t) * 0xD1B54A32D192ED03ull;
  const unsigned long long words = n >> 1;
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  const unsigned long long first = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  for (unsigned long long i = first; i < words; i += stride) {
    unsigned long long h = (i + 1ull) * 0x9E3779B97F4A7C15ull ^ key;
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
    a[i] ^= (unsigned int)h & 0x80008000u;
  }
  if ((n & 1ull) && first == 0) {  // an odd element count: the last fp16 on its own
    unsigned long long h = (words + 1ull) * 0x9E3779B97F4A7C15ull ^ key;
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
    reinterpret_cast<unsigned short*>(a)[n - 1] ^= (unsigned short)(h & 0x8000u);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(arrived, 1u) == gridDim.x - 1u) {
      *arrived = 0u;
      unsigned long long h = ((unsigned long long)t + 1ull) * 0x9E3779B97F4A7C15ull ^ key;
      h ^= h >> 29;
      *row = (unsigned int)(h % (unsigned long long)m);
      *counter = t + 1u;
    }
  }
}
