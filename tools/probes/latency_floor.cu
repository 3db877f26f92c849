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
