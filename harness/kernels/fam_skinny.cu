// l2tui seed family: skinny_splitk
//
// Purpose: skinny decode GEMMs (M = 1..128 tokens against N and K in the thousands). They are
// memory-bound: the floor is reading B (K x N fp16) once at the HBM's read bandwidth; A and C are
// small. The whole design serves that one stream of B:
//   * split-K across the GPU: each CTA takes one BN-column tile and one K slice (a multiple of BK
//     rows), so even a few column tiles give WAVES waves of CTAs over all SMs and every byte of B
//     is read exactly once, by one CTA
//   * a cp.async ring of STAGES stages (A's BM x BK and B's BK x BN slice per stage, 16-byte
//     copies, B's rows coalesced, L1 bypassed): STAGES - 1 stages of B in flight per CTA
//   * A's rows past M and K past the slice are zero-filled by the copy itself (no memory read), so
//     M = 1 costs no more bytes than M = 16
//   * mma.sync.m16n8k16 (M padded to 16 rows), fragments through ldmatrix (.trans for B) from
//     padded shared-memory rows (no bank conflicts)
//   * the reduction is in the same kernel and deterministic: each CTA of a split tile writes its
//     fp32 partial (the rows below M only) to its own slot of a workspace, an atomic ticket per
//     tile elects the last CTA to arrive, which adds the slots in slice order (bit-reproducible
//     whatever order the CTAs ran in), converts to fp16, stores C and sets the tile's ticket back
//     to 0 for the next call. No CTA ever waits for another, so no grid size can deadlock
//   * no programmatic dependent launch (per call it costs more than it hides)
// A is M x K row-major, B is K x N row-major, C is M x N row-major (beta = 0). Needs K and N to
// be multiples of 8, M <= 128 and 16-byte aligned pointers, otherwise returns 2. The workspace
// (fp32 slots and one ticket per tile) is allocated on the first call that needs it and only grown;
// it is shared by every call of this library: never run it on two streams at once. A new ticket
// buffer is zeroed on the call's own stream, before the launch that uses it (the caller's stream
// may be non-blocking: a memset on the legacy default stream would not be ordered before it).
//
// Knobs (legal values):
//   BM        16, 32, 64, 128      CTA tile rows (M above BM takes ceil(M / BM) row tiles, each
//                                  reading all of B again: pick BM >= M)
//   BN        64, 128, 256         CTA tile columns (a K slice's B rows are BN * 2 bytes wide)
//   BK        32, 64, 128          K rows per pipeline stage
//   WARPS_M   1, 2, 4              warps along M (BM / WARPS_M must be a multiple of 16)
//   WARPS_N   1, 2, 4              warps along N (BN / WARPS_N must be a multiple of 16)
//   WARPS_K   1, 2, 4              warps along K: each takes every WARPS_K-th k-step of a stage;
//                                  their fp32 partials are added in shared memory in warp order.
//                                  BK / 16 must be a multiple of WARPS_K
//   STAGES    2, 3, 4, 5, 6, 8     cp.async ring depth
//   KCHUNK    0, 256, 512, 1024, 2048, 4096
//                                  K rows per CTA (the split count is ceil(K / KCHUNK)); 0 = chosen
//                                  per call: enough slices for WAVES waves of resident CTAs. Either
//                                  way a slice is a multiple of BK and at least 4 rows of K per row
//                                  of the tile (its fp32 partials would otherwise outweigh its share
//                                  of B), and there are at most 256 slices
//   WAVES     1, 2, 4              waves of resident CTAs KCHUNK 0 aims at
//   ACC       ACC_F32, ACC_F16     accumulator type (f16: each warp's chain is f16; the slices are
//                                  added in fp32)
// Limits (checked by the harness and by static_assert): at most 16 warps, 64 accumulators per
// thread, the ring and the fp32 tile in 227 KB of shared memory.

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <stdint.h>

// Names for knob values (do not edit).
#define ACC_F32 1
#define ACC_F16 2

// l2: knobs begin
#define BM 16
#define BN 128
#define BK 64
#define WARPS_M 1
#define WARPS_N 4
#define WARPS_K 1
#define STAGES 4
#define KCHUNK 0
#define WAVES 2
#define ACC ACC_F32
// l2: knobs end
// l2: acc=f32
// (the line above declares the accumulator to the harness: keep it equal to ACC)

namespace l2 {

constexpr int kMaxM = 128;         // the family's rows (decode: tokens)
constexpr int kMaxSplits = 256;
constexpr int kThreads = WARPS_M * WARPS_N * WARPS_K * 32;
constexpr int kWM = BM / WARPS_M;  // warp tile rows
constexpr int kWN = BN / WARPS_N;  // warp tile columns
constexpr int kMI = kWM / 16;      // m16 fragments per warp
constexpr int kNI = kWN / 8;       // n8 fragments per warp
constexpr int kLdA = BK + 8;       // padded shared-memory rows (halfs): ldmatrix rows hit distinct banks
constexpr int kLdB = BN + 8;
constexpr int kStageHalfs = BM * kLdA + BK * kLdB;
constexpr int kLdR = BN + 4;       // fp32 row of the CTA's summed tile (16-byte aligned rows)
constexpr int kRingBytes = STAGES * kStageHalfs * 2;
constexpr int kTileBytes = BM * kLdR * 4;
constexpr int kSmemBytes = kRingBytes > kTileBytes ? kRingBytes : kTileBytes;
constexpr int kSeg = BN / 8;       // 8-column segments per tile row

static_assert(kWM % 16 == 0 && kWN % 16 == 0, "warp tile must be a multiple of 16x16");
static_assert(kThreads <= 512, "at most 16 warps");
static_assert(kMI * kNI * 4 <= 64, "over 64 accumulators per thread: add warps");
static_assert((BK / 16) % WARPS_K == 0, "BK / 16 must be a multiple of WARPS_K");
static_assert(STAGES >= 2, "at least two stages");
static_assert(kSmemBytes + 16 <= 227 * 1024, "the ring or the fp32 tile is over 227 KB of shared memory");

#if ACC == ACC_F16
constexpr int kAccRegs = 2;  // two half2 registers per m16n8 fragment
typedef uint32_t AccT;
#else
constexpr int kAccRegs = 4;  // four floats per m16n8 fragment
typedef float AccT;
#endif

__device__ __forceinline__ void copy16(uint32_t dst, const void* src, bool in_bounds) {
  // src-size 0 writes 16 zero bytes and reads nothing
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(in_bounds ? 16 : 0));
}
__device__ __forceinline__ void copies_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void copies_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

#if ACC == ACC_F16
__device__ __forceinline__ void mma(uint32_t (&d)[kAccRegs], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3,%4,%5}, {%6,%7}, {%0,%1};\n"
               : "+r"(d[0]), "+r"(d[1]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ float2 pair(const AccT (&d)[kAccRegs], int h) {
  return __half22float2(*reinterpret_cast<const __half2*>(&d[h]));
}
#else
__device__ __forceinline__ void mma(float (&d)[kAccRegs], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// the fp32 pair of a fragment: h = 0 row r, h = 1 row r + 8
__device__ __forceinline__ float2 pair(const AccT (&d)[kAccRegs], int h) { return make_float2(d[2 * h], d[2 * h + 1]); }
#endif

// Eight fp32 values as eight fp16 in one 16-byte word.
__device__ __forceinline__ uint4 to_half8(float4 lo, float4 hi) {
  const __half2 h0 = __floats2half2_rn(lo.x, lo.y), h1 = __floats2half2_rn(lo.z, lo.w);
  const __half2 h2 = __floats2half2_rn(hi.x, hi.y), h3 = __floats2half2_rn(hi.z, hi.w);
  return make_uint4(*reinterpret_cast<const uint32_t*>(&h0), *reinterpret_cast<const uint32_t*>(&h1),
                    *reinterpret_cast<const uint32_t*>(&h2), *reinterpret_cast<const uint32_t*>(&h3));
}

// Where one CTA works (grid: x = K slice, y = column tile, z = row tile). The kernel and the
// tests' host model of the tiling call these same functions.
struct Work {
  int m0, n0;      // the tile's first row and column of C
  int k0, k_end;   // the slice's K rows [k0, k_end)
  int rows, segs;  // rows of the tile below M, 8-column segments left of N
  int tile;        // the (row tile, column tile) index: its ticket and its group of slots
};
// Rows of a tile below M and its 8-column segments left of N: the kernel computes them after its
// main loop (kept live across it they cost two registers and spill), work_of for the host model.
__host__ __device__ __forceinline__ int tile_rows(int m0, int M) { return min(BM, M - m0); }
__host__ __device__ __forceinline__ int tile_segs(int n0, int N) { return min(BN / 8, (N - n0) / 8); }
__host__ __device__ __forceinline__ Work work_of(int split, int col_tile, int row_tile, int col_tiles, int M, int N,
                                                 int K, int k_per_split) {
  Work w;
  w.m0 = row_tile * BM;
  w.n0 = col_tile * BN;
  w.k0 = split * k_per_split;
  w.k_end = min(K, w.k0 + k_per_split);
  w.rows = tile_rows(w.m0, M);
  w.segs = tile_segs(w.n0, N);
  w.tile = row_tile * col_tiles + col_tile;
  return w;
}
// First float of a slice's slot: the tile's `splits` slots are consecutive, `slot` floats each.
__host__ __device__ __forceinline__ size_t slot_base(int tile, int split, int splits, int slot) {
  return ((size_t)tile * splits + split) * slot;
}
// Offset of row r, segment s inside a slot (row stride BN).
__host__ __device__ __forceinline__ int slot_offset(int r, int s) { return r * BN + s * 8; }
// Element of C at row r, segment s of the tile.
__host__ __device__ __forceinline__ size_t c_index(const Work& w, int r, int s, int N) {
  return (size_t)(w.m0 + r) * N + w.n0 + s * 8;
}

// One pipeline stage: A's BM x BK and B's BK x BN at K row k0, rows at or past k_end and A rows
// at or past M zero-filled (K % 8 == 0 and N % 8 == 0: a 16-byte copy is all in or all out).
__device__ __forceinline__ void load_stage(uint32_t s_stage, const half* A, const half* B, int M, int N, int K,
                                           int m0, int n0, int k0, int k_end, int tid) {
  for (int c = tid; c < BM * BK / 8; c += kThreads) {
    const int r = c / (BK / 8), kk = k0 + (c % (BK / 8)) * 8;
    const bool ok = m0 + r < M && kk < k_end;
    const half* src = ok ? A + (size_t)(m0 + r) * K + kk : A;
    copy16(s_stage + (r * kLdA + (c % (BK / 8)) * 8) * 2, src, ok);
  }
  const uint32_t s_b = s_stage + BM * kLdA * 2;
  for (int c = tid; c < BK * BN / 8; c += kThreads) {
    const int r = c / kSeg, n = n0 + (c % kSeg) * 8;
    const bool ok = k0 + r < k_end && n < N;
    const half* src = ok ? B + (size_t)(k0 + r) * N + n : B;
    copy16(s_b + (r * kLdB + (c % kSeg) * 8) * 2, src, ok);
  }
}

// grid: x = K slice, y = column tile, z = row tile. ws: the tiles' fp32 slots, `slot` floats each
// (rows below M only, row stride BN); tickets: one per tile, 0 between calls.
__global__ void __launch_bounds__(kThreads)
skinny_kernel(const half* __restrict__ A, const half* __restrict__ B, half* __restrict__ C, int M, int N, int K,
              int k_per_split, float* __restrict__ ws, int* __restrict__ tickets, int slot) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ int s_last;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wk = warp / (WARPS_M * WARPS_N);
  const int wm = (warp % (WARPS_M * WARPS_N)) / WARPS_N, wn = warp % WARPS_N;
  const int split = blockIdx.x, splits = gridDim.x;
  const Work w = work_of(split, blockIdx.y, blockIdx.z, gridDim.y, M, N, K, k_per_split);
  const int n0 = w.n0, m0 = w.m0, k0 = w.k0, k_end = w.k_end;
  const int ktiles = (k_end - k0 + BK - 1) / BK;
  const uint32_t s_base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));

  AccT acc[kMI][kNI][kAccRegs];
#pragma unroll
  for (int i = 0; i < kMI; ++i)
#pragma unroll
    for (int j = 0; j < kNI; ++j)
#pragma unroll
      for (int r = 0; r < kAccRegs; ++r) acc[i][j][r] = 0;

  // the ring: STAGES - 1 stages requested before the first is used, one more after each
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < ktiles) load_stage(s_base + s * kStageHalfs * 2, A, B, M, N, K, m0, n0, k0 + s * BK, k_end, tid);
    copies_commit();
  }
  for (int kt = 0; kt < ktiles; ++kt) {
    copies_wait<STAGES - 2>();
    __syncthreads();  // stage kt is in shared memory for all; every warp is done with stage kt - 1
    const int next = kt + STAGES - 1;
    if (next < ktiles)
      load_stage(s_base + (next % STAGES) * kStageHalfs * 2, A, B, M, N, K, m0, n0, k0 + next * BK, k_end, tid);
    copies_commit();
    const uint32_t sA = s_base + (kt % STAGES) * kStageHalfs * 2;
    const uint32_t sB = sA + BM * kLdA * 2;
#pragma unroll
    for (int ks = 0; ks < BK / 16 / WARPS_K; ++ks) {
      const int kk = ks * WARPS_K + wk;
      uint32_t fa[kMI][4], fb[kNI][2];
#pragma unroll
      for (int i = 0; i < kMI; ++i)
        ldsm_x4(fa[i], sA + ((wm * kWM + i * 16 + (lane & 15)) * kLdA + kk * 16 + (lane >> 4) * 8) * 2);
#pragma unroll
      for (int j = 0; j < kNI; j += 2) {
        uint32_t t[4];
        ldsm_x4_t(t, sB + ((kk * 16 + (lane & 15)) * kLdB + wn * kWN + j * 8 + (lane >> 4) * 8) * 2);
        fb[j][0] = t[0]; fb[j][1] = t[1];
        fb[j + 1][0] = t[2]; fb[j + 1][1] = t[3];
      }
#pragma unroll
      for (int i = 0; i < kMI; ++i)
#pragma unroll
        for (int j = 0; j < kNI; ++j) mma(acc[i][j], fa[i], fb[j][0], fb[j][1]);
    }
  }
  copies_wait<0>();
  __syncthreads();  // the ring is free: it becomes the CTA's fp32 tile

  // The K warps' fragments into one fp32 tile, added in warp order (bit-reproducible).
  float* tile = reinterpret_cast<float*>(smem);
#pragma unroll 1
  for (int kw = 0; kw < WARPS_K; ++kw) {
    if (wk == kw) {
#pragma unroll
      for (int i = 0; i < kMI; ++i)
#pragma unroll
        for (int j = 0; j < kNI; ++j)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            float2* p = reinterpret_cast<float2*>(
                tile + (wm * kWM + i * 16 + (lane >> 2) + h * 8) * kLdR + wn * kWN + j * 8 + (lane & 3) * 2);
            float2 v = pair(acc[i][j], h);
            if (kw > 0) {
              const float2 o = *p;
              v.x += o.x;
              v.y += o.y;
            }
            *p = v;
          }
    }
    __syncthreads();
  }

  const int rows = tile_rows(m0, M), segs = tile_segs(n0, N);
  if (splits == 1) {
    for (int e = tid; e < rows * kSeg; e += kThreads) {
      const int r = e / kSeg, s = e % kSeg;
      if (s >= segs) continue;
      const float4* src = reinterpret_cast<const float4*>(tile + r * kLdR + s * 8);
      *reinterpret_cast<uint4*>(C + c_index(w, r, s, N)) = to_half8(src[0], src[1]);
    }
    return;
  }

  // Split tile: this slice's partial into its slot, then the ticket.
  const int tile_id = w.tile;
  float* mine = ws + slot_base(tile_id, split, splits, slot);
  for (int e = tid; e < rows * kSeg; e += kThreads) {
    const int r = e / kSeg, s = e % kSeg;
    if (s >= segs) continue;
    const float4* src = reinterpret_cast<const float4*>(tile + r * kLdR + s * 8);
    float4* dst = reinterpret_cast<float4*>(mine + slot_offset(r, s));
    __stcg(dst, src[0]);
    __stcg(dst + 1, src[1]);
  }
  __threadfence();  // this CTA's partial is visible GPU-wide before its ticket is taken
  __syncthreads();
  if (tid == 0) {
    const int before = atomicAdd(tickets + tile_id, 1);
    s_last = before == splits - 1;
    if (s_last) tickets[tile_id] = 0;  // every slice has arrived: ready for the next call
  }
  __syncthreads();
  if (!s_last) return;
  __threadfence();  // acquire: the other slices' partials are read after their tickets
  for (int e = tid; e < rows * kSeg; e += kThreads) {
    const int r = e / kSeg, s = e % kSeg;
    if (s >= segs) continue;
    float4 lo = make_float4(0.f, 0.f, 0.f, 0.f), hi = lo;
    // unrolled: eight slices' loads in flight before their adds (in slice order)
#pragma unroll 8
    for (int q = 0; q < splits; ++q) {
      const float4* p = reinterpret_cast<const float4*>(ws + slot_base(tile_id, q, splits, slot) + slot_offset(r, s));
      const float4 a = __ldcg(p), b = __ldcg(p + 1);
      lo.x += a.x; lo.y += a.y; lo.z += a.z; lo.w += a.w;
      hi.x += b.x; hi.y += b.y; hi.z += b.z; hi.w += b.w;
    }
    *reinterpret_cast<uint4*>(C + c_index(w, r, s, N)) = to_half8(lo, hi);
  }
}

struct State {
  bool configured = false;
  int resident = 0;  // CTAs of this build the GPU holds at once
  float* ws = nullptr;
  size_t ws_floats = 0;
  int* tickets = nullptr;
  size_t ticket_count = 0;
};

static State& state() {
  static State s;
  return s;
}

// Grow-only workspace: allocated on the first call that needs it, never per call afterwards. A
// smaller old buffer is not freed: a CUDA graph captured earlier may still point at it.
static bool ensure_workspace(State& st, size_t floats, size_t tickets, cudaStream_t stream) {
  if (floats > st.ws_floats) {
    st.ws = nullptr;
    st.ws_floats = 0;
    if (cudaMalloc(&st.ws, floats * sizeof(float)) != cudaSuccess) return false;
    st.ws_floats = floats;
  }
  if (tickets > st.ticket_count) {
    st.tickets = nullptr;
    st.ticket_count = 0;
    if (cudaMalloc(&st.tickets, tickets * sizeof(int)) != cudaSuccess) return false;
    // on the call's stream: the launch after it sees zeros whatever kind of stream it is
    if (cudaMemsetAsync(st.tickets, 0, tickets * sizeof(int), stream) != cudaSuccess) return false;
    st.ticket_count = tickets;
  }
  return true;
}

// K rows per slice: KCHUNK, or (0) enough slices for WAVES waves of resident CTAs; a multiple of
// BK, at least 4 rows of K per tile row and at most kMaxSplits slices.
static int slice_rows(int K, int rows, int tiles, int resident) {
  const int ktiles = (K + BK - 1) / BK;
  int splits;
  if (KCHUNK > 0) {
    constexpr int chunk = KCHUNK > 0 ? KCHUNK : 1;  // (a constant divisor in every build)
    splits = (K + chunk - 1) / chunk;
  } else {
    splits = (WAVES * resident + tiles - 1) / tiles;
  }
  const int least_rows = 4 * rows;
  splits = min(splits, max(1, K / least_rows));
  splits = max(1, min(min(splits, ktiles), kMaxSplits));
  return ((ktiles + splits - 1) / splits) * BK;
}

// What one call launches: the tile grid, the slices, the workspace it needs.
struct Plan {
  int tiles_m, tiles_n;  // row tiles (grid z) and column tiles (grid y)
  int k_per_split;       // K rows per slice
  int splits;            // slices (grid x); 1: no workspace, C written directly
  int slot;              // floats of one slice's fp32 partial of a tile
  size_t ws_floats;      // the workspace's floats (0 when splits == 1)
  size_t tickets;        // the tickets (0 when splits == 1)
};

// 0 and the plan of a call on M x N x K with `resident` CTAs at once, or 2 when its column tiles
// are more than a grid's y dimension holds (the other refusals come first, in l2_hgemm).
static int plan_call(int M, int N, int K, int resident, Plan& p) {
  p.tiles_m = (M + BM - 1) / BM;
  p.tiles_n = (N + BN - 1) / BN;
  if (p.tiles_n > 65535) return 2;  // grid.y limit
  const int rows = min(M, BM);
  p.k_per_split = slice_rows(K, rows, p.tiles_m * p.tiles_n, resident);
  p.splits = (K + p.k_per_split - 1) / p.k_per_split;  // no empty slices
  p.slot = rows * BN;
  const size_t tiles = (size_t)p.tiles_m * p.tiles_n;
  p.ws_floats = p.splits > 1 ? tiles * p.splits * p.slot : 0;
  p.tickets = p.splits > 1 ? tiles : 0;
  return 0;
}

}  // namespace l2

extern "C" int l2_hgemm(const void* A, const void* B, void* C, int M, int N, int K, void* stream) {
  using namespace l2;
  if (M <= 0 || N <= 0 || K <= 0) return 1;
  if (K % 8 != 0 || N % 8 != 0 || M > kMaxM) return 2;
  if (((uintptr_t)A | (uintptr_t)B | (uintptr_t)C) & 15) return 2;
  State& st = state();
  if (!st.configured) {
    int dev = 0, sms = 0, per_sm = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (cudaFuncSetAttribute(skinny_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes) != cudaSuccess)
      return 3;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, skinny_kernel, kThreads, kSmemBytes) != cudaSuccess ||
        per_sm < 1) {
      cudaGetLastError();
      per_sm = 1;
    }
    st.resident = sms * per_sm;
    st.configured = true;
  }
  Plan p;
  if (plan_call(M, N, K, st.resident, p) != 0) return 2;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (p.splits > 1 && !ensure_workspace(st, p.ws_floats, p.tickets, s)) return 3;
  cudaLaunchConfig_t lc = {};
  lc.gridDim = dim3(p.splits, p.tiles_n, p.tiles_m);
  lc.blockDim = dim3(kThreads, 1, 1);
  lc.dynamicSmemBytes = kSmemBytes;
  lc.stream = s;
  const cudaError_t err = cudaLaunchKernelEx(&lc, skinny_kernel, static_cast<const half*>(A), static_cast<const half*>(B),
                                             static_cast<half*>(C), M, N, K, p.k_per_split, st.ws, st.tickets, p.slot);
  return err == cudaSuccess ? 0 : 4;
}
