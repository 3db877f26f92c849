// l2tui seed family: small_splitk
//
// Purpose: latency-bound shapes (a side of 64..512, or a long K with few output tiles), where
// launch and tail effects dominate and a library kernel leaves most SMs idle. Narrow CTA tiles and
// split-K with an in-kernel reduction keep all SMs busy in ONE launch: each CTA multiplies one
// K slice of one tile with mma.sync.m16n8k16 (cp.async multistage, ldmatrix from XOR-swizzled
// shared memory, double-buffered register fragments) and writes its fp32 partial tile to a
// workspace. When the grid fits on the GPU at once (always with SPLIT_K 0), the CTAs of a tile
// meet at a per-tile barrier and each adds all slices for its 1/splits of the tile, with many
// loads in flight (parallel reduction); otherwise an atomic ticket elects the last CTA, which
// adds them all. Slice order either way: bit-reproducible. SPLIT_K = 0 picks the slice count at
// run time (up to two CTAs per SM, at least two k-tiles per slice, at most 128 slices), so one
// build serves every shape. Compiles for sm_80 and later. The workspace is allocated once and
// only grown.
// A is M x K row-major, B is K x N row-major, C is M x N row-major (beta = 0). Needs K and N to
// be multiples of 8 and 16-byte aligned pointers, otherwise returns 2.
//
// Knobs (legal values):
//   BM        16, 32, 64           CTA tile rows
//   BN        32, 64, 128          CTA tile columns
//   BK        32, 64               K slice per pipeline stage
//   WARPS_M   1, 2, 4              warps along M (BM / WARPS_M must be a multiple of 16)
//   WARPS_N   1, 2, 4              warps along N (BN / WARPS_N must be a multiple of 16)
//   STAGES    2, 3, 4              cp.async pipeline depth
//   SWIZZLE   1, 2, 4, 8           tile rows per CTA group (block swizzling)
//   SPLIT_K   0 (auto), 1, 2, 4, 8, 16, 32, 64, 128   K slices per tile
//   ACC       ACC_F32, ACC_F16     accumulator type
//   PDL       0, 1                 programmatic dependent launch (used on sm_90 and later only):
//                                  the launch overlaps the previous kernel's tail, every global
//                                  access still waits for it (griddepcontrol.wait)
//   CLUSTER_K 1, 2, 4, 8           (sm_90 and later; needs SPLIT_K 1) K slices of a tile computed
//                                  by the CTAs of one thread-block cluster and added through
//                                  distributed shared memory: each CTA leaves its fp32 partial
//                                  tile in its own shared memory, the cluster meets at a barrier,
//                                  and each CTA adds every slice (in slice order) for its 1/CLUSTER_K
//                                  of the tile and stores it. No workspace round trip, no counters,
//                                  no second kernel: for a short-to-mid K on few tiles, where one
//                                  CTA walking all of K is latency-bound. On older GPUs l2_hgemm
//                                  returns 2 (unsupported)

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <stdint.h>

// Names for knob values (do not edit).
#define ACC_F32 1
#define ACC_F16 2

// l2: knobs begin
#define BM 32
#define BN 64
#define BK 64
#define WARPS_M 1
#define WARPS_N 2
#define STAGES 3
#define SWIZZLE 4
#define SPLIT_K 0
#define ACC ACC_F32
#define PDL 1
#define CLUSTER_K 1
// l2: knobs end
// l2: acc=f32
// (the line above declares the accumulator to the harness: keep it equal to ACC)
