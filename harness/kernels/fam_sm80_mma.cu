// l2tui seed family: sm80_mma
//
// Purpose: a hand-written tensor-core HGEMM that compiles for sm_80 (Ampere) and runs on every
// later GPU, Hopper included. Readable on purpose: every optimization is a few visible lines that
// a patch can change.
//   * mma.sync.m16n8k16 tensor-core instructions (f32 or f16 accumulate)
//   * cp.async multistage pipeline global -> shared memory (STAGES deep), 16-byte copies that
//     zero-fill outside the matrix, so shapes need not be tile multiples
//   * XOR-swizzled shared memory, read with ldmatrix (.trans for B), no bank conflicts
//   * double-buffered register fragments: the next k-step's fragments load while the MMAs of the
//     current one issue
//   * block swizzling: CTAs walk the tile grid in groups of SWIZZLE tile rows for L2 reuse
//   * optional split-K (SPLIT_K > 1, or 0 = automatic): each CTA multiplies a slice of K and
//     writes its fp32 partial tile to a workspace; when the whole grid fits on the GPU at once, the
//     CTAs of a tile wait for each other and each adds all slices for 1/splits of the tile
//     (parallel reduction), otherwise the last CTA of each tile adds them (serial); always in
//     slice order, one launch, bit-reproducible
//   * epilogue through shared memory with 128-bit coalesced global stores
//   * PDL (Hopper and later): launched with programmatic stream serialization, so the launch and
//     prologue overlap the previous kernel's tail; griddepcontrol.wait precedes every global access
// A is M x K row-major, B is K x N row-major, C is M x N row-major (beta = 0). Needs K and N to
// be multiples of 8 and 16-byte aligned pointers (16-byte copies), otherwise returns 2.
//
// Knobs (legal values):
//   BM        32, 64, 128, 256     CTA tile rows
//   BN        32, 64, 128, 256     CTA tile columns
//   BK        32, 64               K slice per pipeline stage
//   WARPS_M   1, 2, 4              warps along M (BM / WARPS_M must be a multiple of 16)
//   WARPS_N   1, 2, 4              warps along N (BN / WARPS_N must be a multiple of 16)
//   STAGES    2, 3, 4, 5           cp.async pipeline depth (shared memory <= 227 KB)
//   SWIZZLE   1, 2, 4, 8, 16       tile rows per CTA group (block swizzling)
//   SPLIT_K   0 (auto: up to 2 CTAs per SM), 1, 2, 4, 8, 16   K slices per tile
//   ACC       ACC_F32, ACC_F16     accumulator type
//   PDL       0, 1                 programmatic dependent launch (used on sm_90 and later only)

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <stdint.h>

// Names for knob values (do not edit).
#define ACC_F32 1
#define ACC_F16 2

// l2: knobs begin
#define BM 128
#define BN 128
#define BK 32
#define WARPS_M 2
#define WARPS_N 2
#define STAGES 4
#define SWIZZLE 8
#define SPLIT_K 1
#define ACC ACC_F32
#define PDL 1
// l2: knobs end
// l2: acc=f32
// (the line above declares the accumulator to the harness: keep it equal to ACC)

#ifndef CLUSTER_K
#define CLUSTER_K 1  // (a small_splitk knob: slices reduced through distributed shared memory)
#endif
#if CLUSTER_K > 1
#include <cooperative_groups.h>
#endif

namespace l2 {

constexpr int kThreads = WARPS_M * WARPS_N * 32;
constexpr int kWM = BM / WARPS_M;  // warp tile rows
constexpr int kWN = BN / WARPS_N;  // warp tile columns
constexpr int kMI = kWM / 16;      // m16 fragments per warp
constexpr int kNI = kWN / 8;       // n8 fragments per warp
constexpr int kChunksA = BK / 8;   // 16-byte chunks per A tile row
constexpr int kChunksB = BN / 8;   // 16-byte chunks per B tile row
constexpr int kStageHalfs = BM * BK + BK * BN;
constexpr int kCStride = BN + 8;   // padded epilogue row (halfs)
constexpr int kPipeBytes = STAGES * kStageHalfs * 2;
constexpr int kEpiBytes = BM * kCStride * 2;
constexpr int kClusterBytes = CLUSTER_K > 1 ? BM * BN * 4 : 0;  // this CTA's fp32 slice of the tile
constexpr int kSmemBytes = kPipeBytes > kEpiBytes ? (kPipeBytes > kClusterBytes ? kPipeBytes : kClusterBytes)
                                                  : (kEpiBytes > kClusterBytes ? kEpiBytes : kClusterBytes);
constexpr int kMaxSplits = 128;

static_assert(kWM % 16 == 0 && kWN % 16 == 0, "warp tile must be a multiple of 16x16");
static_assert(BK == 32 || BK == 64, "BK must be 32 or 64");
static_assert(kChunksB >= 4, "BN must be at least 32");
static_assert(kSmemBytes <= 227 * 1024, "shared memory over 227 KB: lower STAGES or the tile");
static_assert(CLUSTER_K == 1 || SPLIT_K == 1, "CLUSTER_K slices replace SPLIT_K: use SPLIT_K 1");
static_assert((BM * BN / 4) % CLUSTER_K == 0, "the tile must split into CLUSTER_K equal shares");

#if ACC == ACC_F16
constexpr int kAccRegs = 2;  // two half2 registers per m16n8 fragment
#else
constexpr int kAccRegs = 4;  // four floats per m16n8 fragment
#endif

// XOR swizzle of a 16-byte chunk index inside a row of `chunks` chunks (4 or a multiple of 8):
// the 8 rows an ldmatrix reads land in 8 different bank groups.
__device__ __forceinline__ int swz(int row, int chunk, int chunks) {
  return chunks >= 8 ? (chunk ^ (row & 7)) : (chunk ^ ((row >> 1) & 3));
}

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool pred) {
  int bytes = pred ? 16 : 0;  // 0 source bytes: zero-fill
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

#if ACC == ACC_F16
__device__ __forceinline__ void mma16816(uint32_t (&d)[kAccRegs], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3,%4,%5}, {%6,%7}, {%0,%1};\n"
               : "+r"(d[0]), "+r"(d[1]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
typedef uint32_t AccT;
#else
__device__ __forceinline__ void mma16816(float (&d)[kAccRegs], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
typedef float AccT;
#endif

// The accumulator register i of a fragment as a float (for split-K partial sums).
__device__ __forceinline__ float acc_get(const AccT (&d)[kAccRegs], int i) {
#if ACC == ACC_F16
  __half2 h = *reinterpret_cast<const __half2*>(&d[i >> 1]);
  return (i & 1) ? __high2float(h) : __low2float(h);
#else
  return d[i];
#endif
}

// Two floats rounded to fp16 and packed low-first into 32 bits (no address taken: registers only).
__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  return static_cast<uint32_t>(__half_as_ushort(__float2half_rn(lo))) |
         (static_cast<uint32_t>(__half_as_ushort(__float2half_rn(hi))) << 16);
}

// Parallel split-K reduction: this CTA's share of a tile (float4 groups [lo, hi) of the
// row-major BM x BN fp32 partial tiles) summed over all slices and written to C as fp16. When
// the share is narrower than the CTA, the threads also split the slices into `groups`
// interleaved sets whose sums meet in shared memory and are added in set order, so a long K
// with few tiles still has many loads in flight; the order never depends on timing.
__device__ __forceinline__ void reduce_share(const float* parts, int splits, int split, int m0, int n0, int M,
                                             int N, half* __restrict__ C, unsigned char* smem_raw) {
  constexpr int kVec = BM * BN / 4;
  const int per = (kVec + splits - 1) / splits;
  const int lo = split * per;
  const int hi = min(kVec, lo + per);
  if (lo >= hi) return;  // uniform across the CTA
  const int width = hi - lo;
  const int groups = max(1, min(splits, kThreads / width));
  const int span = kThreads / groups;  // threads per set (>= width when groups > 1)
  const int tid = threadIdx.x, g = tid / span, t = tid % span;
  float4* shared_sums = reinterpret_cast<float4*>(smem_raw);
  const float4* p4 = reinterpret_cast<const float4*>(parts);
  constexpr int kSliceVec = BM * BN / 4;
  for (int e = lo + t; e < hi && g < groups; e += span) {
    float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
    for (int sl = g; sl < splits; sl += groups) {
      const float4 v = __ldcg(p4 + (size_t)sl * kSliceVec + e);
      s.x += v.x; s.y += v.y; s.z += v.z; s.w += v.w;
    }
    if (groups > 1) {
      shared_sums[g * span + t] = s;
    } else {
      const int r = (e * 4) / BN, c = (e * 4) % BN;
      if (m0 + r < M && n0 + c < N) {
        const uint2 u = make_uint2(pack_half2(s.x, s.y), pack_half2(s.z, s.w));
        *reinterpret_cast<uint2*>(C + (size_t)(m0 + r) * N + n0 + c) = u;
      }
    }
  }
  if (groups == 1) return;
  __syncthreads();
  if (g == 0 && t < width) {
    float4 s = shared_sums[t];
    for (int q = 1; q < groups; ++q) {
      const float4 v = shared_sums[q * span + t];
      s.x += v.x; s.y += v.y; s.z += v.z; s.w += v.w;
    }
    const int e = lo + t;
    const int r = (e * 4) / BN, c = (e * 4) % BN;
    if (m0 + r < M && n0 + c < N) {
      const uint2 u = make_uint2(pack_half2(s.x, s.y), pack_half2(s.z, s.w));
      *reinterpret_cast<uint2*>(C + (size_t)(m0 + r) * N + n0 + c) = u;
    }
  }
}

__global__ void __launch_bounds__(kThreads)
hgemm_kernel(const half* __restrict__ A, const half* __restrict__ B, half* __restrict__ C, int M, int N,
             int K, int tiles_m, int tiles_n, int splits, int k_per_split, float* __restrict__ partials,
             int* __restrict__ counters, int parallel) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  half* smem = reinterpret_cast<half*>(smem_raw);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // PDL: no global memory access before the previous kernel in the stream has completed
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / WARPS_N, wn = warp % WARPS_N;

  // Block swizzling: groups of SWIZZLE tile rows are walked column by column (L2 reuse of B).
  const int pid = blockIdx.x;
  const int group = SWIZZLE * tiles_n;
  const int first_m = (pid / group) * SWIZZLE;
  const int group_m = min(tiles_m - first_m, SWIZZLE);
  const int tile_m = first_m + (pid % group) % group_m;
  const int tile_n = (pid % group) / group_m;
  const int m0 = tile_m * BM, n0 = tile_n * BN;
  const int split = blockIdx.z;
  const int k_begin = split * k_per_split;
  const int k_end = min(K, k_begin + k_per_split);
  const int ktiles = k_end > k_begin ? (k_end - k_begin + BK - 1) / BK : 0;

  const uint32_t smem_base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));

  auto load_stage = [&](int stage, int kt) {
    const int k0 = k_begin + kt * BK;
    const uint32_t sA = smem_base + stage * kStageHalfs * 2;
    const uint32_t sB = sA + BM * BK * 2;
#pragma unroll
    for (int c = tid; c < BM * kChunksA; c += kThreads) {
      const int r = c / kChunksA, ch = c % kChunksA;
      const int gr = m0 + r, gk = k0 + ch * 8;
      const bool ok = gr < M && gk < k_end;
      cp_async16(sA + (r * kChunksA + swz(r, ch, kChunksA)) * 16, ok ? A + (size_t)gr * K + gk : A, ok);
    }
#pragma unroll
    for (int c = tid; c < BK * kChunksB; c += kThreads) {
      const int r = c / kChunksB, ch = c % kChunksB;
      const int gk = k0 + r, gn = n0 + ch * 8;
      const bool ok = gk < k_end && gn < N;
      cp_async16(sB + (r * kChunksB + swz(r, ch, kChunksB)) * 16, ok ? B + (size_t)gk * N + gn : B, ok);
    }
  };

  AccT acc[kMI][kNI][kAccRegs];
#pragma unroll
  for (int i = 0; i < kMI; ++i)
#pragma unroll
    for (int j = 0; j < kNI; ++j)
#pragma unroll
      for (int r = 0; r < kAccRegs; ++r) acc[i][j][r] = 0;

  // Prologue: STAGES - 1 tiles in flight.
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < ktiles) load_stage(s, s);
    cp_async_commit();
  }

  uint32_t fa[2][kMI][4];
  uint32_t fb[2][kNI][2];
  auto load_frags = [&](int buf, uint32_t sA, uint32_t sB, int kk) {
#pragma unroll
    for (int i = 0; i < kMI; ++i) {
      const int r = wm * kWM + i * 16 + (lane & 15);
      const int ch = kk * 2 + (lane >> 4);
      ldmatrix_x4(fa[buf][i], sA + (r * kChunksA + swz(r, ch, kChunksA)) * 16);
    }
#pragma unroll
    for (int j = 0; j < kNI; j += 2) {
      const int r = kk * 16 + (lane & 15);
      const int ch = (wn * kWN + j * 8) / 8 + (lane >> 4);
      uint32_t t[4];
      ldmatrix_x4_trans(t, sB + (r * kChunksB + swz(r, ch, kChunksB)) * 16);
      fb[buf][j][0] = t[0]; fb[buf][j][1] = t[1];
      fb[buf][j + 1][0] = t[2]; fb[buf][j + 1][1] = t[3];
    }
  };

  for (int kt = 0; kt < ktiles; ++kt) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();  // tile kt has landed; everyone is done with the stage we overwrite next
    const int next = kt + STAGES - 1;
    if (next < ktiles) load_stage(next % STAGES, next);
    cp_async_commit();

    const uint32_t sA = smem_base + (kt % STAGES) * kStageHalfs * 2;
    const uint32_t sB = sA + BM * BK * 2;
    load_frags(0, sA, sB, 0);
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      if (kk + 1 < BK / 16) load_frags((kk + 1) & 1, sA, sB, kk + 1);  // double-buffered fragments
#pragma unroll
      for (int i = 0; i < kMI; ++i)
#pragma unroll
        for (int j = 0; j < kNI; ++j) mma16816(acc[i][j], fa[kk & 1][i], fb[kk & 1][j][0], fb[kk & 1][j][1]);
    }
  }
  cp_async_wait<0>();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // PDL: the next kernel in the stream may start launching (it waits before touching memory)
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif

#if CLUSTER_K > 1
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  {
    // Cluster split-K: the CLUSTER_K CTAs of this cluster hold the K slices of one tile (blockIdx.z
    // = slice = rank in the cluster). Each leaves its fp32 partial tile in its own shared memory;
    // after the cluster barrier each adds, for its 1/CLUSTER_K of the tile, the slices of every
    // peer in rank order (bit-reproducible) through distributed shared memory and stores them.
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    __syncthreads();  // every warp is done reading the pipeline's shared memory
    float* part = reinterpret_cast<float*>(smem_raw);
#pragma unroll
    for (int i = 0; i < kMI; ++i)
#pragma unroll
      for (int j = 0; j < kNI; ++j) {
        const int r = wm * kWM + i * 16 + (lane >> 2);
        const int c = wn * kWN + j * 8 + (lane & 3) * 2;
        *reinterpret_cast<float2*>(part + r * BN + c) = make_float2(acc_get(acc[i][j], 0), acc_get(acc[i][j], 1));
        *reinterpret_cast<float2*>(part + (r + 8) * BN + c) = make_float2(acc_get(acc[i][j], 2), acc_get(acc[i][j], 3));
      }
    cluster.sync();  // release/acquire: every slice is visible to every CTA of the cluster
    constexpr int kShare = BM * BN / 4 / CLUSTER_K;  // float4 groups per CTA
    const int rank = static_cast<int>(cluster.block_rank());
    const float4* peer[CLUSTER_K];
#pragma unroll
    for (int q = 0; q < CLUSTER_K; ++q) peer[q] = reinterpret_cast<const float4*>(cluster.map_shared_rank(part, q));
    for (int e = rank * kShare + tid; e < (rank + 1) * kShare; e += kThreads) {
      float4 s = peer[0][e];
#pragma unroll
      for (int q = 1; q < CLUSTER_K; ++q) {
        const float4 v = peer[q][e];
        s.x += v.x; s.y += v.y; s.z += v.z; s.w += v.w;
      }
      const int r = (e * 4) / BN, c = (e * 4) % BN;
      if (m0 + r < M && n0 + c < N) {
        const uint2 u = make_uint2(pack_half2(s.x, s.y), pack_half2(s.z, s.w));
        *reinterpret_cast<uint2*>(C + (size_t)(m0 + r) * N + n0 + c) = u;
      }
    }
    cluster.sync();  // no CTA leaves (freeing its shared memory) while a peer still reads it
  }
#endif
  return;  // (below sm_90 the host refuses CLUSTER_K builds: never launched)
#endif

  // Split-K. Every CTA publishes its slice's partial sums to the workspace as a row-major fp32
  // tile. Parallel reduction (the whole grid is resident, see l2_hgemm): the CTAs of a tile wait
  // for each other, then each adds all slices, in slice order, for its own 1/splits of the tile
  // and writes that part of C. Serial reduction (a grid too big to be resident at once): an
  // atomic ticket elects the last CTA, which adds every slice in slice order. Either way the sums
  // are bit-reproducible whatever order the CTAs ran in.
  bool use_sum = false;
#if ACC == ACC_F16
  float red[kMI][kNI][4];                  // fp32 totals of the f16 slices
#else
  float (&red)[kMI][kNI][4] = acc;         // f32: the totals reuse the accumulator registers
#endif
  if (SPLIT_K != 1 && splits > 1) {  // (compiled out of SPLIT_K 1 builds: registers)
    __shared__ int s_last;
    const int tile = tile_m * tiles_n + tile_n;
    float* tile_parts = partials + (size_t)tile * splits * (BM * BN);
    float* mine = tile_parts + (size_t)split * (BM * BN);
#pragma unroll
    for (int i = 0; i < kMI; ++i)
#pragma unroll
      for (int j = 0; j < kNI; ++j) {
        const int r = wm * kWM + i * 16 + (lane >> 2);
        const int c = wn * kWN + j * 8 + (lane & 3) * 2;
        __stcg(reinterpret_cast<float2*>(mine + r * BN + c), make_float2(acc_get(acc[i][j], 0), acc_get(acc[i][j], 1)));
        __stcg(reinterpret_cast<float2*>(mine + (r + 8) * BN + c), make_float2(acc_get(acc[i][j], 2), acc_get(acc[i][j], 3)));
      }
    __threadfence();
    __syncthreads();
    int* arrive = counters + tile;
    int* depart = counters + tiles_m * tiles_n + tile;
    if (parallel) {
      if (tid == 0) {
        atomicAdd(arrive, 1);
        while (*reinterpret_cast<volatile int*>(arrive) < splits) __nanosleep(32);
        __threadfence();
      }
      __syncthreads();
      reduce_share(tile_parts, splits, split, m0, n0, M, N, C, smem_raw);
      __syncthreads();
      if (tid == 0) {
        // the last to leave resets both counters (every CTA of the tile is past its wait)
        if (atomicAdd(depart, 1) == splits - 1) {
          *arrive = 0;
          *depart = 0;
        }
      }
      return;
    }
    if (tid == 0) {
      const int prev = atomicAdd(arrive, 1);
      s_last = (prev == splits - 1);
      if (s_last) *arrive = 0;  // ready for the next launch
    }
    __syncthreads();
    if (!s_last) return;
    __threadfence();
#pragma unroll
    for (int i = 0; i < kMI; ++i)
#pragma unroll
      for (int j = 0; j < kNI; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q) red[i][j][q] = 0.f;
#pragma unroll 1  // (each step already has all of a thread's fragment loads in flight)
    for (int sl = 0; sl < splits; ++sl) {
      const float* p = tile_parts + (size_t)sl * (BM * BN);
#pragma unroll
      for (int i = 0; i < kMI; ++i)
#pragma unroll
        for (int j = 0; j < kNI; ++j) {
          const int r = wm * kWM + i * 16 + (lane >> 2);
          const int c = wn * kWN + j * 8 + (lane & 3) * 2;
          const float2 lo = __ldcg(reinterpret_cast<const float2*>(p + r * BN + c));
          const float2 hi = __ldcg(reinterpret_cast<const float2*>(p + (r + 8) * BN + c));
          red[i][j][0] += lo.x; red[i][j][1] += lo.y; red[i][j][2] += hi.x; red[i][j][3] += hi.y;
        }
    }
    use_sum = true;
  }

  // Epilogue: fragments -> shared memory (fp16) -> 128-bit coalesced global stores.
  __syncthreads();
  half* sC = smem;
#pragma unroll
  for (int i = 0; i < kMI; ++i)
#pragma unroll
    for (int j = 0; j < kNI; ++j) {
      const int r = wm * kWM + i * 16 + (lane >> 2);
      const int c = wn * kWN + j * 8 + (lane & 3) * 2;
      __half2 lo, hi;
      if (use_sum) {
        lo = __floats2half2_rn(red[i][j][0], red[i][j][1]);
        hi = __floats2half2_rn(red[i][j][2], red[i][j][3]);
      } else {
#if ACC == ACC_F16
        lo = *reinterpret_cast<const __half2*>(&acc[i][j][0]);
        hi = *reinterpret_cast<const __half2*>(&acc[i][j][1]);
#else
        lo = __floats2half2_rn(acc[i][j][0], acc[i][j][1]);
        hi = __floats2half2_rn(acc[i][j][2], acc[i][j][3]);
#endif
      }
      *reinterpret_cast<__half2*>(sC + r * kCStride + c) = lo;
      *reinterpret_cast<__half2*>(sC + (r + 8) * kCStride + c) = hi;
    }
  __syncthreads();
#pragma unroll
  for (int c = tid; c < BM * kChunksB; c += kThreads) {
    const int r = c / kChunksB, ch = c % kChunksB;
    const int gr = m0 + r, gn = n0 + ch * 8;
    if (gr < M && gn < N)
      *reinterpret_cast<uint4*>(C + (size_t)gr * N + gn) = *reinterpret_cast<const uint4*>(sC + r * kCStride + ch * 8);
  }
}

struct State {
  bool configured = false;
  int sm_count = 0;
  int cc = 0;  // compute capability (PDL needs 90+)
  int ctas_per_sm = 1;  // resident CTAs per SM (occupancy of this build)
  float* partials = nullptr;
  size_t partial_floats = 0;
  int* counters = nullptr;
  size_t counter_count = 0;
};

static State& state() {
  static State s;
  return s;
}

// Grow-only workspace: allocated on the first call that needs it, never per call afterwards. A
// smaller old buffer is not freed: a CUDA graph captured earlier may still point at it.
static bool ensure_workspace(State& st, size_t floats, size_t counters, cudaStream_t stream) {
  if (floats > st.partial_floats) {
    st.partials = nullptr;
    st.partial_floats = 0;
    if (cudaMalloc(&st.partials, floats * sizeof(float)) != cudaSuccess) return false;
    st.partial_floats = floats;
  }
  if (counters > st.counter_count) {
    st.counters = nullptr;
    st.counter_count = 0;
    if (cudaMalloc(&st.counters, counters * sizeof(int)) != cudaSuccess) return false;
    // on the call's stream: the launch after it sees zeros whatever kind of stream it is
    if (cudaMemsetAsync(st.counters, 0, counters * sizeof(int), stream) != cudaSuccess) return false;
    st.counter_count = counters;
  }
  return true;
}

}  // namespace l2

extern "C" int l2_hgemm(const void* A, const void* B, void* C, int M, int N, int K, void* stream) {
  using namespace l2;
  if (M <= 0 || N <= 0 || K <= 0) return 1;
  if (K % 8 != 0 || N % 8 != 0) return 2;
  if (((uintptr_t)A | (uintptr_t)B | (uintptr_t)C) & 15) return 2;
  State& st = state();
  if (!st.configured) {
    int dev = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&st.sm_count, cudaDevAttrMultiProcessorCount, dev);
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    st.cc = major * 10 + minor;
    if (cudaFuncSetAttribute(hgemm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes) != cudaSuccess)
      return 3;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&st.ctas_per_sm, hgemm_kernel, kThreads, kSmemBytes) != cudaSuccess ||
        st.ctas_per_sm < 1) {
      cudaGetLastError();
      st.ctas_per_sm = 1;
    }
    st.configured = true;
  }
  if (CLUSTER_K > 1 && st.cc < 90) return 2;  // thread-block clusters: sm_90 and later
  const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
  const int tiles = tiles_m * tiles_n;
  const int ktiles = (K + BK - 1) / BK;
  int splits = SPLIT_K;
  const int resident = st.sm_count * st.ctas_per_sm;  // CTAs that fit on the GPU at once
  if (splits == 0) {  // automatic: up to two CTAs per SM, at least 2 k-tiles per slice
    splits = st.sm_count * min(st.ctas_per_sm, 2) / tiles;
    splits = min(splits, ktiles / 2);
    splits = min(splits, kMaxSplits);
  }
  splits = max(1, min(splits, ktiles));
  int k_per_split = ((ktiles + splits - 1) / splits) * BK;
  splits = (K + k_per_split - 1) / k_per_split;  // no empty slices
  if (CLUSTER_K > 1) {  // one slice per CTA of a cluster (a slice past K is empty: adds zeros)
    splits = CLUSTER_K;
    k_per_split = ((ktiles + CLUSTER_K - 1) / CLUSTER_K) * BK;
  }
  if (splits > 1 && CLUSTER_K == 1) {
    const size_t floats = (size_t)tiles * splits * BM * BN;
    if (!ensure_workspace(st, floats, 2 * (size_t)tiles, static_cast<cudaStream_t>(stream))) return 3;
  }
  cudaLaunchConfig_t lc = {};
  lc.gridDim = dim3(tiles, 1, splits);
  lc.blockDim = dim3(kThreads, 1, 1);
  lc.dynamicSmemBytes = kSmemBytes;
  lc.stream = static_cast<cudaStream_t>(stream);
  cudaLaunchAttribute attr[2];
  unsigned n_attrs = 0;
  if (PDL && st.cc >= 90) {
    attr[n_attrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n_attrs].val.programmaticStreamSerializationAllowed = 1;
    ++n_attrs;
  }
  if (CLUSTER_K > 1) {  // the slices of a tile (grid z) form one cluster
    attr[n_attrs].id = cudaLaunchAttributeClusterDimension;
    attr[n_attrs].val.clusterDim.x = 1;
    attr[n_attrs].val.clusterDim.y = 1;
    attr[n_attrs].val.clusterDim.z = CLUSTER_K;
    ++n_attrs;
  }
  lc.attrs = attr;
  lc.numAttrs = n_attrs;
  cudaError_t err = cudaLaunchKernelEx(&lc, hgemm_kernel, static_cast<const half*>(A), static_cast<const half*>(B),
                                       static_cast<half*>(C), M, N, K, tiles_m, tiles_n, splits, k_per_split,
                                       st.partials, st.counters, tiles * splits <= resident ? 1 : 0);
  return err == cudaSuccess ? 0 : 4;
}
