// l2tui seed family: sm90_ksplit
//
// Purpose: mid-size HGEMM on Hopper whose time goes to feeding the SMs, not to arithmetic: a few
// dozen to ~130 output tiles with K of one to several thousand (e.g. 1024x512x2048). One small
// tile per SM (what the persistent CUTLASS kernels pick there) makes every SM pull
// (TILE_M + TILE_N) x K x 2 bytes through its L2 port, about 512 KB for 64x64 tiles at K = 2048,
// at ~100 GB/s per SM. A 128x128 tile needs half the bytes per output, but then too few tiles
// fill the GPU. So: big tiles, and K split over the CTAs of one thread-block cluster
// (CLUSTER_K): each CTA multiplies 1/CLUSTER_K of K with WGMMA from a TMA-fed multistage
// shared-memory pipeline, leaves its fp32 partial tile in its own shared memory, and after a
// cluster barrier adds its 1/CLUSTER_K of the tile's rows over every peer (in rank order, through
// distributed shared memory: bit-reproducible) and stores fp16 C. No workspace, no second kernel,
// no global-memory fixup (CUTLASS's stream-K / split-K round trips through L2 and, for few tiles,
// cost more than they save on these shapes).
//
// Structure: TILE_M / 64 consumer warpgroups (each 64 rows x TILE_N, wgmma m64nTILE_Nk16 with A
// K-major and B N-major straight from 128-byte-swizzled shared memory), WG_K times over; one
// producer thread issues the TMA loads STAGES k-tiles ahead (full barriers count the bytes, empty
// barriers the consumers of a stage).
// M, N and K are runtime arguments; TMA zero-fills partial tiles; stores are predicated. Needs K
// and N multiples of 8 and 16-byte aligned pointers (TMA), otherwise l2_hgemm returns 2.
// A is M x K row-major, B is K x N row-major, C is M x N row-major (beta = 0).
//
// Knobs (legal values):
//   TILE_M     64, 128                  CTA tile rows (one consumer warpgroup per 64)
//   TILE_N     64, 128, 256             CTA tile columns (the wgmma N)
//   TILE_K     64                       K per pipeline stage (one 128-byte swizzle row of fp16)
//   STAGES     2 .. 12                  k-tiles in flight (shared memory: STAGES x (TILE_M +
//                                       TILE_N) x TILE_K x 2 bytes, at most 227 KB)
//   CLUSTER_K  1, 2, 4, 8               CTAs of one cluster that share a tile's K
//   GROUPS     0 (auto), 1, 2, 4 .. 64  clusters that share a tile's K (a second level of split-K
//                                       for few tiles with a long K, where one cluster per tile
//                                       leaves most SMs idle): each cluster adds its CTAs'
//                                       partials through distributed shared memory as above, writes
//                                       the sums to an fp32 workspace, the clusters of a tile meet
//                                       at a global barrier (the whole grid is resident: the host
//                                       checks) and each adds every cluster's sums, in cluster
//                                       order, for its 1/GROUPS of the tile (bit-reproducible).
//                                       0: the most (a power of two, up to 16) that keeps the grid
//                                       resident and at least two k-tiles per CTA; a shape it would not
//                                       split runs as GROUPS 1. Otherwise l2_hgemm returns 2 when
//                                       the grid would not be resident
//   RASTER     RASTER_ALONG_M, RASTER_ALONG_N  which tile index runs fastest (L2 reuse)
//   MMA_DEPTH  0, 1                     wgmma batches in flight past the one just issued (1: a
//                                       stage is released one k-tile later, the tensor cores never
//                                       wait for the release)
//   WG_K       1, 2                     sets of consumer warpgroups that share a tile's K inside the
//                                       CTA: with 2, each runs every second k-tile into its own
//                                       accumulators and the second set's are added to the first's
//                                       through shared memory before the epilogue (two wgmma chains
//                                       per tile, so one chain's waits on its stages and on the
//                                       tensor cores overlap the other's work: cuBLASLt's nvjet
//                                       kernels run a 64-row tile with two consumer warpgroups on
//                                       the mid shapes). Needs STAGES > WG_K and a multiple of
//                                       WG_K: every stage then serves one set, in order (with an odd
//                                       ring, a set could wait on a stage's full barrier while the
//                                       other set's earlier load there is still landing, and see an
//                                       older phase of the same parity as complete)
//   RELEASE    RELEASE_BY_THREAD,       who tells the producer a stage is free: every consumer
//              RELEASE_BY_WARP          thread arrives on the stage's empty barrier, or lane 0 of
//                                       each consumer warp once its warp is past the wgmma wait
//                                       (32x fewer shared-memory arrivals per k-tile; CUTLASS's
//                                       pipelines arrive once per consumer warpgroup)
//   PDL        0, 1                     programmatic dependent launch: griddepcontrol.wait before
//                                       the first global access, launch_dependents after the
//                                       mainloop
// CLUSTER_K 1 launches without a cluster and stores fp16 straight from the accumulators. A
// cluster of CLUSTER_K must be co-resident: the H200 holds 66 clusters of 2 and 30 of 4 at this
// shared-memory size, so more (tile, slice) CTAs than that run in two waves.
// Measured on the H200 (sm90_ksplit development calls, 2026-11-30): 64x64x64 in 1.7 us with
// CLUSTER_K 1 and ~2.3-2.9 us with 2 (cluster launch plus the reduction), a 64x128x64 k-tile
// every ~225 ns per SM (fed at ~105 GB/s per SM), 4096^3 at ~630 TFLOP/s with 128x128 tiles.
//   ACC        ACC_F32                  accumulator type (fp32 only)

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <cooperative_groups.h>

// Names for knob values (do not edit).
#define RASTER_ALONG_M 1
#define RASTER_ALONG_N 2
#define ACC_F32 1
#define RELEASE_BY_THREAD 1
#define RELEASE_BY_WARP 2

// l2: knobs begin
#define TILE_M 64
#define TILE_N 128
#define TILE_K 64
#define STAGES 8
#define CLUSTER_K 2
#define GROUPS 1
#define RASTER RASTER_ALONG_M
#define ACC ACC_F32
#define PDL 1
#define MMA_DEPTH 1
#define WG_K 1
#define RELEASE RELEASE_BY_THREAD
// l2: knobs end
// l2: acc=f32
// (the line above declares the accumulator to the harness: keep it equal to ACC)

#ifndef NDEBUG
#define NDEBUG
#endif

#include "cute/tensor.hpp"
#include "cute/arch/mma_sm90.hpp"
#include "cute/atom/mma_atom.hpp"
#include "cute/atom/copy_atom.hpp"
#include "cutlass/arch/barrier.h"
#include "cutlass/cluster_launch.hpp"
#include "cutlass/numeric_types.h"

namespace l2 {
using namespace cute;
namespace cg = cooperative_groups;

static_assert(ACC == ACC_F32, "sm90_ksplit accumulates in fp32 only");
static_assert(TILE_M == 64 || TILE_M == 128, "TILE_M is 64 or 128");
static_assert(TILE_N == 64 || TILE_N == 128 || TILE_N == 256, "TILE_N is 64, 128 or 256");
static_assert(TILE_K == 64, "TILE_K is 64 (one 128-byte swizzle row)");
static_assert(STAGES >= 2 && STAGES <= 12, "STAGES is 2 .. 12");
static_assert(CLUSTER_K == 1 || CLUSTER_K == 2 || CLUSTER_K == 4 || CLUSTER_K == 8, "CLUSTER_K is 1, 2, 4 or 8");
static_assert(TILE_M % CLUSTER_K == 0, "each CTA of the cluster reduces TILE_M / CLUSTER_K rows");
static_assert(WG_K == 1 || WG_K == 2, "WG_K is 1 or 2");
static_assert(STAGES > WG_K && STAGES % WG_K == 0,
              "STAGES > WG_K (a set of consumers holds a stage while it waits for its next) and a multiple of "
              "WG_K (each stage then serves one set, whose waits on its full barrier never alias a phase "
              "an earlier load of the other set's has yet to complete)");
static_assert(RELEASE == RELEASE_BY_THREAD || RELEASE == RELEASE_BY_WARP, "RELEASE is RELEASE_BY_THREAD or RELEASE_BY_WARP");
static_assert(GROUPS == 0 || GROUPS == 1 || GROUPS == 2 || GROUPS == 4 || GROUPS == 8 || GROUPS == 16 ||
              GROUPS == 32 || GROUPS == 64, "GROUPS is 0 (auto), 1, 2, 4, 8, 16, 32 or 64");
constexpr int kMaxGroups = 64;
// GROUPS 0 stops at 16: on 128x128x16384 (64x64 tiles, no cluster) 32 groups took 7.4-7.6 us where
// 16 took 6.4 us (H200 picks at be3427c and bce8c8d, runs/groups-*.tar.gz)
constexpr int kAutoGroups = 16;

using T = cutlass::half_t;
constexpr int kWarpgroups = TILE_M / 64;        // of one tiled MMA: one per 64 rows
constexpr int kMmaThreads = 128 * kWarpgroups;  // one set of consumers (one k-group)
constexpr int kThreads = kMmaThreads * WG_K;    // all consumers; one producer warp more
// arrivals that free a stage: its k-group's consumer threads, or their warps
constexpr int kReleaseArrivals = RELEASE == RELEASE_BY_WARP ? kMmaThreads / 32 : kMmaThreads;
constexpr int kLdC = TILE_N + 8;  // fp32 row of the partial tile: float4-aligned, and the float2 stores of
                                  // 4 rows x 8 columns per warp hit 32 distinct banks

using TileM = Int<TILE_M>;
using TileN = Int<TILE_N>;
using TileK = Int<TILE_K>;
using SmemLayoutA = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<T>{}, make_shape(TileM{}, TileK{}, Int<STAGES>{})));
// B is N-major: its 64x8 swizzle atoms are stacked along K first, so that one 64 (N) x 64 (K) block
// is contiguous and one TMA box (with atoms along N first, every 1 KB atom was its own TMA
// instruction: ~0.6 us per 128x128x64 k-tile on the H200, issue-bound)
using SmemLayoutB = decltype(tile_to_shape(GMMA::Layout_MN_SW128_Atom<T>{}, make_shape(TileN{}, TileK{}, Int<STAGES>{}),
                                           Step<_2, _1, _3>{}));
using MmaAtom = decltype(GMMA::ss_op_selector<T, T, float, Shape<_64, TileN, TileK>, GMMA::Major::K, GMMA::Major::MN>());
using TiledMma = decltype(make_tiled_mma(MmaAtom{}, Layout<Shape<Int<kWarpgroups>, _1, _1>>{}));

constexpr int kStageBytes = (TILE_M + TILE_N) * TILE_K * static_cast<int>(sizeof(T));
constexpr int kPipeBytes = STAGES * kStageBytes;
constexpr int kPartBytes = TILE_M * kLdC * static_cast<int>(sizeof(float));
constexpr int kDataBytes = kPipeBytes > kPartBytes ? kPipeBytes : kPartBytes;

struct SharedStorage {
  // the pipeline's A and B stages; after the mainloop the same bytes hold the fp32 partial tile
  alignas(1024) unsigned char data[kDataBytes];
  alignas(8) uint64_t full[STAGES];
  alignas(8) uint64_t empty[STAGES];
};
constexpr int kSmemBytes = static_cast<int>(sizeof(SharedStorage)) + 1024;  // + alignment slack
static_assert(kSmemBytes <= 227 * 1024, "shared memory over 227 KB: lower STAGES or the tile");

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  return static_cast<uint32_t>(__half_as_ushort(__float2half_rn(lo))) |
         (static_cast<uint32_t>(__half_as_ushort(__float2half_rn(hi))) << 16);
}

template <class TmaA, class TmaB>
__global__ void __launch_bounds__(kThreads + 32, 1)
ksplit_kernel(__grid_constant__ const TmaA tma_a, __grid_constant__ const TmaB tma_b, __half* __restrict__ C,
              int M, int N, int K, int tiles_m, int tiles_n, float4* __restrict__ work, int* __restrict__ counters) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ unsigned char smem_raw[];
  SharedStorage& ss = *reinterpret_cast<SharedStorage*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~static_cast<uintptr_t>(1023));
  using FullBarrier = cutlass::arch::ClusterTransactionBarrier;
  using EmptyBarrier = cutlass::arch::ClusterBarrier;

  // which tile, which K share
  const int rank = CLUSTER_K > 1 ? static_cast<int>(cute::block_rank_in_cluster()) : 0;
  const int tile = blockIdx.y;
#if RASTER == RASTER_ALONG_M
  const int tm = tile % tiles_m, tn = tile / tiles_m;
#else
  const int tn = tile % tiles_n, tm = tile / tiles_n;
#endif
  // K slice: cluster `group` of the tile's `groups`, then this CTA's rank in the cluster
  const int groups = static_cast<int>(gridDim.z), group = static_cast<int>(blockIdx.z);
  const int slice = group * CLUSTER_K + rank, slices = groups * CLUSTER_K;
  const int k_tiles = (K + TILE_K - 1) / TILE_K;
  const int k_begin = static_cast<int>((static_cast<long long>(k_tiles) * slice) / slices);
  const int k_end = static_cast<int>((static_cast<long long>(k_tiles) * (slice + 1)) / slices);
  const int n_k = k_end - k_begin;

  Tensor sA = make_tensor(make_smem_ptr(reinterpret_cast<T*>(ss.data)), SmemLayoutA{});
  Tensor sB = make_tensor(make_smem_ptr(reinterpret_cast<T*>(ss.data + STAGES * TILE_M * TILE_K * sizeof(T))),
                          SmemLayoutB{});

  Tensor mA = tma_a.get_tma_tensor(make_shape(M, K));
  Tensor mB = tma_b.get_tma_tensor(make_shape(N, K));
  Tensor gA = local_tile(mA, make_shape(TileM{}, TileK{}), make_coord(tm, _));  // (TILE_M, TILE_K, k)
  Tensor gB = local_tile(mB, make_shape(TileN{}, TileK{}), make_coord(tn, _));  // (TILE_N, TILE_K, k)
  auto [tAgA, tAsA] = tma_partition(tma_a, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sA), group_modes<0, 2>(gA));
  auto [tBgB, tBsB] = tma_partition(tma_b, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sB), group_modes<0, 2>(gB));

  const int tid = threadIdx.x;
  if (tid == 0) {
    cute::prefetch_tma_descriptor(tma_a.get_tma_descriptor());
    cute::prefetch_tma_descriptor(tma_b.get_tma_descriptor());
    for (int s = 0; s < STAGES; ++s) {
      FullBarrier::init(&ss.full[s], 1);
      EmptyBarrier::init(&ss.empty[s], kReleaseArrivals);  // one k-group consumes a stage
    }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();

#if PDL
  asm volatile("griddepcontrol.wait;\n" ::: "memory");  // the previous kernel's writes are visible
#endif

  if (tid >= kThreads) {  // the producer warp: one lane issues every TMA load, STAGES k-tiles ahead
    if (tid == kThreads) {
      for (int i = 0; i < n_k; ++i) {
        const int s = i % STAGES;
        if (i >= STAGES) EmptyBarrier::wait(&ss.empty[s], ((i / STAGES) - 1) & 1);
        FullBarrier::arrive_and_expect_tx(&ss.full[s], kStageBytes);
        copy(tma_a.with(ss.full[s]), tAgA(_, k_begin + i), tAsA(_, s));
        copy(tma_b.with(ss.full[s]), tBgB(_, k_begin + i), tBsB(_, s));
      }
    }
  }

  // a consumer is done reading a stage (its warp is past the wgmma wait that covers it): tell the
  // producer, once per thread or once per warp (wgmma.wait_group is warp-wide, so lane 0 speaks
  // for its warp)
  auto release = [&](int stage) {
    if (RELEASE == RELEASE_BY_THREAD || (threadIdx.x & 31) == 0) EmptyBarrier::arrive(&ss.empty[stage]);
  };

  TiledMma mma;
  // k-group kg runs k-tiles kg, kg + WG_K, ...; its threads hold the same elements of the tile as
  // the same threads of every other k-group
  const int kg = WG_K > 1 ? tid / kMmaThreads : 0;
  ThrMMA thr = mma.get_slice(tid < kThreads ? (WG_K > 1 ? tid % kMmaThreads : tid) : 0);
  Tensor acc = partition_fragment_C(mma, Shape<TileM, TileN>{});
  clear(acc);
  if (tid < kThreads) {  // the consumer warpgroups
    Tensor tCsA = thr.partition_A(sA);  // (MMA, MMA_M, MMA_K, STAGES)
    Tensor tCsB = thr.partition_B(sB);
    Tensor tCrA = thr.make_fragment_A(tCsA);
    Tensor tCrB = thr.make_fragment_B(tCsB);
    for (int i = kg; i < n_k; i += WG_K) {
      const int s = i % STAGES;
      FullBarrier::wait(&ss.full[s], (i / STAGES) & 1);
      warpgroup_fence_operand(acc);
      warpgroup_arrive();
      gemm(mma, tCrA(_, _, _, s), tCrB(_, _, _, s), acc);
      warpgroup_commit_batch();
#if MMA_DEPTH == 1
      warpgroup_wait<1>();  // the previous k-tile's wgmma is done: release its stage
      warpgroup_fence_operand(acc);
      if (i >= WG_K) release((i - WG_K) % STAGES);  // this k-group's previous
#else
      warpgroup_wait<0>();
      warpgroup_fence_operand(acc);
      release(s);
#endif
    }
    warpgroup_wait<0>();
    warpgroup_fence_operand(acc);
  }
  if constexpr (WG_K > 1) {  // the other k-groups' sums into the first's, in k-group order
    if (tid < kThreads) {
      float* part = reinterpret_cast<float*>(ss.data);
      Tensor tCcC = thr.partition_C(make_identity_tensor(Shape<TileM, TileN>{}));
      cutlass::arch::NamedBarrier::arrive_and_wait(kThreads, 0);  // every k-group's wgmma reads of the stages are done
      if (kg == 1) {
        CUTE_UNROLL
        for (int e = 0; e < size(acc); e += 2) {
          *reinterpret_cast<float2*>(part + get<0>(tCcC(e)) * kLdC + get<1>(tCcC(e))) = make_float2(acc(e), acc(e + 1));
        }
      }
      cutlass::arch::NamedBarrier::arrive_and_wait(kThreads, 0);
      if (kg == 0) {
        CUTE_UNROLL
        for (int e = 0; e < size(acc); e += 2) {
          const float2 o = *reinterpret_cast<const float2*>(part + get<0>(tCcC(e)) * kLdC + get<1>(tCcC(e)));
          acc(e) += o.x;
          acc(e + 1) += o.y;
        }
      }
    }
  }

#if PDL
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif

  if (CLUSTER_K == 1 && groups == 1) {  // the whole K here: fp16 straight from the accumulators
    if (tid < kMmaThreads) {
      Tensor tCcC = thr.partition_C(make_identity_tensor(Shape<TileM, TileN>{}));
      const int r0 = tm * TILE_M, c0 = tn * TILE_N;
      CUTE_UNROLL
      for (int e = 0; e < size(acc); e += 2) {  // (e, e + 1): two adjacent columns of one row
        const int gr = r0 + get<0>(tCcC(e)), gc = c0 + get<1>(tCcC(e));
        if (gr < M && gc < N) {  // N % 8 == 0 and gc even: the pair is wholly in or out
          *reinterpret_cast<uint32_t*>(C + static_cast<long long>(gr) * N + gc) = pack_half2(acc(e), acc(e + 1));
        }
      }
    }
    return;
  }
  // the fp32 partial tile, row-major with padded rows, over the (now idle) pipeline buffers
  __syncthreads();  // every warpgroup's wgmma reads of the stages (and the k-groups' exchange) are done
  float* part = reinterpret_cast<float*>(ss.data);
  if (tid < kMmaThreads) {  // adjacent column pairs as float2
    Tensor tCcC = thr.partition_C(make_identity_tensor(Shape<TileM, TileN>{}));
    CUTE_UNROLL
    for (int e = 0; e < size(acc); e += 2) {
      *reinterpret_cast<float2*>(part + get<0>(tCcC(e)) * kLdC + get<1>(tCcC(e))) = make_float2(acc(e), acc(e + 1));
    }
  }

  const float4* peer[CLUSTER_K];
  if constexpr (CLUSTER_K > 1) {
    cg::this_cluster().sync();  // release/acquire: every partial tile is visible to the whole cluster
    CUTE_UNROLL
    for (int q = 0; q < CLUSTER_K; ++q) {
      peer[q] = reinterpret_cast<const float4*>(cg::this_cluster().map_shared_rank(part, q));
    }
  } else {
    __syncthreads();
    peer[0] = reinterpret_cast<const float4*>(part);
  }
  // this CTA's TILE_M / CLUSTER_K rows: every (remote) load is issued before the first add, so
  // the distributed-shared-memory round trips overlap instead of queueing one after another
  constexpr int kRows = TILE_M / CLUSTER_K;
  constexpr int kVecRow = TILE_N / 4;
  constexpr int kVecs = kRows * kVecRow;
  constexpr int kAll = kThreads + 32;
  constexpr int kIters = (kVecs + kAll - 1) / kAll;
  const int row0 = tm * TILE_M + rank * kRows, col0 = tn * TILE_N;
  float4 got[kIters][CLUSTER_K];
  CUTE_UNROLL
  for (int it = 0; it < kIters; ++it) {
    const int v = tid + it * kAll;
    if (v < kVecs) {
      const int off = (rank * kRows + v / kVecRow) * (kLdC / 4) + v % kVecRow;
      CUTE_UNROLL
      for (int q = 0; q < CLUSTER_K; ++q) got[it][q] = peer[q][off];
    }
  }
  CUTE_UNROLL
  for (int it = 0; it < kIters; ++it) {
    const int v = tid + it * kAll;
    if (v < kVecs) {
      float4 sum = got[it][0];
      CUTE_UNROLL
      for (int q = 1; q < CLUSTER_K; ++q) {  // rank order: bit-reproducible
        sum.x += got[it][q].x; sum.y += got[it][q].y; sum.z += got[it][q].z; sum.w += got[it][q].w;
      }
      if (groups > 1) {  // this cluster's sums of the CTA's rows, for the clusters' reduction below
        __stcg(work + (static_cast<long long>(tile * CLUSTER_K + rank) * groups + group) * kVecs + v, sum);
        continue;
      }
      const int gr = row0 + v / kVecRow, gc = col0 + (v % kVecRow) * 4;
      if (gr < M && gc < N) {  // N % 8 == 0: a 4-column group is wholly in or out
        *reinterpret_cast<uint2*>(C + static_cast<long long>(gr) * N + gc) =
            make_uint2(pack_half2(sum.x, sum.y), pack_half2(sum.z, sum.w));
      }
    }
  }
  if constexpr (CLUSTER_K > 1) {
    cg::this_cluster().sync();  // no CTA leaves (freeing its shared memory) while a peer still reads it
  }
  if (groups == 1) return;

  // Second level: the `groups` clusters of this tile have each written their sums of these rows.
  // Every CTA of the grid is resident (the host checks), so the CTAs of one (tile, rank) wait for
  // each other, then each adds all groups, in group order, for its 1/groups of the rows.
  int* arrive = counters + (tile * CLUSTER_K + rank);
  int* depart = arrive + static_cast<long long>(tiles_m) * tiles_n * CLUSTER_K;
  __threadfence();
  __syncthreads();
  if (tid == 0) {
    atomicAdd(arrive, 1);
    while (*reinterpret_cast<volatile int*>(arrive) < groups) __nanosleep(32);
    __threadfence();
  }
  __syncthreads();
  const float4* mine = work + static_cast<long long>(tile * CLUSTER_K + rank) * groups * kVecs;
  const int v_begin = static_cast<int>((static_cast<long long>(kVecs) * group) / groups);
  const int v_end = static_cast<int>((static_cast<long long>(kVecs) * (group + 1)) / groups);
  // every (group, vector) load of this CTA's share in flight at once (one L2 round trip, not one
  // per group), parked in the now idle shared memory, then added in group order (bit-reproducible)
  const int nv = v_end - v_begin, n_loads = nv * groups;
  float4* stage = reinterpret_cast<float4*>(ss.data);
  constexpr int kLoads = (kVecs + kMaxGroups + kAll - 1) / kAll;
  static_assert((kVecs + kMaxGroups) * 16 <= kDataBytes, "the staged group sums fit the partial tile's bytes");
  float4 got_g[kLoads];
  CUTE_UNROLL
  for (int it = 0; it < kLoads; ++it) {
    const int idx = tid + it * kAll;
    if (idx < n_loads) got_g[it] = __ldcg(mine + static_cast<long long>(idx / nv) * kVecs + v_begin + idx % nv);
  }
  CUTE_UNROLL
  for (int it = 0; it < kLoads; ++it) {
    const int idx = tid + it * kAll;
    if (idx < n_loads) stage[idx] = got_g[it];
  }
  __syncthreads();
#pragma unroll 1
  for (int vl = tid; vl < nv; vl += kAll) {
    float4 sum = stage[vl];
#pragma unroll 1
    for (int q = 1; q < groups; ++q) {
      const float4 t = stage[q * nv + vl];
      sum.x += t.x; sum.y += t.y; sum.z += t.z; sum.w += t.w;
    }
    const int v = v_begin + vl;
    const int gr = row0 + v / kVecRow, gc = col0 + (v % kVecRow) * 4;
    if (gr < M && gc < N) {
      *reinterpret_cast<uint2*>(C + static_cast<long long>(gr) * N + gc) =
          make_uint2(pack_half2(sum.x, sum.y), pack_half2(sum.z, sum.w));
    }
  }
  __syncthreads();
  if (tid == 0 && atomicAdd(depart, 1) == groups - 1) {
    // the last to leave resets both counters (every CTA of this (tile, rank) is past its wait)
    *arrive = 0;
    *depart = 0;
  }
#endif
}

// Grow-only workspace and counters for GROUPS > 1: allocated on the first call that needs them,
// never per call afterwards. A call inside a CUDA graph capture must not allocate, so call a shape
// once before capturing it (the harness's checks do). A smaller old buffer is not freed: a graph
// captured earlier may still point at it.
struct Workspace {
  float4* work = nullptr;
  size_t work_vecs = 0;
  int* counters = nullptr;
  size_t counter_count = 0;
};

static bool ensure_workspace(Workspace& ws, size_t vecs, size_t counters, cudaStream_t stream) {
  if (vecs > ws.work_vecs) {
    ws.work = nullptr;
    ws.work_vecs = 0;
    if (cudaMalloc(&ws.work, vecs * sizeof(float4)) != cudaSuccess) return false;
    ws.work_vecs = vecs;
  }
  if (counters > ws.counter_count) {
    ws.counters = nullptr;
    ws.counter_count = 0;
    if (cudaMalloc(&ws.counters, counters * sizeof(int)) != cudaSuccess) return false;
    // on the call's stream: the launch after it sees zeros whatever kind of stream it is
    if (cudaMemsetAsync(ws.counters, 0, counters * sizeof(int), stream) != cudaSuccess) return false;
    ws.counter_count = counters;
  }
  return true;
}

}  // namespace l2

extern "C" int l2_hgemm(const void* A, const void* B, void* C, int M, int N, int K, void* stream) {
  using namespace l2;
  if (M <= 0 || N <= 0 || K <= 0) return 1;
  if (K % 8 != 0 || N % 8 != 0) return 2;  // TMA needs 16-byte aligned rows
  if ((reinterpret_cast<uintptr_t>(A) | reinterpret_cast<uintptr_t>(B) | reinterpret_cast<uintptr_t>(C)) & 15) return 2;
  static int cc = -1, sm_count = 0;
  if (cc < 0) {
    int dev = 0, major = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, dev);
    cc = major;
  }
  if (cc < 9) return 2;  // WGMMA, TMA and clusters: Hopper and later

  Tensor gA = make_tensor(make_gmem_ptr(static_cast<const T*>(A)), make_shape(M, K), make_stride(K, _1{}));
  Tensor gB = make_tensor(make_gmem_ptr(static_cast<const T*>(B)), make_shape(N, K), make_stride(_1{}, N));
  auto tma_a = make_tma_copy(SM90_TMA_LOAD{}, gA, SmemLayoutA{}(_, _, 0));
  auto tma_b = make_tma_copy(SM90_TMA_LOAD{}, gB, SmemLayoutB{}(_, _, 0));
  auto* kernel = &ksplit_kernel<decltype(tma_a), decltype(tma_b)>;

  cudaLaunchConfig_t lc = {};
  lc.blockDim = dim3(kThreads + 32, 1, 1);
  lc.dynamicSmemBytes = kSmemBytes;
  lc.stream = static_cast<cudaStream_t>(stream);
  static bool configured = false;
  static int resident_clusters = 0;  // clusters of CLUSTER_K CTAs the GPU holds at once
  if (!configured) {
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes) != cudaSuccess) {
      cudaGetLastError();
      return 4;
    }
    cudaLaunchAttribute cl;
    cl.id = cudaLaunchAttributeClusterDimension;
    cl.val.clusterDim.x = CLUSTER_K;
    cl.val.clusterDim.y = 1;
    cl.val.clusterDim.z = 1;
    cudaLaunchConfig_t probe = lc;
    probe.gridDim = dim3(CLUSTER_K, 1, 1);
    probe.attrs = &cl;
    probe.numAttrs = 1;
    if (cudaOccupancyMaxActiveClusters(&resident_clusters, kernel, &probe) != cudaSuccess) {
      cudaGetLastError();
      // unknown: one CTA per SM (the launch bounds) is certain without a cluster; with one, GROUPS > 1
      // is refused below
      resident_clusters = CLUSTER_K == 1 ? sm_count : 0;
    }
    configured = true;
  }
  const int tiles_m = (M + TILE_M - 1) / TILE_M, tiles_n = (N + TILE_N - 1) / TILE_N;
  const long long tiles = static_cast<long long>(tiles_m) * tiles_n;
  if (tiles > 65535) return 2;  // grid.y limit
  const int k_tiles = (K + TILE_K - 1) / TILE_K;
  int groups = GROUPS;
  if (groups == 0) {  // the most clusters per tile that stay resident, >= 2 k-tiles per CTA
    groups = 1;
    while (groups * 2 <= kAutoGroups && tiles * groups * 2 <= resident_clusters &&
           CLUSTER_K * groups * 2 * 2 <= k_tiles) {
      groups *= 2;
    }
  }
  if (groups > 1 && tiles * groups > resident_clusters) return 2;  // the global barrier needs one wave
  static Workspace ws;
  if (groups > 1) {
    const size_t vecs = static_cast<size_t>(tiles) * groups * TILE_M * TILE_N / 4;
    if (!ensure_workspace(ws, vecs, 2 * static_cast<size_t>(tiles) * CLUSTER_K, lc.stream)) {
      cudaGetLastError();
      return 3;
    }
  }
  lc.gridDim = dim3(CLUSTER_K, static_cast<unsigned>(tiles), static_cast<unsigned>(groups));
  cudaLaunchAttribute attr[2];
  int n_attrs = 0;
  if (CLUSTER_K > 1) {
    attr[n_attrs].id = cudaLaunchAttributeClusterDimension;
    attr[n_attrs].val.clusterDim.x = CLUSTER_K;
    attr[n_attrs].val.clusterDim.y = 1;
    attr[n_attrs].val.clusterDim.z = 1;
    ++n_attrs;
  }
#if PDL
  attr[n_attrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[n_attrs].val.programmaticStreamSerializationAllowed = 1;
  ++n_attrs;
#endif
  lc.attrs = attr;
  lc.numAttrs = n_attrs;
  cudaError_t err = cudaLaunchKernelEx(&lc, kernel, tma_a, tma_b, static_cast<__half*>(C), M, N, K, tiles_m, tiles_n,
                                      ws.work, ws.counters);
  return err == cudaSuccess ? 0 : 4;
}
