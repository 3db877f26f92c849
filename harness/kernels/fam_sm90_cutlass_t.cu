// l2tui seed family: sm90_cutlass_t
//
// Purpose: mid-size HGEMM on Hopper (sm_90a) with tiles cut along M as finely as 48 or 80 rows.
// The same CUTLASS 3.x machinery as sm90_cutlass (TMA loads into a multistage ring, WGMMA,
// warp-specialized producer and consumers, a persistent or one-CTA-per-tile schedule), applied
// to the transposed product C^T = B^T A^T: CUTLASS's M is our N, its N our M. A WGMMA's M is 64
// rows per warpgroup while its N may be any multiple of 16 up to 256, so in this order the tile's
// rows (our M) take the flexible side: 48, 80 or 112 rows of C, with A (K-major) staged with the
// 128-byte swizzle whatever the row count. cuBLASLt's kernels cut their tiles this way on the
// 33-131-tile long-K shapes (Nsight Compute on 1024x512x2048: 64x80 tiles in its transposed
// view, eleven stages, clusters of 4x2). sm90_cutlass cannot: there a narrow tile is N-major B
// with rows of 96 bytes, which only the 32-byte swizzle fits.
//
// Layouts (the ABI's): A is M x K row-major, B is K x N row-major, C is M x N row-major,
// beta = 0 (C is never read). Seen by CUTLASS: A' = B^T (N x K, N-major), B' = A (M rows,
// K-major), D' = C^T (N x M column-major, the same bytes as C). K and N must be multiples of 8
// (16-byte aligned TMA rows; otherwise l2_hgemm returns 2 = unsupported); M is free.
//
// Knobs (legal values), in the ABI's orientation:
//   TILE_M          8, 16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 256
//                                       CTA tile rows of C (CUTLASS's N; 16 and 32: decode GEMMs,
//                                       a few tokens against a wide weight matrix)
//   TILE_N          64, 128, 256        CTA tile columns of C (CUTLASS's M: 64 rows per consumer
//                                       warpgroup; COOPERATIVE splits 128 or 256 over two)
//   TILE_K          64, 128             K slice per pipeline stage
//   CLUSTER_M       1, 2, 4             CTAs per cluster along M (TMA multicast of B)
//   CLUSTER_N       1, 2, 4             CTAs per cluster along N (TMA multicast of A)
//                                       (at most 8 CTAs per cluster)
//   SCHEDULE        BASIC, PINGPONG, COOPERATIVE
//                                       BASIC: one CTA per tile, one consumer warpgroup (TILE_N
//                                       64 or 128); PINGPONG: persistent, two consumer warpgroups
//                                       alternate tiles; COOPERATIVE: persistent, two consumer
//                                       warpgroups share a tile (TILE_N 128 or 256)
//   STAGES          0 (auto: fill shared memory), 2 .. 8
//   SCHEDULER       PERSISTENT, STREAMK, SPLITK, SPLITK_REDUCE, SPLITK_FUSED
//                                       CUTLASS's tile schedulers (STREAMK and SPLITK need
//                                       COOPERATIVE): few tiles over a long K (a decode GEMM's
//                                       4096 x 16 tiles of 256 x 16 are 16 CTAs) share their K
//                                       among CTAs, the partial tiles reduced by CUTLASS's fixup.
//                                       SPLITK_REDUCE (any schedule): K is cut into equal slices
//                                       run as one batched GEMM writing fp32 partial tiles, and a
//                                       second kernel adds them in slice order and writes C: no
//                                       workspace to reset per call, no CTA waits on another.
//                                       SPLITK_FUSED (BASIC only): the same slices, added inside
//                                       the GEMM's own launch: every CTA stores its slice, meets
//                                       the others at a grid-wide barrier, then adds its share
//                                       of the outputs' slices in slice order (one launch; a grid
//                                       larger than the GPU holds at once falls back to the
//                                       second kernel, since a barrier would wait for CTAs that
//                                       cannot start)
//   SPLITS          0, 1, 2, 3, 4, 8    K splits for SPLITK / SPLITK_REDUCE / SPLITK_FUSED (ignored
//                                       otherwise);
//                                       0 = chosen per call: tiles x splits fill one wave of
//                                       resident CTAs, at least 4 k-tiles per split
//                                       (the sliced schedulers: slices must divide K into multiples of
//                                       TILE_K, else of 8; the count is lowered until they do)
//   RASTER          RASTER_HEURISTIC, RASTER_ALONG_M, RASTER_ALONG_N  tile order (of C's tiles)
//   SWIZZLE         1, 2, 4, 8          max swizzle size of the tile order
//   ACC             ACC_F32, ACC_F16    accumulator type
//   PDL             0, 1                programmatic dependent launch (Hopper): the launch and
//                                       prologue overlap the previous kernel's tail; every global
//                                       access still waits for it (griddepcontrol.wait)
//
// The epilogue stores through shared memory by TMA with no source operand (beta = 0 compiled
// in), each subtile's store issued after the next is staged.

// Names for knob values (do not edit).
#define COOPERATIVE 1
#define PINGPONG 2
#define BASIC 3
#define PERSISTENT 1
#define STREAMK 2
#define SPLITK 3
#define SPLITK_REDUCE 4
#define SPLITK_FUSED 5
#define RASTER_HEURISTIC 0
#define RASTER_ALONG_M 1
#define RASTER_ALONG_N 2
#define ACC_F32 1
#define ACC_F16 2

// l2: knobs begin
#define TILE_M 80
#define TILE_N 64
#define TILE_K 64
#define CLUSTER_M 2
#define CLUSTER_N 4
#define SCHEDULE PINGPONG
#define STAGES 0
#define SCHEDULER PERSISTENT
#define SPLITS 1
#define RASTER RASTER_HEURISTIC
#define SWIZZLE 1
#define ACC ACC_F32
#define PDL 0
// l2: knobs end
// l2: acc=f32
// (the line above declares the accumulator to the harness: keep it equal to ACC)

// Device-side asserts inside the WGMMA mainloop are function calls that serialize the wgmma
// pipeline (ptxas warning C7510): build without them.
#ifndef NDEBUG
#define NDEBUG
#endif
// WGMMA shapes whose N is not a power of two times 32 (48, 80, 112, 160...): without this CuTe's
// atom selector takes the largest of 256, 192, 128, 96, 64, 32, 16 dividing the tile, and an
// 80-row tile would run as five 64x16x16 WGMMAs per k-step instead of one 64x80x16.
#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED 1
#if PDL
#define CUTLASS_ENABLE_GDC_FOR_SM90 1
#define L2_LAUNCH_PDL true
#else
#define L2_LAUNCH_PDL false
#endif

#include <cuda_runtime.h>
#include <cuda_fp16.h>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/numeric_types.h"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/thread/linear_combination.h"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "cutlass/util/packed_stride.hpp"

using namespace cute;

// K in slices written as fp32 partial tiles (SPLITK_REDUCE and SPLITK_FUSED)
#define L2_SLICED (SCHEDULER == SPLITK_REDUCE || SCHEDULER == SPLITK_FUSED)

namespace l2t {

using ElementA = cutlass::half_t;   // A' = B^T
using ElementB = cutlass::half_t;   // B' = A
#if L2_SLICED
using ElementD = float;  // the fp32 slice sums; the reduce kernel writes the fp16 C
#else
using ElementD = cutlass::half_t;
#endif
#if ACC == ACC_F16
using ElementAcc = cutlass::half_t;
#else
using ElementAcc = float;
#endif
using ElementCompute = float;

using LayoutA = cutlass::layout::ColumnMajor;  // A' = B^T: N x K, N contiguous
using LayoutB = cutlass::layout::ColumnMajor;  // B' = A: K x M as CUTLASS's B, K contiguous
using LayoutD = cutlass::layout::ColumnMajor;  // D' = C^T: N x M, N contiguous
constexpr int kAlign = 8;                      // 16 bytes of fp16
constexpr int kAlignD = 16 / static_cast<int>(sizeof(ElementD));

// CUTLASS's (M, N, K) tile and cluster: ours with M and N exchanged
using TileShape = Shape<Int<TILE_N>, Int<TILE_M>, Int<TILE_K>>;
using ClusterShape = Shape<Int<CLUSTER_N>, Int<CLUSTER_M>, _1>;

static_assert(SCHEDULER == PERSISTENT || L2_SLICED || SCHEDULE == COOPERATIVE,
              "STREAMK and SPLITK need COOPERATIVE");
static_assert(SCHEDULER != SPLITK_FUSED || SCHEDULE == BASIC,
              "SPLITK_FUSED needs BASIC (the persistent schedules hand registers between warpgroups)");
#if SCHEDULER == PERSISTENT || L2_SLICED
using TileScheduler = cutlass::gemm::PersistentScheduler;
#else
using TileScheduler = cutlass::gemm::StreamKScheduler;
#endif

#if SCHEDULE == COOPERATIVE
static_assert(TILE_N % 128 == 0, "COOPERATIVE: two consumer warpgroups split TILE_N (CUTLASS's M)");
using MainloopSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
#elif SCHEDULE == BASIC
static_assert(TILE_N == 64 || TILE_N == 128, "BASIC: one consumer warpgroup holds 64 or 128 columns");
using MainloopSchedule = cutlass::gemm::KernelTmaWarpSpecialized;
using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
#else
static_assert(TILE_N == 64 || TILE_N == 128, "PINGPONG: each consumer warpgroup holds a whole tile");
using MainloopSchedule = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
#endif

using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, ElementAcc, ElementCompute,
    void, LayoutD, kAlignD,      // no source operand: beta = 0
    ElementD, LayoutD, kAlignD,  // D' = C^T (SPLITK_REDUCE: its fp32 slices)
    EpilogueSchedule>::CollectiveOp;

#if STAGES == 0
using StageCount = cutlass::gemm::collective::StageCountAutoCarveout<
    static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>;
#else
using StageCount = cutlass::gemm::collective::StageCount<STAGES>;
#endif

using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, LayoutA, kAlign, ElementB,
    LayoutB, kAlign, ElementAcc, TileShape, ClusterShape, StageCount, MainloopSchedule>::CollectiveOp;

using GemmKernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, CollectiveMainloop,
                                                        CollectiveEpilogue, TileScheduler>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

using StrideA = typename Gemm::GemmKernel::StrideA;
using StrideB = typename Gemm::GemmKernel::StrideB;
using StrideD = typename Gemm::GemmKernel::StrideD;

// The initialized kernel of the last problem: a repeated identical call reuses its parameters
// (TMA descriptors), so a call costs the launch alone.
struct Prepared {
  Gemm gemm;
  int sm_count = 0;
  int cc = 0;                  // compute capability (PDL needs 90+)
  float* slices = nullptr;     // sliced schedulers: fp32 slice sums, splits x M x N (grow-only)
  size_t slice_floats = 0;
  int splits = 1;              // sliced schedulers: slices of the last prepared problem
  unsigned int* barrier = nullptr;  // SPLITK_FUSED: arrivals and generation (zero between launches)
  int fused_resident = -1;     // SPLITK_FUSED: CTAs of the fused kernel the GPU holds at once
  int resident_clusters = -1;  // -1: not asked yet; 0: the query failed (CUTLASS uses sm_count)
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  int m = -1, n = -1, k = -1;
  cudaStream_t stream = nullptr;
};

static Prepared& prepared() {
  static Prepared p;
  return p;
}

// Clusters of this kernel the GPU holds at once. A persistent grid sized from the SM count alone
// may not fit when GPCs' SM counts are not multiples of the cluster; the occupancy query knows.
static int resident_clusters(const void* fn) {
  using Kernel = typename Gemm::GemmKernel;
  const int smem = static_cast<int>(Kernel::SharedStorageSize);
  if (cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  cudaLaunchAttribute cluster[1];
  cluster[0].id = cudaLaunchAttributeClusterDimension;
  cluster[0].val.clusterDim.x = CLUSTER_N;   // CUTLASS's M first
  cluster[0].val.clusterDim.y = CLUSTER_M;
  cluster[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t probe = {};
  probe.gridDim = dim3(CLUSTER_N, CLUSTER_M, 1);
  probe.blockDim = dim3(Kernel::MaxThreadsPerBlock, 1, 1);
  probe.dynamicSmemBytes = smem;
  probe.attrs = cluster;
  probe.numAttrs = 1;
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, fn, &probe) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return clusters;
}

#if L2_SLICED
using State = Prepared;  // the name the shared reduce part uses
// l2: part part_splitk_reduce.cuh
#endif

#if SCHEDULER == SPLITK_FUSED
// What the fused kernel adds once its GEMM part is done: the slices, C, and the barrier's words.
struct FusedReduce {
  const float4* slices;   // splits x (M x N / 4)
  uint2* C;               // M x N fp16, four to an element
  long long vecs;         // M x N / 4
  int splits;
  unsigned int* barrier;  // [0] arrivals, [1] generation
};

// Every CTA of the launch arrives; the last resets the count and bumps the generation the others
// wait on. The count is back at zero when the launch ends, so no call has to reset it. Only safe
// when every CTA is resident at once (launch_sliced checks).
__device__ __forceinline__ void grid_barrier(unsigned int* bar, unsigned int ctas) {
  __syncthreads();
  if (threadIdx.x == 0) {
    volatile unsigned int* gen = bar + 1;
    const unsigned int mine = *gen;  // read before arriving: the last arrival changes it
    __threadfence();
    if (atomicAdd(bar, 1u) == ctas - 1) {
      atomicExch(bar, 0u);
      __threadfence();
      atomicAdd(bar + 1, 1u);
    } else {
      while (*gen == mine) __nanosleep(64);
    }
    __threadfence();
  }
  __syncthreads();
}

// CUTLASS's kernel (its device_kernel's body), then the reduce in the same launch: each CTA's
// fp32 slice is stored by TMA, the CTAs meet, and each thread adds the slices of its share of C
// in slice order (the sum never depends on timing).
template <class Kernel>
__global__ void __launch_bounds__(Kernel::MaxThreadsPerBlock, Kernel::MinBlocksPerMultiprocessor)
gemm_fused_reduce(CUTLASS_GRID_CONSTANT typename Kernel::Params const params, FusedReduce r) {
  extern __shared__ char smem[];
  Kernel op;
  op(params, smem);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // the epilogue waited for its TMA stores to leave shared memory; wait for them to be written,
  // then order them before this thread's generic-proxy accesses
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
#endif
  const unsigned int ctas = gridDim.x * gridDim.y * gridDim.z;
  grid_barrier(r.barrier, ctas);
  const long long cta = blockIdx.x + (long long)gridDim.x * (blockIdx.y + (long long)gridDim.y * blockIdx.z);
  const long long stride = (long long)ctas * blockDim.x;
  for (long long e = cta * blockDim.x + threadIdx.x; e < r.vecs; e += stride) {
    float4 sum = __ldcg(r.slices + e);
    for (int sl = 1; sl < r.splits; ++sl) {
      const float4 v = __ldcg(r.slices + sl * r.vecs + e);
      sum.x += v.x; sum.y += v.y; sum.z += v.z; sum.w += v.w;
    }
    r.C[e] = make_uint2(pack_half2(sum.x, sum.y), pack_half2(sum.z, sum.w));
  }
}

// CTAs of the fused kernel the GPU holds at once (0: unknown, so never fused); sets its shared
// memory size, which its launch needs too.
static int fused_resident() {
  using Kernel = typename Gemm::GemmKernel;
  const void* fn = reinterpret_cast<const void*>(gemm_fused_reduce<Kernel>);
  return resident_clusters(fn) * CLUSTER_M * CLUSTER_N;
}
#endif

#if L2_SLICED
// The prepared GEMM's slices, then their sum into C: a second kernel (SPLITK_REDUCE), or in the
// GEMM's own launch (SPLITK_FUSED) when all its CTAs fit on the GPU at once.
static int launch_sliced(Prepared& p, void* C, int M, int N, cudaStream_t s) {
#if SCHEDULER == SPLITK_FUSED
  using Kernel = typename Gemm::GemmKernel;
  const dim3 grid = Kernel::get_grid_shape(p.gemm.params());
  if (p.fused_resident < 0) p.fused_resident = fused_resident();
  if (p.barrier == nullptr) {
    if (cudaMalloc(&p.barrier, 2 * sizeof(unsigned int)) != cudaSuccess) return 3;
    if (cudaMemsetAsync(p.barrier, 0, 2 * sizeof(unsigned int), s) != cudaSuccess) return 4;
  }
  if ((long long)grid.x * grid.y * grid.z <= p.fused_resident) {
    const FusedReduce r{reinterpret_cast<const float4*>(p.slices), static_cast<uint2*>(C), (long long)M * N / 4,
                        p.splits, p.barrier};
    cudaLaunchConfig_t lc = {};
    lc.gridDim = grid;
    lc.blockDim = Kernel::get_block_shape();
    lc.dynamicSmemBytes = Kernel::SharedStorageSize;
    lc.stream = s;
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = CLUSTER_N;   // CUTLASS's M first
    attr[0].val.clusterDim.y = CLUSTER_M;
    attr[0].val.clusterDim.z = 1;
    attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[1].val.programmaticStreamSerializationAllowed = 1;
    lc.attrs = attr;
    lc.numAttrs = (PDL && p.cc >= 90) ? 2 : 1;
    return cudaLaunchKernelEx(&lc, gemm_fused_reduce<Kernel>, p.gemm.params(), r) == cudaSuccess ? 0 : 4;
  }
#endif
  if (p.gemm.run(s, nullptr, L2_LAUNCH_PDL) != cutlass::Status::kSuccess) return 4;
  return launch_reduce(p, C, M, N, s);
}
#endif

}  // namespace l2t

extern "C" int l2_hgemm(const void* A, const void* B, void* C, int M, int N, int K, void* stream) {
  using namespace l2t;
  if (M <= 0 || N <= 0 || K <= 0) return 1;
  if (K % kAlign != 0 || N % kAlign != 0) return 2;  // TMA needs 16-byte aligned rows
  Prepared& p = prepared();
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (p.sm_count == 0) {
    int dev = 0;
    cudaGetDevice(&dev);
    p.sm_count = cutlass::KernelHardwareInfo::query_device_multiprocessor_count(dev);
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    p.cc = major * 10 + minor;
  }
  if (p.resident_clusters < 0)
    p.resident_clusters = resident_clusters(reinterpret_cast<const void*>(cutlass::device_kernel<GemmKernel>));
  const bool same = p.a == A && p.b == B && p.c == C && p.m == M && p.n == N && p.k == K && p.stream == s;
#if L2_SLICED
  if (!same) {
    p.m = -1;  // until initialize() succeeds for this problem
    const int ctas = p.resident_clusters > 0 ? p.resident_clusters * CLUSTER_M * CLUSTER_N : p.sm_count;
    p.splits = reduce_splits(M, N, K, ctas);
    const size_t need_floats = (size_t)p.splits * M * N;
    if (need_floats > p.slice_floats) {  // grow-only; an old buffer stays (graphs may use it)
      p.slices = nullptr;
      p.slice_floats = 0;
      if (cudaMalloc(&p.slices, need_floats * sizeof(float)) != cudaSuccess) return 3;
      p.slice_floats = need_floats;
    }
  }
  if (same) return launch_sliced(p, C, M, N, s);
  // CUTLASS's problem (M', N', K / splits, splits): slice l of K is rows [l*kslice, (l+1)*kslice)
  // of B (A' = B^T: ld N, the slice kslice*N further) and columns of A (B' = A: ld K, kslice
  // further); slice l's fp32 C^T goes to its own M x N block of the slices buffer.
  const int kslice = K / p.splits;
  StrideA sa = cutlass::make_cute_packed_stride(StrideA{}, make_shape(N, kslice, p.splits));
  StrideB sb = cutlass::make_cute_packed_stride(StrideB{}, make_shape(M, K, 1));
  cute::get<2>(sb) = static_cast<int64_t>(kslice);
  StrideD sd = cutlass::make_cute_packed_stride(StrideD{}, make_shape(N, M, p.splits));
  ElementD* out = p.slices;
  const auto mode = p.splits > 1 ? cutlass::gemm::GemmUniversalMode::kBatched : cutlass::gemm::GemmUniversalMode::kGemm;
  const int pk = kslice, pl = p.splits;
#else
#if SCHEDULER == PERSISTENT
  // Same problem as last call: the kernel parameters (TMA descriptors) are still valid. (Stream-K
  // and split-K initialize every call: that resets their workspace for the fixup.)
  if (same) return p.gemm.run(s, nullptr, L2_LAUNCH_PDL) == cutlass::Status::kSuccess ? 0 : 4;
#endif
  // CUTLASS's problem (M', N', K) = (N, M, K)
  StrideA sa = cutlass::make_cute_packed_stride(StrideA{}, make_shape(N, K, 1));
  StrideB sb = cutlass::make_cute_packed_stride(StrideB{}, make_shape(M, K, 1));
  StrideD sd = cutlass::make_cute_packed_stride(StrideD{}, make_shape(N, M, 1));
  ElementD* out = static_cast<ElementD*>(C);
  const auto mode = cutlass::gemm::GemmUniversalMode::kGemm;
  const int pk = K, pl = 1;
#endif
  cutlass::KernelHardwareInfo hw;
  hw.device_id = 0;
  hw.sm_count = p.sm_count;
  hw.max_active_clusters = p.resident_clusters;
  typename Gemm::Arguments args{
      mode,
      {N, M, pk, pl},
      {static_cast<const ElementA*>(B), sa, static_cast<const ElementB*>(A), sb},
      {{1.0f, 0.0f}, nullptr, sd, out, sd},
      hw};
  args.scheduler.max_swizzle_size = SWIZZLE;
  using Raster = cutlass::gemm::kernel::detail::RasterOrderOptions;
#if RASTER == RASTER_ALONG_M
  args.scheduler.raster_order = Raster::AlongN;   // along our M is along CUTLASS's N
#elif RASTER == RASTER_ALONG_N
  args.scheduler.raster_order = Raster::AlongM;
#else
  args.scheduler.raster_order = Raster::Heuristic;
#endif
#if SCHEDULER == STREAMK
  args.scheduler.decomposition_mode = cutlass::gemm::kernel::detail::DecompositionMode::StreamK;
#elif SCHEDULER == SPLITK
  int splits = SPLITS;
  if (splits == 0) {
    // one wave: every (tile, split) unit resident at once, at least 4 k-tiles per split
    const int tiles = ((M + TILE_M - 1) / TILE_M) * ((N + TILE_N - 1) / TILE_N);
    const int ctas = p.resident_clusters > 0 ? p.resident_clusters * CLUSTER_M * CLUSTER_N : p.sm_count;
    const int ktiles = (K + TILE_K - 1) / TILE_K;
    splits = ctas / (tiles > 0 ? tiles : 1);
    if (splits > ktiles / 4) splits = ktiles / 4;
    if (splits < 1) splits = 1;
  }
  args.scheduler.splits = splits;
  args.scheduler.decomposition_mode = cutlass::gemm::kernel::detail::DecompositionMode::SplitK;
#endif
  if (p.gemm.can_implement(args) != cutlass::Status::kSuccess) return 2;
  const size_t need = Gemm::get_workspace_size(args);
  if (need > p.workspace_bytes) {  // grown once per larger need; never freed (a captured graph may use it)
    p.workspace = nullptr;
    p.workspace_bytes = 0;
    if (cudaMalloc(&p.workspace, need) != cudaSuccess) return 3;
    p.workspace_bytes = need;
  }
  p.m = -1;  // until initialize() succeeds for this problem
  if (p.gemm.initialize(args, p.workspace, s) != cutlass::Status::kSuccess) return 4;
  p.a = A; p.b = B; p.c = C; p.m = M; p.n = N; p.k = K; p.stream = s;
#if L2_SLICED
  return launch_sliced(p, C, M, N, s);
#else
  return p.gemm.run(s, nullptr, L2_LAUNCH_PDL) == cutlass::Status::kSuccess ? 0 : 4;
#endif
}
