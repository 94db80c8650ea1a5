// The index arithmetic of the tensor-core attention kernels (runtime/cuda/flash_layout.hpp), on
// the CPU: the mma.sync.m16n8k16 fragment maps against the PTX ISA's tables as written there,
// every ldmatrix addressing pattern through an emulation of ldmatrix's documented semantics, the
// swizzle (a bijection, conflict-free per 8-lane phase), the causal block ranges and the GQA head
// mapping against brute force.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "flash_layout.hpp"

namespace {

using namespace wallfacer::runtime::cuda::flash;

// The PTX ISA table for the A operand of m16n8k16 (.f16/.bf16), in its own words: row = groupID
// for a_i with i < 2 or 4 <= i < 6, groupID + 8 otherwise; col = threadID_in_group * 2 + (i & 1)
// for i < 4, plus 8 for i >= 4.
Coord ptx_a(int lane, int i) {
  const int group = lane / 4, tig = lane % 4;
  const int row = (i < 2 || (i >= 4 && i < 6)) ? group : group + 8;
  const int col = i < 4 ? tig * 2 + (i & 1) : tig * 2 + (i & 1) + 8;
  return {row, col};
}
// B: row = threadID_in_group * 2 + (i & 1) for b_i with i < 2, plus 8 for i >= 2; col = groupID.
Coord ptx_b(int lane, int i) {
  const int group = lane / 4, tig = lane % 4;
  return {i < 2 ? tig * 2 + (i & 1) : tig * 2 + (i & 1) + 8, group};
}
// C/D (f32): row = groupID for c0, c1, groupID + 8 for c2, c3; col = threadID_in_group * 2 + (i & 1).
Coord ptx_c(int lane, int i) {
  const int group = lane / 4, tig = lane % 4;
  return {i < 2 ? group : group + 8, tig * 2 + (i & 1)};
}

template <typename Map>
void expect_cover_once(int rows, int cols, int per_lane, Map map) {
  std::vector<int> seen(rows * cols, 0);
  for (int lane = 0; lane < 32; ++lane)
    for (int e = 0; e < per_lane; ++e) {
      const Coord c = map(lane, e);
      ASSERT_GE(c.row, 0);
      ASSERT_LT(c.row, rows);
      ASSERT_GE(c.col, 0);
      ASSERT_LT(c.col, cols);
      ++seen[c.row * cols + c.col];
    }
  for (int n : seen)
    EXPECT_EQ(n, 1);
}

TEST(FlashLayout, MmaFragmentsMatchThePtxTablesAndCoverEachElementOnce) {
  for (int lane = 0; lane < 32; ++lane) {
    for (int e = 0; e < 8; ++e) {
      EXPECT_EQ(mma_a_coord(lane, e).row, ptx_a(lane, e).row) << lane << " " << e;
      EXPECT_EQ(mma_a_coord(lane, e).col, ptx_a(lane, e).col) << lane << " " << e;
    }
    for (int e = 0; e < 4; ++e) {
      EXPECT_EQ(mma_b_coord(lane, e).row, ptx_b(lane, e).row);
      EXPECT_EQ(mma_b_coord(lane, e).col, ptx_b(lane, e).col);
      EXPECT_EQ(mma_c_coord(lane, e).row, ptx_c(lane, e).row);
      EXPECT_EQ(mma_c_coord(lane, e).col, ptx_c(lane, e).col);
    }
  }
  expect_cover_once(16, 16, 8, mma_a_coord);
  expect_cover_once(16, 8, 4, mma_b_coord);
  expect_cover_once(16, 8, 4, mma_c_coord);
  // Spot values from the tables: lane 5 is group 1, thread 1.
  EXPECT_EQ(mma_a_coord(5, 7).row, 9);
  EXPECT_EQ(mma_a_coord(5, 7).col, 11);
  EXPECT_EQ(mma_b_coord(5, 3).row, 11);
  EXPECT_EQ(mma_b_coord(5, 3).col, 1);
}

TEST(FlashLayout, ScoreAccumulatorsAreTheAOperandOfTheNextProduct) {
  // A 16 x 64 score tile in C layout (8 n-tiles) read as four 16 x 16 A operands.
  for (int lane = 0; lane < 32; ++lane)
    for (int kc = 0; kc < 4; ++kc)
      for (int r = 0; r < 4; ++r)
        for (int e = 0; e < 2; ++e) {
          const int tile = p_to_a_tile(kc, r);
          const Coord c = mma_c_coord(lane, p_to_a_first_elem(r) + e);
          const Coord a = mma_a_coord(lane, 2 * r + e);
          EXPECT_EQ(c.row, a.row);
          EXPECT_EQ(tile * 8 + c.col, kc * 16 + a.col);
        }
}

// ldmatrix.x4 as the PTX ISA describes it: lanes 8m .. 8m + 7 give the addresses of rows 0..7 of
// matrix m; register m of lane l then holds row l / 4, columns 2 (l % 4) + {0, 1} of matrix m, or
// with .trans the transposed element. `address` are element offsets into `memory`.
struct Loaded {
  int reg[32][4][2];
};
Loaded emulate_ldmatrix_x4(const std::vector<int>& memory, const int (&address)[32], bool trans) {
  Loaded out{};
  for (int lane = 0; lane < 32; ++lane)
    for (int m = 0; m < 4; ++m)
      for (int e = 0; e < 2; ++e) {
        const Coord c = ldmatrix_elem(lane, e, trans);  // (stored row, stored col) in matrix m
        out.reg[lane][m][e] = memory[address[8 * m + c.row] + c.col];
      }
  return out;
}

// Every operand pattern, from a swizzled tile whose element (r, c) holds r * 1000 + c: the loaded
// registers must be the mma fragment elements the kernels take them for.
TEST(FlashLayout, LdmatrixAddressingYieldsTheMmaFragments) {
  for (int cols : {32, 64, 128}) {
    const int rows = 64;
    std::vector<int> memory(rows * cols);
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c)
        memory[swizzle(r, c, cols)] = r * 1000 + c;
    for (int row0 = 0; row0 < rows; row0 += 16)
      for (int col0 = 0; col0 < cols; col0 += 16) {
        auto addresses = [&](Coord (*pattern)(int), int(&out)[32]) {
          for (int lane = 0; lane < 32; ++lane) {
            const Coord c = pattern(lane);
            out[lane] = swizzle(row0 + c.row, col0 + c.col, cols);
          }
        };
        int addr[32];
        auto value = [&](int r, int c) { return (row0 + r) * 1000 + col0 + c; };
        addresses(ldsm_a_rowmajor, addr);
        const Loaded a = emulate_ldmatrix_x4(memory, addr, false);
        addresses(ldsm_b_nk, addr);
        const Loaded bnk = emulate_ldmatrix_x4(memory, addr, false);
        addresses(ldsm_b_kn, addr);
        const Loaded bkn = emulate_ldmatrix_x4(memory, addr, true);
        addresses(ldsm_a_km, addr);
        const Loaded akm = emulate_ldmatrix_x4(memory, addr, true);
        for (int lane = 0; lane < 32; ++lane)
          for (int m = 0; m < 4; ++m)
            for (int e = 0; e < 2; ++e) {
              const Coord fa = mma_a_coord(lane, 2 * m + e);  // A stored [m][k]; A stored [k][m]
              EXPECT_EQ(a.reg[lane][m][e], value(fa.row, fa.col));
              EXPECT_EQ(akm.reg[lane][m][e], value(fa.col, fa.row));
              const Coord fb = mma_b_coord(lane, 2 * (m % 2) + e);  // n-tile m / 2 of two
              const int n = fb.col + 8 * (m / 2);
              EXPECT_EQ(bnk.reg[lane][m][e], value(n, fb.row));  // B stored [n][k]
              EXPECT_EQ(bkn.reg[lane][m][e], value(fb.row, n));  // B stored [k][n]
            }
      }
  }
}

TEST(FlashLayout, SwizzleIsABijectionWithinEachRowKeepingChunksWhole) {
  for (int cols : {32, 64, 128}) {
    const int rows = 64;
    std::vector<int> seen(rows * cols, 0);
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) {
        const int off = swizzle(r, c, cols);
        ASSERT_GE(off, r * cols);
        ASSERT_LT(off, (r + 1) * cols);
        ++seen[off];
        if (c % 8 != 0) {
          EXPECT_EQ(off, swizzle(r, c - 1, cols) + 1);  // 16-byte chunks stay contiguous
        }
      }
    for (int n : seen)
      EXPECT_EQ(n, 1);
  }
}

// Shared memory has 32 four-byte banks; a 16-byte access takes 4 of them. Eight 16-byte accesses
// (one ldmatrix phase, or 8 lanes of a 16-byte store) are conflict-free when they fall in the 8
// distinct 16-byte groups of a 128-byte line.
bool conflict_free_16(const std::vector<int>& element_offsets) {
  std::set<int> groups;
  for (int off : element_offsets)
    groups.insert((off * 2 / 16) % 8);
  return groups.size() == element_offsets.size();
}

TEST(FlashLayout, SwizzledTilesAreConflictFreeForLdmatrixAndCpAsync) {
  for (int cols : {32, 64, 128})
    for (auto pattern : {ldsm_a_rowmajor, ldsm_b_nk, ldsm_b_kn, ldsm_a_km})
      for (int row0 = 0; row0 < 64; row0 += 16)
        for (int col0 = 0; col0 < cols; col0 += 16)
          for (int phase = 0; phase < 4; ++phase) {
            std::vector<int> offs;
            for (int lane = 8 * phase; lane < 8 * phase + 8; ++lane) {
              const Coord c = pattern(lane);
              offs.push_back(swizzle(row0 + c.row, col0 + c.col, cols));
            }
            EXPECT_TRUE(conflict_free_16(offs)) << cols << " " << row0 << " " << col0 << " " << phase;
          }
  // cp.async writes as load_tile_async issues them: thread t writes chunk t % (D / 8) of row
  // t / (D / 8); every 8 consecutive threads form one phase.
  for (int cols : {64, 128})
    for (int first = 0; first < 256; first += 8) {
      std::vector<int> offs;
      for (int t = first; t < first + 8; ++t)
        offs.push_back(swizzle(t / (cols / 8), (t % (cols / 8)) * 8, cols));
      EXPECT_TRUE(conflict_free_16(offs)) << cols << " " << first;
    }
}

TEST(FlashLayout, ScoreStoresIntoTheDsTileAreConflictFree) {
  // The backward's 4-byte stores of dS^T: lane writes the pair (row 16 w + group (+ 8), col 8 j + 2 t).
  for (int cols : {32, 64})
    for (int j = 0; j < cols / 8; ++j)
      for (int half = 0; half < 2; ++half) {
        std::set<int> banks;
        for (int lane = 0; lane < 32; ++lane) {
          const Coord c = mma_c_coord(lane, 2 * half);
          banks.insert((swizzle(16 + c.row, j * 8 + c.col, cols) * 2 / 4) % 32);
        }
        EXPECT_EQ(banks.size(), 32u) << cols << " " << j;
      }
}

bool live(bool causal, int64_t i, int64_t j, int64_t k_rows, int64_t q_off, int64_t k_off) {
  return j < k_rows && (!causal || k_off + j <= q_off + i);
}

TEST(FlashLayout, CausalBlockRangesMatchBruteForce) {
  for (int64_t q_rows : {1, 37, 64, 130})
    for (int64_t k_rows : {1, 50, 64, 129})
      for (int64_t q_off : {0, 17, 64})
        for (int64_t k_off : {0, 23, 64}) {
          for (int bm : {16, 64})
            for (int64_t m0 = 0; m0 < q_rows; m0 += bm) {
              int64_t end = 0;
              for (int64_t i = m0; i < std::min<int64_t>(m0 + bm, q_rows); ++i)
                for (int64_t j = 0; j < k_rows; ++j)
                  if (live(true, i, j, k_rows, q_off, k_off)) end = std::max(end, j + 1);
              EXPECT_EQ(causal_key_end(m0, bm, q_rows, k_rows, q_off, k_off), end);
              for (int bn : {32, 64})
                for (int64_t n0 = 0; n0 < k_rows; n0 += bn)
                  for (bool causal : {false, true}) {
                    bool masked = false;
                    for (int64_t i = m0; i < m0 + bm; ++i)
                      for (int64_t j = n0; j < n0 + bn; ++j)
                        masked = masked || !live(causal, i, j, k_rows, q_off, k_off);
                    EXPECT_EQ(block_needs_mask(causal, m0, n0, bn, k_rows, q_off, k_off), masked);
                  }
            }
          for (int64_t n0 = 0; n0 < k_rows; n0 += 32) {
            int64_t first = q_rows;
            for (int64_t i = 0; i < q_rows && first == q_rows; ++i)
              for (int64_t j = n0; j < std::min<int64_t>(n0 + 32, k_rows); ++j)
                if (live(true, i, j, k_rows, q_off, k_off)) first = std::min(first, i);
            EXPECT_EQ(causal_query_begin(n0, q_rows, q_off, k_off), first);
          }
        }
}

TEST(FlashLayout, GqaHeadsMatchBruteForce) {
  for (int group : {1, 2, 4, 8})
    for (int q_off : {0, 2, 4, 6})
      for (int heads : {1, 2, 4, 8}) {
        const int kv_off = q_off / group;
        const int kv_heads = (q_off + heads - 1) / group - kv_off + 1;
        for (int h = 0; h < heads; ++h) {
          const int kvh = kv_head_of(h, q_off, kv_off, group);
          EXPECT_EQ(kvh, (q_off + h) / group - kv_off);
          EXPECT_GE(kvh, 0);
          EXPECT_LT(kvh, kv_heads);
        }
        for (int kvh = 0; kvh < kv_heads; ++kvh) {
          std::vector<int> mine;
          for (int h = 0; h < heads; ++h)
            if (kv_head_of(h, q_off, kv_off, group) == kvh) mine.push_back(h);
          const int first = q_heads_first(kvh, q_off, kv_off, group);
          const int last = q_heads_last(kvh, heads, q_off, kv_off, group);
          ASSERT_FALSE(mine.empty());
          EXPECT_EQ(first, mine.front());
          EXPECT_EQ(last, mine.back() + 1);
          EXPECT_EQ(last - first, int(mine.size()));
        }
      }
}

TEST(FlashLayout, TileCountsAndSharedMemoryFitTheDevices) {
  EXPECT_EQ(ceil_div(8192, 128), 64);
  EXPECT_EQ(ceil_div(777, 64), 13);
  // sm_80 allows 163 KiB of shared memory per block, sm_90 227 KiB (CUDA C++ Programming Guide,
  // "Technical Specifications per Compute Capability").
  EXPECT_LE(forward_shared_bytes<128>(), 163 * 1024);
  EXPECT_LE(backward_shared_bytes<128>(), 163 * 1024);
  EXPECT_EQ(forward_shared_bytes<128>(), (128 * 128 + 2 * 2 * 64 * 128) * 2);
}

}  // namespace
