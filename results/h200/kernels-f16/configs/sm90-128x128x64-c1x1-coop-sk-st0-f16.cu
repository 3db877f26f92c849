// l2tui seed family: sm90_cutlass
//
// Purpose: large and mid-size HGEMM on Hopper (sm_90a). A CUTLASS 3.x kernel built with the
// CollectiveBuilder: TMA loads into a multistage shared-memory pipeline, WGMMA tensor-core math,
// warp-specialized producer/consumer warpgroups, a persistent (or stream-K / split-K) tile
// scheduler. M, N and K are runtime arguments, so one build serves every shape. TMA zero-fills
// the residue of partial tiles, so shapes need not be tile multiples; TMA does need 16-byte
// aligned rows, so K and N must be multiples of 8 (otherwise l2_hgemm returns 2 = unsupported).
//
// Layouts: A is M x K row-major (K-major), B is K x N row-major (N-major, "RowMajor" for B in
// CUTLASS terms), C/D is M x N row-major, beta = 0 (C is never read).
//
// Knobs (legal values):
//   TILE_M          64, 128, 256        CTA tile rows (COOPERATIVE needs >= 128)
//   TILE_N          64, 128, 256        CTA tile columns
//   TILE_K          32, 64, 128         K slice per pipeline stage
//   CLUSTER_M       1, 2                CTAs per cluster along M (TMA multicast of B)
//   CLUSTER_N       1, 2                CTAs per cluster along N (TMA multicast of A)
//   SCHEDULE        COOPERATIVE, PINGPONG   two consumer warpgroups share one tile, or alternate tiles
//   STAGES          0 (auto: fill shared memory), 2 .. 8
//   SCHEDULER       PERSISTENT, STREAMK, SPLITK  (STREAMK/SPLITK need COOPERATIVE)
//   SPLITS          0, 1, 2, 3, 4, 8    K splits for SPLITK (ignored otherwise); 0 = chosen per
//                                       call: enough splits that tiles x splits fill one wave of
//                                       resident CTAs (never more), at least 4 k-tiles per split
//   RASTER          RASTER_HEURISTIC, RASTER_ALONG_M, RASTER_ALONG_N  tile order (L2 reuse)
//   SWIZZLE         1, 2, 4, 8          max swizzle size of the tile order (block swizzling)
//   EPILOGUE        EPI_TMA, EPI_NOSMEM TMA store through shared memory, or direct register stores
//   ACC             ACC_F32, ACC_F16    accumulator type
//   PDL             0, 1                programmatic dependent launch (Hopper): the launch and
//                                       prologue overlap the previous kernel's tail; every global
//                                       access still waits for it (griddepcontrol.wait);
//                                       PERSISTENT scheduler only (ignored otherwise)
//
// Stream-K and split-K use a workspace that is allocated once (grown when a larger shape needs
// more) and reduced in a fixed order, so results stay bit-reproducible.

// Names for knob values (do not edit).
#define COOPERATIVE 1
#define PINGPONG 2
#define PERSISTENT 1
#define STREAMK 2
#define SPLITK 3
#define RASTER_HEURISTIC 0
#define RASTER_ALONG_M 1
#define RASTER_ALONG_N 2
#define EPI_TMA 1
#define EPI_NOSMEM 2
#define ACC_F32 1
#define ACC_F16 2

// l2: knobs begin
#define TILE_M 128
#define TILE_N 128
#define TILE_K 64
#define CLUSTER_M 1
#define CLUSTER_N 1
#define SCHEDULE COOPERATIVE
#define STAGES 0
#define SCHEDULER STREAMK
#define SPLITS 1
#define RASTER RASTER_HEURISTIC
#define SWIZZLE 1
#define EPILOGUE EPI_TMA
#define ACC ACC_F16
#define PDL 1
// l2: knobs end
// l2: acc=f16
// (the line above declares the accumulator to the harness: keep it equal to ACC)

// Device-side asserts inside the WGMMA mainloop are function calls that serialize the wgmma
// pipeline (ptxas warning C7510): build without them.
#ifndef NDEBUG
#define NDEBUG
#endif
// PDL: compile CUTLASS's grid-dependency control (griddepcontrol.wait before the first global
// access, launch_dependents after the last tile), so the launch and prologue overlap the previous
// kernel's tail. Persistent scheduler only: CUTLASS 4.2's stream-K scheduler does not compile
// with it.
#if PDL && SCHEDULER == PERSISTENT
#define CUTLASS_ENABLE_GDC_FOR_SM90 1
#define L2_LAUNCH_PDL true
#else
#define L2_LAUNCH_PDL false
#endif

#include <cuda_runtime.h>

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

namespace l2 {

using ElementA = cutlass::half_t;
using ElementB = cutlass::half_t;
using ElementD = cutlass::half_t;
#if ACC == ACC_F16
using ElementAcc = cutlass::half_t;
#else
using ElementAcc = float;
#endif
using ElementCompute = float;

using LayoutA = cutlass::layout::RowMajor;  // M x K, K contiguous
using LayoutB = cutlass::layout::RowMajor;  // K x N, N contiguous
using LayoutD = cutlass::layout::RowMajor;  // M x N, N contiguous
constexpr int kAlign = 8;                   // 16 bytes of fp16

using TileShape = Shape<Int<TILE_M>, Int<TILE_N>, Int<TILE_K>>;
using ClusterShape = Shape<Int<CLUSTER_M>, Int<CLUSTER_N>, _1>;

#if SCHEDULE == COOPERATIVE
using MainloopSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
#if EPILOGUE == EPI_NOSMEM
using EpilogueSchedule = cutlass::epilogue::NoSmemWarpSpecialized;
#else
using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
#endif
#else
using MainloopSchedule = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
#if EPILOGUE == EPI_NOSMEM
using EpilogueSchedule = cutlass::epilogue::NoSmemWarpSpecialized;
#else
using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
#endif
#endif

#if SCHEDULER == PERSISTENT
using TileScheduler = cutlass::gemm::PersistentScheduler;
#else
using TileScheduler = cutlass::gemm::StreamKScheduler;
#endif

using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, ElementAcc, ElementCompute,
    ElementD, LayoutD, kAlign,   // C (never read: beta = 0)
    ElementD, LayoutD, kAlign,   // D
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

struct State {
  Gemm gemm;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  int sm_count = 0;
  int max_active_clusters = -1;  // -1: not queried yet; 0: the query failed (CUTLASS uses sm_count)
  // arguments of the last initialize(), so repeated identical calls skip host-side setup
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  int m = -1, n = -1, k = -1;
  cudaStream_t stream = nullptr;
};

static State& state() {
  static State s;
  return s;
}

// How many clusters of this kernel can be resident at once. CUTLASS sizes the persistent grid
// from sm_count alone when this is unknown; with clusters, the GPCs' SM counts need not be
// multiples of the cluster size, so such a grid can exceed what fits and its last clusters wait
// for a second wave (a tail for the persistent scheduler; for stream-K, CTAs spinning on peers
// that are not resident). The query needs the kernel's real dynamic shared memory.
static int query_max_active_clusters() {
  using Kernel = typename Gemm::GemmKernel;
  const void* fn = reinterpret_cast<const void*>(cutlass::device_kernel<Kernel>);
  const int smem = static_cast<int>(Kernel::SharedStorageSize);
  if (cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = CLUSTER_M;
  attr[0].val.clusterDim.y = CLUSTER_N;
  attr[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(CLUSTER_M, CLUSTER_N, 1);
  cfg.blockDim = dim3(Kernel::MaxThreadsPerBlock, 1, 1);
  cfg.dynamicSmemBytes = smem;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  int n = 0;
  if (cudaOccupancyMaxActiveClusters(&n, fn, &cfg) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

}  // namespace l2

extern "C" int l2_hgemm(const void* A, const void* B, void* C, int M, int N, int K, void* stream) {
  using namespace l2;
  if (M <= 0 || N <= 0 || K <= 0) return 1;
  if (K % kAlign != 0 || N % kAlign != 0) return 2;  // TMA needs 16-byte aligned rows
  State& st = state();
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (st.sm_count == 0) {
    int dev = 0;
    cudaGetDevice(&dev);
    st.sm_count = cutlass::KernelHardwareInfo::query_device_multiprocessor_count(dev);
  }
  if (st.max_active_clusters < 0) st.max_active_clusters = query_max_active_clusters();
#if SCHEDULER == PERSISTENT
  // Same problem as last call: the kernel parameters (TMA descriptors) are still valid.
  if (st.a == A && st.b == B && st.c == C && st.m == M && st.n == N && st.k == K && st.stream == s) {
    return st.gemm.run(s, nullptr, L2_LAUNCH_PDL) == cutlass::Status::kSuccess ? 0 : 4;
  }
#endif
  StrideA sa = cutlass::make_cute_packed_stride(StrideA{}, make_shape(M, K, 1));
  StrideB sb = cutlass::make_cute_packed_stride(StrideB{}, make_shape(N, K, 1));
  StrideD sd = cutlass::make_cute_packed_stride(StrideD{}, make_shape(M, N, 1));
  cutlass::KernelHardwareInfo hw;
  hw.device_id = 0;
  hw.sm_count = st.sm_count;
#ifndef L2_NO_CLUSTER_QUERY
  hw.max_active_clusters = st.max_active_clusters;
#endif
  typename Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGemm,
      {M, N, K, 1},
      {static_cast<const ElementA*>(A), sa, static_cast<const ElementB*>(B), sb},
      {{1.0f, 0.0f}, static_cast<const ElementD*>(C), sd, static_cast<ElementD*>(C), sd},
      hw};
  args.scheduler.max_swizzle_size = SWIZZLE;
  using Raster = cutlass::gemm::kernel::detail::RasterOrderOptions;
#if RASTER == RASTER_ALONG_M
  args.scheduler.raster_order = Raster::AlongM;
#elif RASTER == RASTER_ALONG_N
  args.scheduler.raster_order = Raster::AlongN;
#else
  args.scheduler.raster_order = Raster::Heuristic;
#endif
#if SCHEDULER == STREAMK
  args.scheduler.decomposition_mode = cutlass::gemm::kernel::detail::DecompositionMode::StreamK;
#elif SCHEDULER == SPLITK
  int splits = SPLITS;
  if (splits == 0) {
    // One wave: every (tile, split) unit is resident at once, so no CTA waits on a peer that
    // has not started, and few-tile long-K shapes still use every SM.
    const int tiles = ((M + TILE_M - 1) / TILE_M) * ((N + TILE_N - 1) / TILE_N);
    const int ctas = st.max_active_clusters > 0 ? st.max_active_clusters * CLUSTER_M * CLUSTER_N : st.sm_count;
    const int ktiles = (K + TILE_K - 1) / TILE_K;
    splits = ctas / (tiles > 0 ? tiles : 1);
    if (splits > ktiles / 4) splits = ktiles / 4;
    if (splits < 1) splits = 1;
  }
  args.scheduler.splits = splits;
  args.scheduler.decomposition_mode = cutlass::gemm::kernel::detail::DecompositionMode::SplitK;
#endif
#if SCHEDULER != PERSISTENT && defined(L2_SK_NONDETERMINISTIC)
  args.scheduler.reduction_mode = cutlass::gemm::kernel::detail::ReductionMode::Nondeterministic;
#endif
  if (st.gemm.can_implement(args) != cutlass::Status::kSuccess) return 2;
  size_t need = Gemm::get_workspace_size(args);
  if (need > st.workspace_bytes) {  // grown once per larger shape, never per call
    // The old buffer is not freed: a CUDA graph captured earlier may still point at it, and
    // replaying it over memory handed to someone else would corrupt the stream-K barriers.
    st.workspace = nullptr;
    st.workspace_bytes = 0;
    if (cudaMalloc(&st.workspace, need) != cudaSuccess) return 3;
    st.workspace_bytes = need;
  }
  if (st.gemm.initialize(args, st.workspace, s) != cutlass::Status::kSuccess) {
    st.m = -1;
    return 4;
  }
  st.a = A; st.b = B; st.c = C; st.m = M; st.n = N; st.k = K; st.stream = s;
  return st.gemm.run(s, nullptr, L2_LAUNCH_PDL) == cutlass::Status::kSuccess ? 0 : 4;
}
