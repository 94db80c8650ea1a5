// The index arithmetic of the tensor-core attention kernels (flash_forward.cu, flash_backward.cu),
// kept apart from the device code so that the CPU tests can check it (tests/cuda): which tile
// element each lane holds in the operands of mma.sync.m16n8k16 (the layouts of the PTX ISA,
// "Matrix Fragments for mma.m16n8k16 with floating point type"), which row each lane points
// ldmatrix.x4 at for every operand shape the kernels load, the XOR swizzle of shared-memory
// tiles, the causal block ranges under contiguous positions and the GQA head mapping. Plain
// constexpr C++: no CUDA headers; __host__ __device__ when compiled by nvcc.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define WF_FLASH_HD __host__ __device__ __forceinline__
#else
#define WF_FLASH_HD inline
#endif

namespace wallfacer::runtime::cuda::flash {

struct Coord {
  int row = 0, col = 0;
};

// ---- mma.sync.m16n8k16 fragments (f16/bf16 inputs, f32 accumulators) ---------------------------
// Lanes form 8 groups of 4: group = lane / 4, thread-in-group = lane % 4.
WF_FLASH_HD constexpr int lane_group(int lane) {
  return lane >> 2;
}
WF_FLASH_HD constexpr int lane_in_group(int lane) {
  return lane & 3;
}

// A (16 x 16, row-major): element e (0..7) of a lane; register e / 2 holds elements e and e + 1,
// the even one in the low half.
WF_FLASH_HD constexpr Coord mma_a_coord(int lane, int e) {
  return {lane_group(lane) + ((e >> 1) & 1) * 8, lane_in_group(lane) * 2 + (e & 1) + (e >> 2) * 8};
}
// B (16 x 8, K x N, "col" operand): element e (0..3), register e / 2.
WF_FLASH_HD constexpr Coord mma_b_coord(int lane, int e) {
  return {lane_in_group(lane) * 2 + (e & 1) + (e >> 1) * 8, lane_group(lane)};
}
// C and D (16 x 8, f32): element e (0..3), one register each.
WF_FLASH_HD constexpr Coord mma_c_coord(int lane, int e) {
  return {lane_group(lane) + (e >> 1) * 8, lane_in_group(lane) * 2 + (e & 1)};
}

// The score accumulators of one warp (16 rows x 8 * n_tiles columns, tile j in C layout) become the
// A operand of the next product (P V) without leaving registers: A register r of k-chunk kc packs
// C elements (2 * (r % 2), 2 * (r % 2) + 1) of n-tile 2 * kc + r / 2.
WF_FLASH_HD constexpr int p_to_a_tile(int kc, int reg) {
  return 2 * kc + reg / 2;
}
WF_FLASH_HD constexpr int p_to_a_first_elem(int reg) {
  return 2 * (reg % 2);
}

// ---- ldmatrix.x4 ----------------------------------------------------------------------------------
// Lane l supplies the row address of row l % 8 of matrix l / 8; after the load, register m of
// lane l holds two elements of matrix m: without .trans (row l / 4, columns 2 (l % 4) + {0, 1}),
// with .trans (rows 2 (l % 4) + {0, 1}, column l / 4), in stored coordinates.
WF_FLASH_HD constexpr Coord ldmatrix_elem(int lane, int e, bool trans) {
  return trans ? Coord{lane_in_group(lane) * 2 + e, lane_group(lane)}
               : Coord{lane_group(lane), lane_in_group(lane) * 2 + e};
}

// Where each lane points ldmatrix.x4, as (row, col) of the stored 16 x 16 block, for the four
// operand shapes of the kernels:
//  - a_rowmajor: an A operand stored [m][k] (Q, K, V rows of the warp), no .trans; registers =
//    a0..a3.
//  - b_nk: two B operands (n-tiles n0, n0 + 8) stored [n][k] (K for Q K^T, Q for K Q^T), no .trans;
//    registers = (b0, b1) of n-tile 0, then of n-tile 1.
//  - b_kn: two B operands stored [k][n] (V for P V, dO for P^T dO, Q for dS^T Q, K for dS K), with
//    .trans; registers as b_nk.
//  - a_km: an A operand stored transposed, [k][m] (dS from the dS^T tile), with .trans; registers =
//    a0..a3.
WF_FLASH_HD constexpr Coord ldsm_a_rowmajor(int lane) {
  return {(lane & 7) + ((lane >> 3) & 1) * 8, (lane >> 4) * 8};
}
WF_FLASH_HD constexpr Coord ldsm_b_nk(int lane) {
  return {(lane & 7) + (lane >> 4) * 8, ((lane >> 3) & 1) * 8};
}
WF_FLASH_HD constexpr Coord ldsm_b_kn(int lane) {
  return {(lane & 7) + ((lane >> 3) & 1) * 8, (lane >> 4) * 8};
}
WF_FLASH_HD constexpr Coord ldsm_a_km(int lane) {
  return {(lane & 7) + (lane >> 4) * 8, ((lane >> 3) & 1) * 8};
}

// ---- Shared-memory tiles --------------------------------------------------------------------------
// A tile of `cols` 16-bit elements per row (32, or a multiple of 64) is stored in 16-byte chunks
// whose index is XORed with a function of the row, so that the 8 rows an ldmatrix phase reads at
// one logical chunk, and the chunks a warp's stores write, fall in distinct 16-byte bank groups:
// row % 8 when a row spans 128 bytes or more; (row / 2) % 4 for 32 columns (two rows share one
// 128-byte line). Returns the element offset of (row, col) in the tile.
WF_FLASH_HD constexpr int swizzle(int row, int col, int cols) {
  const int flip = cols >= 64 ? (row & 7) : ((row >> 1) & 3);
  return row * cols + (((col >> 3) ^ flip) << 3) + (col & 7);
}

// ---- Blocks and masks -----------------------------------------------------------------------------
WF_FLASH_HD constexpr int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Contiguous positions: query i is at q_offset + i, key j at k_offset + j; causal keeps key <= query.
// Keys a causal query block [m0, m0 + block_m) needs: [0, the returned end).
WF_FLASH_HD constexpr int64_t causal_key_end(int64_t m0, int block_m, int64_t q_rows, int64_t k_rows, int64_t q_offset,
                                             int64_t k_offset) {
  const int64_t last_query = q_offset + (m0 + block_m < q_rows ? m0 + block_m : q_rows) - 1;
  const int64_t end = last_query - k_offset + 1;
  return end < 0 ? 0 : (end > k_rows ? k_rows : end);
}
// The first query a causal key block starting at n0 is seen by (q_rows when none).
WF_FLASH_HD constexpr int64_t causal_query_begin(int64_t n0, int64_t q_rows, int64_t q_offset, int64_t k_offset) {
  const int64_t first = k_offset + n0 - q_offset;
  return first < 0 ? 0 : (first > q_rows ? q_rows : first);
}
// Whether a (query block, key block) pair holds any masked element (so the kernel must test each):
// the causal diagonal or the end of the keys. Rows past q_rows are never written, so need no mask.
WF_FLASH_HD constexpr bool block_needs_mask(bool causal, int64_t m0, int64_t n0, int block_n, int64_t k_rows,
                                            int64_t q_offset, int64_t k_offset) {
  return n0 + block_n > k_rows || (causal && k_offset + n0 + block_n - 1 > q_offset + m0);
}

// GQA: local query head h (global q_head_offset + h) reads the stored kv head returned here.
WF_FLASH_HD constexpr int kv_head_of(int h, int q_head_offset, int kv_head_offset, int group) {
  return (q_head_offset + h) / group - kv_head_offset;
}
// The local query heads [first, last) reading stored kv head kvh.
WF_FLASH_HD constexpr int q_heads_first(int kvh, int q_head_offset, int kv_head_offset, int group) {
  const int first = (kvh + kv_head_offset) * group - q_head_offset;
  return first < 0 ? 0 : first;
}
WF_FLASH_HD constexpr int q_heads_last(int kvh, int heads, int q_head_offset, int kv_head_offset, int group) {
  const int last = (kvh + kv_head_offset + 1) * group - q_head_offset;
  return last > heads ? heads : (last < 0 ? 0 : last);
}

// ---- Tile shapes -----------------------------------------------------------------------------------
// Forward: kWarps warps of 16 query rows each; keys in tiles of kBlockN through kStages buffers.
struct ForwardTiles {
  static constexpr int kWarps = 8, kBlockM = 16 * kWarps, kBlockN = 64, kStages = 2;
};
// Backward: a block owns kBlockN keys (16 per warp) and walks query tiles of kBlockQ rows (fewer
// for head_dim 128, where the dK and dV accumulators take half the registers).
template <int D>
struct BackwardTiles {
  static constexpr int kWarps = 4, kBlockN = 16 * kWarps, kBlockQ = D >= 128 ? 32 : 64, kStages = 2;
};

template <int D>
constexpr int forward_shared_bytes() {
  return (ForwardTiles::kBlockM * D + 2 * ForwardTiles::kStages * ForwardTiles::kBlockN * D) * 2;
}
template <int D>
constexpr int backward_shared_bytes() {
  using B = BackwardTiles<D>;
  return (2 * B::kBlockN * D + 2 * B::kStages * B::kBlockQ * D + B::kBlockN * B::kBlockQ) * 2 +
         2 * B::kStages * B::kBlockQ * 4;
}

}  // namespace wallfacer::runtime::cuda::flash
