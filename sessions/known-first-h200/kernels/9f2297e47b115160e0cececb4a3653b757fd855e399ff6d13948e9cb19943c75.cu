// l2tui seed family: tiny_mma
//
// Purpose: the smallest shapes (a few output tiles, K up to about a thousand), where a GEMM is a
// chain of latencies, not of arithmetic: wait for the previous kernel, fetch A and B, a few
// MMAs, store C. Each step here is the shortest we found on the H200 (tools/probes/latency_floor):
//   * every 16-byte load of a K chunk (A: BM x BK, B: BK x BN) is issued before the first is used,
//     straight into registers, so a chunk costs one round trip to L2; the loads of the next
//     AHEAD chunks are in flight during this chunk's MMAs (AHEAD sets of staging registers), so
//     a K of AHEAD + 1 chunks costs about one round trip
//   * two static shared-memory buffers with padded rows (no swizzle, no bank conflicts for
//     ldmatrix), one __syncthreads per chunk
//   * mma.sync.m16n8k16 (f32 or f16 accumulate), fragments read with ldmatrix (.trans for B)
//   * the accumulators go straight from registers to C, or (EPILOGUE EPI_SMEM) through shared
//     memory as 16-byte row segments
//   * PDL (Hopper and later): launched with programmatic stream serialization; griddepcontrol.wait
//     precedes every global access, the next kernel may launch once the MMAs are done
// At most two chunks ahead; K split across CTAs only inside one thread-block cluster (CLUSTER_K,
// sm_90+): each CTA of the cluster multiplies 1/CLUSTER_K of K, leaves its fp32 partial tile in
// its own shared memory, and after a cluster barrier adds its 1/CLUSTER_K of the tile over all
// peers (in rank and warp order, through distributed shared memory). Longer K belongs to
// small_splitk / sm90_cutlass.
// A 64x64x64 GEMM took 0.91 us per call graph-replayed on the H200 in the probe, against 1.62 us
// for CUTLASS's ping-pong 64x64 and 1.73 us for small_splitk 16x64 (results/h200/runs/latency-*).
// A is M x K row-major, B is K x N row-major, C is M x N row-major (beta = 0). Needs K and N to
// be multiples of 8 and 16-byte aligned pointers (16-byte loads), otherwise returns 2.
//
// Knobs (legal values):
//   BM        16, 32, 64, 128      CTA tile rows (128: eight warps, for many tiles with a short K)
//   BN        32, 64, 128          CTA tile columns
//   BK        32, 64, 128          K chunk fetched per round trip
//   WARPS_M   1, 2, 4              warps along M (BM / WARPS_M must be a multiple of 16)
//   WARPS_N   1, 2, 4              warps along N (BN / WARPS_N must be a multiple of 16)
//   WARPS_K   1, 2, 4              warps along K: each takes every WARPS_K-th k-step of a chunk,
//                                  so the dependent MMA chains are WARPS_K times shorter; their
//                                  fp32 partials are added through shared memory in warp order
//                                  (bit-reproducible). BK / 16 must be a multiple of WARPS_K
//   AHEAD     1, 2                 K chunks whose loads are in flight while one is multiplied
//                                  (2: two sets of staging registers, the loads of chunks 0 and
//                                  1 issued together at the start)
//   CLUSTER_K 1, 2, 4, 8           CTAs of one cluster that share a tile's K (sm_90 and later; on
//                                  older GPUs l2_hgemm returns 2). BM * BN / 4 must be a multiple
//                                  of CLUSTER_K; the WARPS_K fp32 partial tiles must fit in the
//                                  two chunk buffers
//   EPILOGUE  EPI_REGS, EPI_SMEM   how C is stored: EPI_REGS, each thread's fp16 pairs straight from
//                                  its fragments (4 bytes a thread, 16 contiguous bytes per row for
//                                  four threads: a warp's store fills half of each 32-byte sector it
//                                  touches); EPI_SMEM, the fp16 tile first into shared memory (over
//                                  the chunk buffers, rows padded), then stored as 16-byte row
//                                  segments, eight threads to a 128-byte line: every sector written
//                                  whole, a quarter of the store instructions. For many tiles with a
//                                  short K, where storing C is most of the call. CLUSTER_K 1 and
//                                  WARPS_K 1 only
//   ACC       ACC_F32, ACC_F16     accumulator type
//   PDL       0, 1                 programmatic dependent launch (used on sm_90 and later only)
// Limits (checked by the harness and by static_assert): two buffers fit in 48 KB of static shared
// memory, at most 16 staged 16-byte loads per thread (all AHEAD sets) and 64 accumulators.

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <cooperative_groups.h>

// Names for knob values (do not edit).
#define ACC_F32 1
#define ACC_F16 2
#define EPI_REGS 1
#define EPI_SMEM 2

// l2: knobs begin
#define BM 16
#define BN 64
#define BK 64
#define WARPS_M 1
#define WARPS_N 4
#define WARPS_K 2
#define AHEAD 1
#define CLUSTER_K 2
#define EPILOGUE EPI_REGS
#define ACC ACC_F32
#define PDL 0
// l2: knobs end
// l2: acc=f32
// (the line above declares the accumulator to the harness: keep it equal to ACC)

namespace l2 {

constexpr int kThreads = WARPS_M * WARPS_N * WARPS_K * 32;
constexpr int kWM = BM / WARPS_M;  // warp tile rows
constexpr int kWN = BN / WARPS_N;  // warp tile columns
constexpr int kMI = kWM / 16;      // m16 fragments per warp
constexpr int kNI = kWN / 8;       // n8 fragments per warp
constexpr int kLdA = BK + 8;       // padded shared-memory rows (halfs): ldmatrix rows hit distinct banks
constexpr int kLdB = BN + 8;
constexpr int kChunksA = BM * BK / 8;  // 16-byte loads of A per K chunk
constexpr int kChunksB = BK * BN / 8;  // and of B
constexpr int kPerA = (kChunksA + kThreads - 1) / kThreads;  // per thread
constexpr int kPerB = (kChunksB + kThreads - 1) / kThreads;
constexpr int kBufHalfs = BM * kLdA + BK * kLdB;

static_assert(kWM % 16 == 0 && kWN % 16 == 0, "warp tile must be a multiple of 16x16");
static_assert(2 * kBufHalfs * 2 <= 48 * 1024, "two buffers over 48 KB of static shared memory: smaller BK or tile");
static_assert(AHEAD == 1 || AHEAD == 2, "AHEAD is 1 or 2");
static_assert(CLUSTER_K == 1 || CLUSTER_K == 2 || CLUSTER_K == 4 || CLUSTER_K == 8, "CLUSTER_K is 1, 2, 4 or 8");
static_assert((BM * BN / 4) % CLUSTER_K == 0, "the tile must split into CLUSTER_K equal shares of 4 outputs");
static_assert(AHEAD * (kPerA + kPerB) <= 16, "over 16 staged loads per thread: add warps, lower BK or AHEAD");
static_assert(kMI * kNI * 4 <= 64, "over 64 accumulators per thread: add warps");
static_assert((BK / 16) % WARPS_K == 0, "BK / 16 must be a multiple of WARPS_K");
constexpr int kLdP = BN + 8;  // fp32 row of a K warp's partial tile in shared memory
static_assert(WARPS_K == 1 || (WARPS_K - 1) * BM * kLdP * 4 <= 2 * kBufHalfs * 2,
              "the K warps' partial tiles must fit in the two chunk buffers");
static_assert(CLUSTER_K == 1 || WARPS_K * BM * kLdP * 4 <= 2 * kBufHalfs * 2,
              "the partial tiles of all K warps must fit in the two chunk buffers");
static_assert(EPILOGUE == EPI_REGS || EPILOGUE == EPI_SMEM, "EPILOGUE is EPI_REGS or EPI_SMEM");
static_assert(EPILOGUE == EPI_REGS || (CLUSTER_K == 1 && WARPS_K == 1), "EPI_SMEM: CLUSTER_K 1 and WARPS_K 1 only");
constexpr int kLdO = BN + 8;  // fp16 row of the staged output tile: 16-byte aligned rows; the half2
                              // stores of 8 rows x 4 threads per warp hit 32 distinct banks
static_assert(EPILOGUE == EPI_REGS || BM * kLdO * 2 <= 2 * kBufHalfs * 2,
              "EPI_SMEM: the fp16 output tile must fit in the two chunk buffers");

#if ACC == ACC_F16
constexpr int kAccRegs = 2;  // two half2 registers per m16n8 fragment
typedef uint32_t AccT;
#else
constexpr int kAccRegs = 4;  // four floats per m16n8 fragment
typedef float AccT;
#endif

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
#else
__device__ __forceinline__ void mma16816(float (&d)[kAccRegs], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#endif

// The fp32 pair of accumulators (h = 0: row r, h = 1: row r + 8) of a fragment.
__device__ __forceinline__ float2 acc_pair(const AccT (&d)[kAccRegs], int h) {
#if ACC == ACC_F16
  return __half22float2(*reinterpret_cast<const __half2*>(&d[h]));
#else
  return make_float2(d[2 * h], d[2 * h + 1]);
#endif
}

// The fp16 pair of accumulator registers (q = 0: row r, q = 1: row r + 8) of a fragment.
__device__ __forceinline__ __half2 out_pair(const AccT (&d)[kAccRegs], int q) {
#if ACC == ACC_F16
  return *reinterpret_cast<const __half2*>(&d[q]);
#else
  return __floats2half2_rn(d[2 * q], d[2 * q + 1]);
#endif
}

__global__ void __launch_bounds__(kThreads)
hgemm_kernel(const half* __restrict__ A, const half* __restrict__ B, half* __restrict__ C, int M, int N, int K) {
  __shared__ __align__(16) half smem[2 * kBufHalfs];
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // PDL: no global memory access before the previous kernel in the stream has completed
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wk = warp / (WARPS_M * WARPS_N);  // this warp's share of each chunk's k-steps
  const int wm = (warp % (WARPS_M * WARPS_N)) / WARPS_N, wn = warp % WARPS_N;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  // this CTA's K chunks: all of them, or with CLUSTER_K its 1/CLUSTER_K (blockIdx.z = cluster rank).
  // CLUSTER_K 1 takes compile-time constants: the run-time slice arithmetic cost the unclustered
  // builds 4.7 % on the 47 shapes they won (63c92fc bench against bd4cf76, same kernels)
  const int all_chunks = (K + BK - 1) / BK;
  const int per_cta = CLUSTER_K == 1 ? all_chunks : (all_chunks + CLUSTER_K - 1) / CLUSTER_K;
  const int kbase = CLUSTER_K == 1 ? 0 : static_cast<int>(blockIdx.z) * per_cta * BK;
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);

  // One K chunk into a set of staging registers: every load issued before any is used (one
  // round trip). AHEAD sets, used in turn (the sets are separate arrays, indexed at compile time).
  uint4 ra0[kPerA], rb0[kPerB], ra1[kPerA], rb1[kPerB];
  auto fetch = [&](uint4 (&ra)[kPerA], uint4 (&rb)[kPerB], int k0) {
#pragma unroll
    for (int i = 0; i < kPerA; ++i) {
      const int c = tid + i * kThreads;
      const int r = c / (BK / 8), gk = k0 + (c % (BK / 8)) * 8;
      const bool ok = c < kChunksA && m0 + r < M && gk < K;  // K % 8 == 0: a load is all in or all out
      ra[i] = ok ? *reinterpret_cast<const uint4*>(A + (size_t)(m0 + r) * K + gk) : zero;
    }
#pragma unroll
    for (int i = 0; i < kPerB; ++i) {
      const int c = tid + i * kThreads;
      const int r = c / (BN / 8), gn = n0 + (c % (BN / 8)) * 8;
      const bool ok = c < kChunksB && k0 + r < K && gn < N;
      rb[i] = ok ? *reinterpret_cast<const uint4*>(B + (size_t)(k0 + r) * N + gn) : zero;
    }
  };
  auto stage = [&](const uint4 (&ra)[kPerA], const uint4 (&rb)[kPerB], half* buf) {
#pragma unroll
    for (int i = 0; i < kPerA; ++i) {
      const int c = tid + i * kThreads;
      if (c < kChunksA) *reinterpret_cast<uint4*>(buf + (c / (BK / 8)) * kLdA + (c % (BK / 8)) * 8) = ra[i];
    }
    half* bufB = buf + BM * kLdA;
#pragma unroll
    for (int i = 0; i < kPerB; ++i) {
      const int c = tid + i * kThreads;
      if (c < kChunksB) *reinterpret_cast<uint4*>(bufB + (c / (BN / 8)) * kLdB + (c % (BN / 8)) * 8) = rb[i];
    }
  };

  AccT acc[kMI][kNI][kAccRegs];
#pragma unroll
  for (int i = 0; i < kMI; ++i)
#pragma unroll
    for (int j = 0; j < kNI; ++j)
#pragma unroll
      for (int r = 0; r < kAccRegs; ++r) acc[i][j][r] = 0;

  const int chunks = CLUSTER_K == 1 ? all_chunks
                                    : max(0, min(per_cta, all_chunks - (int)blockIdx.z * per_cta));  // may be 0
  // One chunk: its staged registers to shared memory, the loads of chunk ch + AHEAD into the
  // same registers (in flight during the MMAs), then the MMAs.
  auto step = [&](int ch, uint4 (&ra)[kPerA], uint4 (&rb)[kPerB]) {
    half* buf = smem + (ch & 1) * kBufHalfs;
    stage(ra, rb, buf);
    // the chunk is in shared memory; every warp is done with the buffer written two chunks ago
    __syncthreads();
    if (ch + AHEAD < chunks) fetch(ra, rb, kbase + (ch + AHEAD) * BK);
    const uint32_t sA = static_cast<uint32_t>(__cvta_generic_to_shared(buf));
    const uint32_t sB = sA + BM * kLdA * 2;
#pragma unroll
    for (int ks = 0; ks < BK / 16 / WARPS_K; ++ks) {
      const int kk = ks * WARPS_K + wk;
      uint32_t fa[kMI][4], fb[kNI][2];
#pragma unroll
      for (int i = 0; i < kMI; ++i)
        ldmatrix_x4(fa[i], sA + ((wm * kWM + i * 16 + (lane & 15)) * kLdA + kk * 16 + (lane >> 4) * 8) * 2);
#pragma unroll
      for (int j = 0; j < kNI; j += 2) {
        uint32_t t[4];
        ldmatrix_x4_trans(t, sB + ((kk * 16 + (lane & 15)) * kLdB + wn * kWN + j * 8 + (lane >> 4) * 8) * 2);
        fb[j][0] = t[0]; fb[j][1] = t[1];
        fb[j + 1][0] = t[2]; fb[j + 1][1] = t[3];
      }
#pragma unroll
      for (int i = 0; i < kMI; ++i)
#pragma unroll
        for (int j = 0; j < kNI; ++j) mma16816(acc[i][j], fa[i], fb[j][0], fb[j][1]);
    }
  };
  if (CLUSTER_K == 1 || chunks > 0) fetch(ra0, rb0, kbase);
  if (AHEAD > 1 && chunks > 1) fetch(ra1, rb1, kbase + BK);
  for (int ch = 0; ch < chunks; ch += AHEAD) {
    step(ch, ra0, rb0);
    if (AHEAD > 1 && ch + 1 < chunks) step(ch + 1, ra1, rb1);
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // PDL: the next kernel in the stream may start launching (it waits before touching memory)
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif

#if CLUSTER_K > 1
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  {
    // Cluster split-K: every warp leaves its fp32 partial tile in slot wk of this CTA's shared
    // memory; after the cluster barrier, CTA `rank` adds for its 1/CLUSTER_K of the tile every
    // slot of every peer, in rank then warp order (bit-reproducible), and stores it.
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    __syncthreads();  // every warp is past its last MMA: the chunk buffers are free
    float* part = reinterpret_cast<float*>(smem);
#pragma unroll
    for (int i = 0; i < kMI; ++i)
#pragma unroll
      for (int j = 0; j < kNI; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = wm * kWM + i * 16 + (lane >> 2) + h * 8;
          const int c = wn * kWN + j * 8 + (lane & 3) * 2;
          *reinterpret_cast<float2*>(part + (wk * BM + r) * kLdP + c) = acc_pair(acc[i][j], h);
        }
    cluster.sync();  // release/acquire: every partial tile is visible to the whole cluster
    constexpr int kShare = BM * BN / 4 / CLUSTER_K;  // groups of 4 outputs per CTA
    const int rank = static_cast<int>(cluster.block_rank());
    const float* peer[CLUSTER_K];
#pragma unroll
    for (int q = 0; q < CLUSTER_K; ++q) peer[q] = cluster.map_shared_rank(part, q);
    for (int e = rank * kShare + tid; e < (rank + 1) * kShare; e += kThreads) {
      const int r = (e * 4) / BN, c = (e * 4) % BN;
      float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
      for (int q = 0; q < CLUSTER_K; ++q)
#pragma unroll
        for (int w = 0; w < WARPS_K; ++w) {
          const float4 v = *reinterpret_cast<const float4*>(peer[q] + (w * BM + r) * kLdP + c);
          s.x += v.x; s.y += v.y; s.z += v.z; s.w += v.w;
        }
      if (m0 + r < M && n0 + c < N) {  // (N % 8 == 0: four outputs are all in or all out)
        __half2* out = reinterpret_cast<__half2*>(C + (size_t)(m0 + r) * N + n0 + c);
        out[0] = __floats2half2_rn(s.x, s.y);
        out[1] = __floats2half2_rn(s.z, s.w);
      }
    }
    cluster.sync();  // no CTA leaves (freeing its shared memory) while a peer still reads it
  }
#endif
  return;  // (below sm_90 the host refuses CLUSTER_K builds: never launched)
#endif
#if WARPS_K > 1
  // The K warps' partial tiles: warps wk > 0 leave theirs in shared memory (fp32 pairs, rows
  // padded to kLdP so a half-warp's 8-byte stores hit distinct banks; the chunk buffers are free
  // once every warp is past its last MMA), warp group 0 adds them in wk order.
  __syncthreads();
  float* part = reinterpret_cast<float*>(smem);
  if (wk > 0) {
#pragma unroll
    for (int i = 0; i < kMI; ++i)
#pragma unroll
      for (int j = 0; j < kNI; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = wm * kWM + i * 16 + (lane >> 2) + h * 8;
          const int c = wn * kWN + j * 8 + (lane & 3) * 2;
          *reinterpret_cast<float2*>(part + ((wk - 1) * BM + r) * kLdP + c) = acc_pair(acc[i][j], h);
        }
  }
  __syncthreads();
  if (wk > 0) return;
#pragma unroll
  for (int i = 0; i < kMI; ++i)
#pragma unroll
    for (int j = 0; j < kNI; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = wm * kWM + i * 16 + (lane >> 2) + h * 8;
        const int c = wn * kWN + j * 8 + (lane & 3) * 2;
        float2 v = acc_pair(acc[i][j], h);
        for (int w = 1; w < WARPS_K; ++w) {
          const float2 p = *reinterpret_cast<const float2*>(part + ((w - 1) * BM + r) * kLdP + c);
          v.x += p.x;
          v.y += p.y;
        }
        if (m0 + r < M && n0 + c < N)
          *reinterpret_cast<__half2*>(C + (size_t)(m0 + r) * N + n0 + c) = __floats2half2_rn(v.x, v.y);
      }
  return;
#endif
#if EPILOGUE == EPI_SMEM
  // Epilogue through shared memory: the fp16 tile over the chunk buffers (every warp is past its
  // last ldmatrix of them), then each thread stores 16-byte row segments, consecutive threads
  // consecutive segments (N % 8 == 0: a segment is all in or all out).
  __syncthreads();
  half* tile = smem;
#pragma unroll
  for (int i = 0; i < kMI; ++i)
#pragma unroll
    for (int j = 0; j < kNI; ++j) {
      const int r = wm * kWM + i * 16 + (lane >> 2);
      const int c = wn * kWN + j * 8 + (lane & 3) * 2;
      *reinterpret_cast<__half2*>(tile + r * kLdO + c) = out_pair(acc[i][j], 0);
      *reinterpret_cast<__half2*>(tile + (r + 8) * kLdO + c) = out_pair(acc[i][j], 1);
    }
  __syncthreads();
  constexpr int kSegRow = BN / 8;  // 16-byte segments per row of the tile
#pragma unroll
  for (int v = tid; v < BM * kSegRow; v += kThreads) {
    const int r = v / kSegRow, c = (v % kSegRow) * 8;
    if (m0 + r < M && n0 + c < N)
      *reinterpret_cast<uint4*>(C + (size_t)(m0 + r) * N + n0 + c) = *reinterpret_cast<const uint4*>(tile + r * kLdO + c);
  }
#else
  // Epilogue: each thread's fragments straight to C (fp16 pairs; N % 8 == 0, so a pair is all in or out).
#pragma unroll
  for (int i = 0; i < kMI; ++i)
#pragma unroll
    for (int j = 0; j < kNI; ++j) {
      const int r = m0 + wm * kWM + i * 16 + (lane >> 2);
      const int c = n0 + wn * kWN + j * 8 + (lane & 3) * 2;
      if (c < N) {
        if (r < M) *reinterpret_cast<__half2*>(C + (size_t)r * N + c) = out_pair(acc[i][j], 0);
        if (r + 8 < M) *reinterpret_cast<__half2*>(C + (size_t)(r + 8) * N + c) = out_pair(acc[i][j], 1);
      }
    }
#endif
}

}  // namespace l2

extern "C" int l2_hgemm(const void* A, const void* B, void* C, int M, int N, int K, void* stream) {
  using namespace l2;
  if (M <= 0 || N <= 0 || K <= 0) return 1;
  if (K % 8 != 0 || N % 8 != 0) return 2;
  if (((uintptr_t)A | (uintptr_t)B | (uintptr_t)C) & 15) return 2;
  static int cc = -1;  // compute capability (PDL needs 90+)
  if (cc < 0) {
    int dev = 0, major = 0, minor = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    cc = major * 10 + minor;
  }
  if (CLUSTER_K > 1 && cc < 90) return 2;  // thread-block clusters: sm_90 and later
  const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
  if (tiles_m > 65535) return 2;  // grid.y limit (M > 1M rows)
  cudaLaunchConfig_t lc = {};
  lc.gridDim = dim3(tiles_n, tiles_m, CLUSTER_K);  // grid z: the K slices of a tile, one cluster
  lc.blockDim = dim3(kThreads, 1, 1);
  lc.stream = static_cast<cudaStream_t>(stream);
  cudaLaunchAttribute attr[2];
  unsigned n_attrs = 0;
  if (PDL && cc >= 90) {
    attr[n_attrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n_attrs].val.programmaticStreamSerializationAllowed = 1;
    ++n_attrs;
  }
  if (CLUSTER_K > 1) {
    attr[n_attrs].id = cudaLaunchAttributeClusterDimension;
    attr[n_attrs].val.clusterDim.x = 1;
    attr[n_attrs].val.clusterDim.y = 1;
    attr[n_attrs].val.clusterDim.z = CLUSTER_K;
    ++n_attrs;
  }
  lc.attrs = attr;
  lc.numAttrs = n_attrs;
  cudaError_t err = cudaLaunchKernelEx(&lc, hgemm_kernel, static_cast<const half*>(A), static_cast<const half*>(B),
                                       static_cast<half*>(C), M, N, K);
  return err == cudaSuccess ? 0 : 4;
}
