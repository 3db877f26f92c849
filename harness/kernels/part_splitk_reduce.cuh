// l2tui kernel part: the split-K reduce of the CUTLASS families' SPLITK_REDUCE scheduler, pasted
// into a family's render where its template says `// l2: part part_splitk_reduce.cuh`. It needs
// TILE_M, TILE_N, TILE_K, SPLITS, PDL and a `State` with sm_count, cc, slices and splits.
// l2: part begins
constexpr int kReduceThreads = 256;

// Two floats rounded to fp16 and packed low-first into 32 bits (no address taken: registers only).
__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  return static_cast<uint32_t>(__half_as_ushort(__float2half_rn(lo))) |
         (static_cast<uint32_t>(__half_as_ushort(__float2half_rn(hi))) << 16);
}


// SPLITK_REDUCE, second kernel: C = fp16(sum of the slices), slices added in slice order. Each
// thread owns 4 consecutive outputs (float4 loads, one 8-byte store); when the output is small,
// `groups` interleaved sets of threads share the slices of the same outputs and meet in shared
// memory, added in set order, so the sum never depends on timing.
__global__ void __launch_bounds__(kReduceThreads)
splitk_reduce(const float4* __restrict__ slices, uint2* __restrict__ C, long long vecs, long long slice_vecs,
              int splits, int groups) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");  // the GEMM's slices are complete
#endif
  __shared__ float4 sums[kReduceThreads];
  const int span = kReduceThreads / groups;
  const int g = threadIdx.x / span, t = threadIdx.x % span;
  const long long e = (long long)blockIdx.x * span + t;
  float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
  if (e < vecs) {
#pragma unroll 4
    for (int sl = g; sl < splits; sl += groups) {
      const float4 v = __ldcg(slices + sl * slice_vecs + e);
      s.x += v.x; s.y += v.y; s.z += v.z; s.w += v.w;
    }
  }
  if (groups > 1) {
    sums[threadIdx.x] = s;
    __syncthreads();
    if (g == 0) {
      for (int q = 1; q < groups; ++q) {
        const float4 v = sums[q * span + t];
        s.x += v.x; s.y += v.y; s.z += v.z; s.w += v.w;
      }
    }
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
  if (g == 0 && e < vecs) {
    C[e] = make_uint2(pack_half2(s.x, s.y), pack_half2(s.z, s.w));
  }
}

// Slices for SPLITK_REDUCE: SPLITS, or with SPLITS 0 as many as fill one wave of resident CTAs
// (at least 4 k-tiles each); then the nearest smaller count that cuts K into equal slices whose
// length is a multiple of TILE_K (else of 8: TMA needs 16-byte aligned slice starts).
static int reduce_splits(int M, int N, int K, int ctas) {
  const int tiles = ((M + TILE_M - 1) / TILE_M) * ((N + TILE_N - 1) / TILE_N);
  const int ktiles = (K + TILE_K - 1) / TILE_K;
  int want = SPLITS;
  if (want == 0) {
    want = ctas / (tiles > 0 ? tiles : 1);
    if (want > ktiles / 4) want = ktiles / 4;
  }
  for (int sl = want; sl > 1; --sl)
    if (K % sl == 0 && (K / sl) % TILE_K == 0) return sl;
  for (int sl = want; sl > 1; --sl)
    if (K % sl == 0 && (K / sl) % 8 == 0) return sl;
  return 1;
}

// Launch the reduce kernel (PDL: its launch overlaps the GEMM's tail; it waits for the slices).
static int launch_reduce(State& st, void* C, int M, int N, cudaStream_t s) {
  const long long vecs = (long long)M * N / 4;
  const long long target = (long long)st.sm_count * 1024;  // threads that fill the GPU
  int groups = 1;
  while (groups < 32 && groups * 2 <= st.splits && vecs * groups < target) groups *= 2;
  const int span = kReduceThreads / groups;
  cudaLaunchConfig_t lc = {};
  lc.gridDim = dim3(static_cast<unsigned>((vecs + span - 1) / span), 1, 1);
  lc.blockDim = dim3(kReduceThreads, 1, 1);
  lc.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  lc.attrs = attr;
  lc.numAttrs = (PDL && st.cc >= 90) ? 1 : 0;
  cudaError_t err = cudaLaunchKernelEx(&lc, splitk_reduce, reinterpret_cast<const float4*>(st.slices),
                                       static_cast<uint2*>(C), vecs, vecs, st.splits, groups);
  return err == cudaSuccess ? 0 : 4;
}
