// What one call costs before its kernel does any work, timed per call as the harness times a GEMM
// (tools/probes/launch_cost.py builds and runs it and writes the JSON with the run's metadata).
//
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a tools/probes/launch_cost.cu -o launch_cost
//   ./launch_cost > launch-cost.json
//
// Why: on small and mid shapes our CUTLASS kernels are as fast as cuBLASLt's under Nsight Compute
// (which times the kernel alone) and up to 0.8 us slower per call, where each call follows an
// unrelated kernel. The difference is outside the kernel's duration, so this probe times kernels
// that do nothing, launched with each of what distinguishes a GEMM's launch from an ordinary
// kernel's: a large dynamic shared-memory allocation (the SM's shared/L1 split must change after a
// kernel that used none), a large __grid_constant__ parameter block (TMA descriptors and CUTLASS's
// Params), more and bigger CTAs. Method, as the harness's per-call timing: one CUDA graph of R
// steps [separator, probe] and one of R separators alone, replayed in interleaved rounds, each
// replay timed with events; per call = (probe graph - base graph) / R, median over the rounds. The
// separator is a one-thread kernel that writes one int (what an unrelated producer kernel does).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#define CK(x)                                                                                       \
  do {                                                                                              \
    cudaError_t e_ = (x);                                                                           \
    if (e_ != cudaSuccess) {                                                                        \
      std::fprintf(stderr, "launch_cost: %s: %s\n", #x, cudaGetErrorString(e_));                    \
      std::exit(1);                                                                                 \
    }                                                                                               \
  } while (0)

struct Params1K {
  unsigned char bytes[1024];
};

__global__ void separator(int* p) { p[0] += 1; }

// the separator with a large dynamic shared-memory allocation: the SM's split is already a GEMM's
__global__ void separator_smem(int* p) {
  extern __shared__ int s[];
  s[0] = p[0];
  p[0] = s[0] + 1;
}

__global__ void probe_plain(int* out) {
  if (threadIdx.x == 1023) out[1] = 1;  // never true: keeps the kernel from being empty
}

__global__ void probe_smem(int* out) {
  extern __shared__ int s[];
  if (threadIdx.x == 0) s[0] = blockIdx.x;
  __syncthreads();
  if (s[0] < 0) out[1] = 1;
}

// every thread of a CTA reads the same parameter byte: a read that differs between a warp's threads
// is serialized by the constant cache and would be timed as launch cost
__global__ void probe_params(__grid_constant__ const Params1K p, int* out) {
  if (p.bytes[blockIdx.x & 1023] == 0xff) out[1] = 1;
}

__global__ void probe_smem_params(__grid_constant__ const Params1K p, int* out) {
  extern __shared__ int s[];
  if (threadIdx.x == 0) s[0] = p.bytes[blockIdx.x & 1023];
  __syncthreads();
  if (s[0] == 0xff) out[1] = 1;
}

struct Variant {
  std::string name;
  int kind;        // 0 plain, 1 smem, 2 params, 3 smem + params
  int ctas, threads, smem;
  bool sep_smem;   // the separator allocates the same dynamic shared memory
  int cluster = 1; // CTAs per cluster (a cluster launch, as CUTLASS's kernels with multicast)
};

static void launch(const Variant& v, int* flag, const Params1K& p, cudaStream_t s) {
  if (v.cluster > 1) {  // the smem + params probe, launched in clusters
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(v.ctas);
    cfg.blockDim = dim3(v.threads);
    cfg.dynamicSmemBytes = v.smem;
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = v.cluster;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    CK(cudaLaunchKernelEx(&cfg, probe_smem_params, p, flag));
    return;
  }
  switch (v.kind) {
    case 0: probe_plain<<<v.ctas, v.threads, 0, s>>>(flag); break;
    case 1: probe_smem<<<v.ctas, v.threads, v.smem, s>>>(flag); break;
    case 2: probe_params<<<v.ctas, v.threads, 0, s>>>(p, flag); break;
    default: probe_smem_params<<<v.ctas, v.threads, v.smem, s>>>(p, flag); break;
  }
}

static void sep(const Variant& v, int* flag, cudaStream_t s) {
  if (v.sep_smem) {
    separator_smem<<<1, 1, v.smem, s>>>(flag);
  } else {
    separator<<<1, 1, 0, s>>>(flag);
  }
}

static cudaGraphExec_t capture(const Variant& v, bool with_probe, int reps, int* flag, const Params1K& p,
                               cudaStream_t s) {
  cudaGraph_t g;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < reps; ++i) {
    sep(v, flag, s);
    if (with_probe) launch(v, flag, p, s);
  }
  CK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t ge;
  CK(cudaGraphInstantiate(&ge, g, 0));
  CK(cudaGraphDestroy(g));
  return ge;
}

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 200;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 15;
  int dev = 0;
  CK(cudaSetDevice(dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  const int big = 200 * 1024, mid = 96 * 1024;
  for (auto fn : {(const void*)probe_smem, (const void*)probe_smem_params, (const void*)separator_smem}) {
    CK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, big));
  }
  int* flag;
  CK(cudaMalloc(&flag, 2 * sizeof(int)));
  CK(cudaMemset(flag, 0, 2 * sizeof(int)));
  Params1K p{};
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const std::vector<Variant> vs = {
      {"empty, 64 CTAs x 256", 0, 64, 256, 0, false},
      {"96 KB shared memory", 1, 64, 256, mid, false},
      {"200 KB shared memory", 1, 64, 256, big, false},
      {"200 KB shared memory, separator with 200 KB too", 1, 64, 256, big, true},
      {"1 KB parameters", 2, 64, 256, 0, false},
      {"200 KB shared memory + 1 KB parameters", 3, 64, 256, big, false},
      {"empty, 128 CTAs x 384", 0, 128, 384, 0, false},
      {"128 CTAs x 384, 200 KB + 1 KB parameters", 3, 128, 384, big, false},
      {"128 CTAs x 384, 200 KB + 1 KB, separator with 200 KB", 3, 128, 384, big, true},
      {"128 CTAs x 384, 200 KB + 1 KB, clusters of 2", 3, 128, 384, big, false, 2},
      {"128 CTAs x 384, 200 KB + 1 KB, clusters of 4", 3, 128, 384, big, false, 4},
  };
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::printf("{\"gpu\": \"%s\", \"sms\": %d, \"reps\": %d, \"rounds\": %d, \"variants\": [\n", prop.name,
              prop.multiProcessorCount, reps, rounds);
  for (size_t i = 0; i < vs.size(); ++i) {
    const Variant& v = vs[i];
    cudaGraphExec_t with = capture(v, true, reps, flag, p, s), base = capture(v, false, reps, flag, p, s);
    CK(cudaGraphLaunch(with, s));  // warm-up of both
    CK(cudaGraphLaunch(base, s));
    CK(cudaStreamSynchronize(s));
    std::vector<float> per_call;
    for (int r = 0; r < rounds; ++r) {
      float ms[2];
      for (int k = 0; k < 2; ++k) {  // alternate which graph goes first, round by round
        const bool probe_first = (r % 2) == 0;
        cudaGraphExec_t ge = (k == 0) == probe_first ? with : base;
        CK(cudaEventRecord(e0, s));
        CK(cudaGraphLaunch(ge, s));
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        float t = 0;
        CK(cudaEventElapsedTime(&t, e0, e1));
        ms[ge == with ? 0 : 1] = t;
      }
      per_call.push_back((ms[0] - ms[1]) * 1000.0f / reps);  // microseconds
    }
    std::sort(per_call.begin(), per_call.end());
    const float med = per_call[per_call.size() / 2];
    std::printf("  {\"name\": \"%s\", \"ctas\": %d, \"threads\": %d, \"smem_bytes\": %d, \"params_bytes\": %d, "
                "\"separator_smem\": %s, \"cluster\": %d, \"per_call_us\": %.4f, \"p10_us\": %.4f, \"p90_us\": %.4f}%s\n",
                v.name.c_str(), v.ctas, v.threads, v.smem, (v.kind >= 2) ? 1024 : 8, v.sep_smem ? "true" : "false",
                v.cluster, med, per_call[per_call.size() / 10], per_call[(per_call.size() * 9) / 10],
                i + 1 < vs.size() ? "," : "");
    CK(cudaGraphExecDestroy(with));
    CK(cudaGraphExecDestroy(base));
  }
  std::printf("]}\n");
  return 0;
}
