// The latency floor of a dependent chain of tiny kernels in a CUDA graph (tools/probes/latency_floor.py):
// how much of a tiny GEMM's ~1.6 us per call is the launch, the wait on the previous kernel,
// the first global load and the store. Each kernel is one step further along a GEMM's path.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>

__device__ __forceinline__ void gdc_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void gdc_launch() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }

// mode bits: 1 wait, 2 load, 4 store, 8 trigger at the top (else after the work)
template <int MODE>
__global__ void probe(const uint4* __restrict__ a, uint4* __restrict__ c, int n16) {
  if (MODE & 8) gdc_launch();
  if (MODE & 1) gdc_wait();
  uint4 v = make_uint4(threadIdx.x, blockIdx.x, 0, 0);
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (MODE & 2) {
    for (int j = i; j < n16; j += gridDim.x * blockDim.x) {
      uint4 x = a[j];
      v.x ^= x.x; v.y ^= x.y; v.z ^= x.z; v.w ^= x.w;
    }
  }
  if (MODE & 4) {
    for (int j = i; j < n16 / 2; j += gridDim.x * blockDim.x) c[j] = v;
  }
  if (!(MODE & 8)) gdc_launch();
}

template <int MODE>
static int launch(const void* a, void* c, int n16, int ctas, int pdl, cudaStream_t s) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(ctas);
  cfg.blockDim = dim3(128);
  cfg.stream = s;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = at;
  cfg.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, probe<MODE>, (const uint4*)a, (uint4*)c, n16) == cudaSuccess ? 0 : 1;
}

extern "C" int probe_launch(int mode, const void* a, void* c, int n16, int ctas, int pdl, void* stream) {
  cudaStream_t s = (cudaStream_t)stream;
  switch (mode) {
    case 0: return launch<0>(a, c, n16, ctas, pdl, s);
    case 1: return launch<1>(a, c, n16, ctas, pdl, s);
    case 5: return launch<5>(a, c, n16, ctas, pdl, s);
    case 7: return launch<7>(a, c, n16, ctas, pdl, s);
    case 15: return launch<15>(a, c, n16, ctas, pdl, s);
    default: return 2;
  }
}

// ---------------------------------------------------------------------------------------------
// The smallest real GEMM on the same path: C(64x64) = A(64x64) B(64x64), fp16 in, fp32
// accumulate, 4 CTAs of 4 warps (16 rows each, a warp per 16 columns). Every load is issued
// before the first is used (one round trip), A and B go through padded shared memory to
// ldmatrix, eight mma.sync per warp, and the accumulators are stored straight from registers.
// TRIGGER_TOP: launch_dependents before the wait (else after the mainloop).
template <bool TRIGGER_TOP>
__global__ void __launch_bounds__(128) tiny64(const half* __restrict__ A, const half* __restrict__ B,
                                              half* __restrict__ C) {
  constexpr int LDA = 72, LDB = 72;  // padded rows (halves): ldmatrix rows hit different banks
  __shared__ __align__(16) half sA[16 * LDA];
  __shared__ __align__(16) half sB[64 * LDB];
  if (TRIGGER_TOP) gdc_launch();
  gdc_wait();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int m0 = blockIdx.x * 16;
  // A: 16 rows x 8 chunks of 16 B = 128 chunks (one per thread); B: 64 x 8 = 512 (four each)
  const uint4 a = reinterpret_cast<const uint4*>(A + (size_t)(m0 + tid / 8) * 64)[tid % 8];
  uint4 b[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int c = tid + i * 128;
    b[i] = reinterpret_cast<const uint4*>(B + (size_t)(c / 8) * 64)[c % 8];
  }
  *reinterpret_cast<uint4*>(sA + (tid / 8) * LDA + (tid % 8) * 8) = a;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int c = tid + i * 128;
    *reinterpret_cast<uint4*>(sB + (c / 8) * LDB + (c % 8) * 8) = b[i];
  }
  __syncthreads();
  float acc[2][4] = {};
  const uint32_t baseA = static_cast<uint32_t>(__cvta_generic_to_shared(sA));
  const uint32_t baseB = static_cast<uint32_t>(__cvta_generic_to_shared(sB));
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    uint32_t fa[4], fb[4];
    const uint32_t pa = baseA + ((lane & 15) * LDA + kk * 16 + (lane >> 4) * 8) * 2;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(fa[0]), "=r"(fa[1]), "=r"(fa[2]), "=r"(fa[3]) : "r"(pa));
    const uint32_t pb = baseB + ((kk * 16 + (lane & 15)) * LDB + warp * 16 + (lane >> 4) * 8) * 2;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(fb[0]), "=r"(fb[1]), "=r"(fb[2]), "=r"(fb[3]) : "r"(pb));
#pragma unroll
    for (int j = 0; j < 2; ++j)
      asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                   "{%0,%1,%2,%3};\n"
                   : "+f"(acc[j][0]), "+f"(acc[j][1]), "+f"(acc[j][2]), "+f"(acc[j][3])
                   : "r"(fa[0]), "r"(fa[1]), "r"(fa[2]), "r"(fa[3]), "r"(fb[2 * j]), "r"(fb[2 * j + 1]));
  }
  if (!TRIGGER_TOP) gdc_launch();
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int r = m0 + lane / 4, c = warp * 16 + j * 8 + (lane % 4) * 2;
    *reinterpret_cast<__half2*>(C + (size_t)r * 64 + c) = __floats2half2_rn(acc[j][0], acc[j][1]);
    *reinterpret_cast<__half2*>(C + (size_t)(r + 8) * 64 + c) = __floats2half2_rn(acc[j][2], acc[j][3]);
  }
}

extern "C" int tiny64_launch(int trigger_top, const void* a, const void* b, void* c, int pdl, void* stream) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(4);
  cfg.blockDim = dim3(128);
  cfg.stream = (cudaStream_t)stream;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = at;
  cfg.numAttrs = pdl ? 1 : 0;
  cudaError_t e = trigger_top ? cudaLaunchKernelEx(&cfg, tiny64<true>, (const half*)a, (const half*)b, (half*)c)
                              : cudaLaunchKernelEx(&cfg, tiny64<false>, (const half*)a, (const half*)b, (half*)c);
  return e == cudaSuccess ? 0 : 1;
}
