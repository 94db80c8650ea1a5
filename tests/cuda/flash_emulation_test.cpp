// The tile algorithm of the tensor-core kernels (runtime/cuda/flash_forward.cu and
// flash_backward.cu) run on the CPU: the same loop structure, the same flash_layout.hpp functions
// for every index, shared-memory tiles stored through the same swizzle, ldmatrix and
// mma.sync.m16n8k16 emulated lane by lane from the PTX ISA's descriptions, and the roundings to
// bf16 or fp16 where the kernels round (P and dS before their products). Compared with the fp64 naive
// reference: with no rounding the only differences are fp32 sums (tolerance 1e-5), with rounding
// the tolerances of scripts/gpu-check. This checks the index arithmetic as composed by
// the kernels, not the device code itself, which only a GPU run (scripts/gpu-check) checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include <wallfacer/runtime/reference_attention.hpp>
#include <wallfacer/runtime/tensor.hpp>

#include "flash_layout.hpp"

namespace {

using namespace wallfacer::runtime::cuda::flash;

constexpr float kLog2e = 1.4426950408889634f;

float round_bf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even (finite inputs)
  bits &= 0xffff0000u;
  std::memcpy(&x, &bits, 4);
  return x;
}

enum class Rounding { None, Bf16, Fp16 };

struct Problem {
  int64_t rows = 0;  // queries = keys
  int heads = 0, kv_heads = 0, d = 0;
  bool causal = false;
  Rounding rounding = Rounding::None;
  std::vector<float> q, k, v, dO;  // already rounded
  // Token positions of the rows (queries and keys alike), empty for 0 .. rows-1: with positions
  // the kernels test every element and skip no tile.
  std::vector<int64_t> pos;
  int64_t position(int64_t row) const { return pos.empty() ? row : pos[row]; }
  float round(float x) const {
    if (rounding == Rounding::Bf16) return round_bf16(x);
    if (rounding == Rounding::Fp16) return float(_Float16(x));  // IEEE binary16, round to nearest even
    return x;
  }
  float scale() const { return 1.0f / std::sqrt(float(d)); }
};

// A swizzled shared-memory tile of 16-bit values (held as floats).
struct Tile {
  int rows, cols;
  std::vector<float> mem;
  Tile(int r, int c) : rows(r), cols(c), mem(size_t(r) * c, 0.0f) {}
};

// load_tile_async: rows [row0, row0 + tile rows) of a [rows][stride] matrix from column `first`.
void load_tile(Tile& t, const std::vector<float>& src, int64_t row0, int64_t rows, int64_t stride, int64_t first) {
  for (int r = 0; r < t.rows; ++r)
    for (int c = 0; c < t.cols; ++c)
      t.mem[swizzle(r, c, t.cols)] = row0 + r < rows ? src[(row0 + r) * stride + first + c] : 0.0f;
}

struct Regs {  // four 32-bit registers of two 16-bit values, per lane
  float v[32][4][2];
};
struct Acc {  // one m16n8 fp32 accumulator, per lane
  float v[32][4] = {};
};

Regs ldsm(const Tile& t, Coord (*pattern)(int), int row0, int col0, bool trans) {
  int address[32];
  for (int lane = 0; lane < 32; ++lane) {
    const Coord c = pattern(lane);
    address[lane] = swizzle(row0 + c.row, col0 + c.col, t.cols);
  }
  Regs out;
  for (int lane = 0; lane < 32; ++lane)
    for (int m = 0; m < 4; ++m)
      for (int e = 0; e < 2; ++e) {
        const Coord c = ldmatrix_elem(lane, e, trans);
        out.v[lane][m][e] = t.mem[address[8 * m + c.row] + c.col];
      }
  return out;
}

// c += A B with B from registers b_reg, b_reg + 1 of `b` (the kernels' b[0], b[1] or b[2], b[3]).
void mma(Acc& c, const Regs& a, const Regs& b, int b_reg) {
  double A[16][16], B[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    for (int e = 0; e < 8; ++e) {
      const Coord x = mma_a_coord(lane, e);
      A[x.row][x.col] = a.v[lane][e / 2][e % 2];
    }
    for (int e = 0; e < 4; ++e) {
      const Coord x = mma_b_coord(lane, e);
      B[x.row][x.col] = b.v[lane][b_reg + e / 2][e % 2];
    }
  }
  for (int lane = 0; lane < 32; ++lane)
    for (int e = 0; e < 4; ++e) {
      const Coord x = mma_c_coord(lane, e);
      double sum = 0;
      for (int kk = 0; kk < 16; ++kk)
        sum += A[x.row][kk] * B[kk][x.col];
      c.v[lane][e] = float(c.v[lane][e] + sum);
    }
}

// Accumulators read as the A operand (p_to_a), rounded as Ty::pack rounds.
Regs accumulators_as_a(const Problem& p, const std::vector<Acc>& s, int kc) {
  Regs a;
  for (int lane = 0; lane < 32; ++lane)
    for (int r = 0; r < 4; ++r)
      for (int e = 0; e < 2; ++e)
        a.v[lane][r][e] = p.round(s[p_to_a_tile(kc, r)].v[lane][p_to_a_first_elem(r) + e]);
  return a;
}

// acc (n8 tiles) += A (16 rows of a [m][k] tile) B^T (rows of a [n][k] tile), D columns deep.
void rows_times_rows(std::vector<Acc>& acc, const Tile& a_tile, int a_row0, const Tile& b_tile, int d) {
  for (int kk = 0; kk < d / 16; ++kk) {
    const Regs a = ldsm(a_tile, ldsm_a_rowmajor, a_row0, kk * 16, false);
    for (size_t np = 0; np < acc.size() / 2; ++np) {
      const Regs b = ldsm(b_tile, ldsm_b_nk, int(np) * 16, kk * 16, false);
      mma(acc[2 * np], a, b, 0);
      mma(acc[2 * np + 1], a, b, 2);
    }
  }
}

// acc += C (accumulators, kc chunks of 16 columns) B (a [k][n] tile).
void acc_times_kn(const Problem& p, std::vector<Acc>& acc, const std::vector<Acc>& c, const Tile& b_tile) {
  for (size_t kc = 0; kc < c.size() / 2; ++kc) {
    const Regs a = accumulators_as_a(p, c, int(kc));
    for (size_t np = 0; np < acc.size() / 2; ++np) {
      const Regs b = ldsm(b_tile, ldsm_b_kn, int(kc) * 16, int(np) * 16, true);
      mma(acc[2 * np], a, b, 0);
      mma(acc[2 * np + 1], a, b, 2);
    }
  }
}

// The online softmax of one warp (online_softmax in the kernel): the quad (4 lanes of a group)
// shares each row's max; l_run stays per lane until the end.
struct RowState {
  float m[32][2], l[32][2];
  RowState() {
    std::fill(&m[0][0], &m[0][0] + 64, -INFINITY);
    std::fill(&l[0][0], &l[0][0] + 64, 0.0f);
  }
};
void emulate_online_softmax(std::vector<Acc>& s, std::vector<Acc>& acc, RowState& st) {
  float local[32][2];
  for (int lane = 0; lane < 32; ++lane)
    for (int r = 0; r < 2; ++r) {
      local[lane][r] = st.m[lane][r];
      for (const Acc& t : s)
        local[lane][r] = std::max({local[lane][r], t.v[lane][2 * r], t.v[lane][2 * r + 1]});
    }
  for (int lane = 0; lane < 32; ++lane)
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
      for (int x = lane & ~3; x < (lane & ~3) + 4; ++x)
        mx = std::max(mx, local[x][r]);
      const float base = mx == -INFINITY ? 0.0f : mx;
      const float factor = std::exp2(st.m[lane][r] - base);
      st.m[lane][r] = mx;
      float sum = 0;
      for (Acc& t : s)
        for (int e = 2 * r; e < 2 * r + 2; ++e) {
          t.v[lane][e] = std::exp2(t.v[lane][e] - base);
          sum += t.v[lane][e];
        }
      st.l[lane][r] = st.l[lane][r] * factor + sum;
      for (Acc& a : acc) {
        a.v[lane][2 * r] *= factor;
        a.v[lane][2 * r + 1] *= factor;
      }
    }
}

// One key tile of one warp: S = Q K^T, scale, mask, softmax, O += P V.
void emulate_forward_tile(const Problem& p, const std::vector<Regs>& qf, const Tile& sK, const Tile& sV, int64_t m0,
                          int64_t n0, int warp, std::vector<Acc>& acc, RowState& rows) {
  constexpr int BN = ForwardTiles::kBlockN;
  const float scale_log2 = p.scale() * kLog2e;
  std::vector<Acc> s(BN / 8);
  for (int kk = 0; kk < p.d / 16; ++kk)
    for (int np = 0; np < BN / 16; ++np) {
      const Regs b = ldsm(sK, ldsm_b_nk, np * 16, kk * 16, false);
      mma(s[2 * np], qf[kk], b, 0);
      mma(s[2 * np + 1], qf[kk], b, 2);
    }
  const bool masked = !p.pos.empty() || block_needs_mask(p.causal, m0, n0, BN, p.rows, 0, 0);
  for (int lane = 0; lane < 32; ++lane)
    for (int j = 0; j < BN / 8; ++j)
      for (int e = 0; e < 4; ++e) {
        const Coord c = mma_c_coord(lane, e);
        const int64_t key = n0 + j * 8 + c.col, row = m0 + warp * 16 + c.row;
        const int64_t row_pos = row < p.rows ? p.position(row) : 0;
        s[j].v[lane][e] *= scale_log2;
        if (masked && !(key < p.rows && (!p.causal || p.position(key) <= row_pos))) s[j].v[lane][e] = -INFINITY;
      }
  emulate_online_softmax(s, acc, rows);
  acc_times_kn(p, acc, s, sV);
}

// flash_forward_kernel, one warp of one block at a time.
void emulate_forward(const Problem& p, std::vector<float>& o, std::vector<float>& lse) {
  constexpr int BM = ForwardTiles::kBlockM, BN = ForwardTiles::kBlockN;
  const int d = p.d;
  o.assign(size_t(p.rows) * p.heads * d, 0.0f);
  lse.assign(size_t(p.rows) * p.heads, 0.0f);
  for (int h = 0; h < p.heads; ++h)
    for (int64_t m0 = 0; m0 < p.rows; m0 += BM) {
      const int kvh = kv_head_of(h, 0, 0, p.heads / p.kv_heads);
      Tile sQ(BM, d);
      load_tile(sQ, p.q, m0, p.rows, int64_t(p.heads) * d, int64_t(h) * d);
      const int64_t n_end = p.causal && p.pos.empty() ? causal_key_end(m0, BM, p.rows, p.rows, 0, 0) : p.rows;
      for (int warp = 0; warp < ForwardTiles::kWarps; ++warp) {
        std::vector<Regs> qf;
        for (int kk = 0; kk < d / 16; ++kk)
          qf.push_back(ldsm(sQ, ldsm_a_rowmajor, warp * 16, kk * 16, false));
        std::vector<Acc> acc(d / 8);
        RowState rows;
        for (int64_t n0 = 0; n0 < n_end; n0 += BN) {
          Tile sK(BN, d), sV(BN, d);
          load_tile(sK, p.k, n0, p.rows, int64_t(p.kv_heads) * d, int64_t(kvh) * d);
          load_tile(sV, p.v, n0, p.rows, int64_t(p.kv_heads) * d, int64_t(kvh) * d);
          emulate_forward_tile(p, qf, sK, sV, m0, n0, warp, acc, rows);
        }
        for (int lane = 0; lane < 32; ++lane)
          for (int r = 0; r < 2; ++r) {
            float l = 0;
            for (int x = lane & ~3; x < (lane & ~3) + 4; ++x)
              l += rows.l[x][r];
            const int64_t row = m0 + warp * 16 + lane_group(lane) + 8 * r;
            if (row >= p.rows) continue;
            const float inv = l > 0 ? 1.0f / l : 0.0f;
            for (int dj = 0; dj < d / 8; ++dj)
              for (int e = 0; e < 2; ++e)
                o[(row * p.heads + h) * d + dj * 8 + lane_in_group(lane) * 2 + e] = acc[dj].v[lane][2 * r + e] * inv;
            if (lane_in_group(lane) == 0)
              lse[h * p.rows + row] = l > 0 ? (rows.m[lane][r] + std::log2(l)) * 0.69314718f : -INFINITY;
          }
      }
    }
}

// One query tile of the backward as the kernel walks it: which head and rows, and the tiles.
struct BackwardStep {
  int head = 0;
  int64_t m0 = 0;
  Tile sQ, sdO, sdS;
  std::vector<float> lse, D;  // the tile's columns, zero past the rows
  bool masked = false;
  BackwardStep(int d, int bq, int bn) : sQ(bq, d), sdO(bq, d), sdS(bn, bq) {}
};

// One warp's share of a step (the kernel up to its barrier): S^T, P^T, dV, dP^T, dS^T, dK, and
// dS^T into the shared tile.
void emulate_backward_warp(const Problem& p, const Tile& sK, const Tile& sV, int64_t n0, int warp, BackwardStep& step,
                           std::vector<Acc>& dk_acc, std::vector<Acc>& dv_acc) {
  const int bq = step.sQ.rows;
  const float scale_log2 = p.scale() * kLog2e;
  std::vector<Acc> st(bq / 8), dpt(bq / 8);
  rows_times_rows(st, sK, warp * 16, step.sQ, p.d);
  for (int lane = 0; lane < 32; ++lane)
    for (int j = 0; j < bq / 8; ++j)
      for (int e = 0; e < 4; ++e) {
        const Coord c = mma_c_coord(lane, e);
        const float l = step.lse[j * 8 + c.col];
        const float l2 = l == -INFINITY ? INFINITY : l * kLog2e;
        float prob = std::exp2(st[j].v[lane][e] * scale_log2 - l2);
        const int64_t key = n0 + warp * 16 + c.row, query = step.m0 + j * 8 + c.col;
        bool live = key < p.rows;
        if (live && p.causal && query < p.rows) live = p.position(key) <= p.position(query);
        if (step.masked && !live) prob = 0.0f;
        st[j].v[lane][e] = prob;
      }
  acc_times_kn(p, dv_acc, st, step.sdO);
  rows_times_rows(dpt, sV, warp * 16, step.sdO, p.d);
  for (int lane = 0; lane < 32; ++lane)
    for (int j = 0; j < bq / 8; ++j)
      for (int e = 0; e < 4; ++e) {
        const Coord c = mma_c_coord(lane, e);
        dpt[j].v[lane][e] = st[j].v[lane][e] * (dpt[j].v[lane][e] - step.D[j * 8 + c.col]);
        step.sdS.mem[swizzle(warp * 16 + c.row, j * 8 + c.col, bq)] = p.round(dpt[j].v[lane][e]);
      }
  acc_times_kn(p, dk_acc, dpt, step.sQ);
}

// add_dq: (16-row, 64-column) pieces of scale * dS K into dQ.
void emulate_add_dq(const Problem& p, const Tile& sK, const BackwardStep& step, std::vector<float>& dq) {
  const int bq = step.sQ.rows, bn = sK.rows, d = p.d;
  for (int item = 0; item < (bq / 16) * (d / 64); ++item) {
    const int rt = item / (d / 64), ch = item % (d / 64);
    std::vector<Acc> acc(8);
    for (int kc = 0; kc < bn / 16; ++kc) {
      const Regs a = ldsm(step.sdS, ldsm_a_km, kc * 16, rt * 16, true);
      for (int np = 0; np < 4; ++np) {
        const Regs b = ldsm(sK, ldsm_b_kn, kc * 16, ch * 64 + np * 16, true);
        mma(acc[2 * np], a, b, 0);
        mma(acc[2 * np + 1], a, b, 2);
      }
    }
    for (int lane = 0; lane < 32; ++lane)
      for (int j = 0; j < 8; ++j)
        for (int e = 0; e < 4; ++e) {
          const Coord c = mma_c_coord(lane, e);
          const int64_t row = step.m0 + rt * 16 + c.row;
          if (row < p.rows)
            dq[(row * p.heads + step.head) * d + ch * 64 + j * 8 + c.col] += acc[j].v[lane][e] * p.scale();
        }
  }
}

// flash_backward_kernel: one block (key block, kv head) at a time, its warps in turn within each
// step (the dS tile is complete before the dQ products, as the kernel's barrier ensures).
void emulate_backward(const Problem& p, const std::vector<float>& lse, const std::vector<float>& D,
                      std::vector<float>& dq, std::vector<float>& dk, std::vector<float>& dv) {
  constexpr int BN = BackwardTiles<64>::kBlockN, kWarps = BackwardTiles<64>::kWarps;
  const int d = p.d, group = p.heads / p.kv_heads;
  const int BQ = d >= 128 ? BackwardTiles<128>::kBlockQ : BackwardTiles<64>::kBlockQ;
  const int64_t q_stride = int64_t(p.heads) * d, kv_stride = int64_t(p.kv_heads) * d;
  dq.assign(size_t(p.rows) * q_stride, 0.0f);
  dk.assign(size_t(p.rows) * kv_stride, 0.0f);
  dv.assign(size_t(p.rows) * kv_stride, 0.0f);
  for (int kvh = 0; kvh < p.kv_heads; ++kvh)
    for (int64_t n0 = 0; n0 < p.rows; n0 += BN) {
      const int h_first = q_heads_first(kvh, 0, 0, group), h_last = q_heads_last(kvh, p.heads, 0, 0, group);
      Tile sK(BN, d), sV(BN, d);
      load_tile(sK, p.k, n0, p.rows, kv_stride, int64_t(kvh) * d);
      load_tile(sV, p.v, n0, p.rows, kv_stride, int64_t(kvh) * d);
      const int t_begin = p.causal && p.pos.empty() ? int(causal_query_begin(n0, p.rows, 0, 0) / BQ) : 0;
      const int tiles_per_head = int(ceil_div(p.rows, BQ)) - t_begin;
      std::vector<std::vector<Acc>> dk_acc(kWarps, std::vector<Acc>(d / 8)), dv_acc = dk_acc;
      for (int it = 0; it < (h_last - h_first) * tiles_per_head; ++it) {
        BackwardStep step(d, BQ, BN);
        step.head = h_first + it / tiles_per_head;
        step.m0 = int64_t(t_begin + it % tiles_per_head) * BQ;
        load_tile(step.sQ, p.q, step.m0, p.rows, q_stride, int64_t(step.head) * d);
        load_tile(step.sdO, p.dO, step.m0, p.rows, q_stride, int64_t(step.head) * d);
        for (int col = 0; col < BQ; ++col) {
          const bool in = step.m0 + col < p.rows;
          step.lse.push_back(in ? lse[step.head * p.rows + step.m0 + col] : 0.0f);
          step.D.push_back(in ? D[step.head * p.rows + step.m0 + col] : 0.0f);
        }
        step.masked = !p.pos.empty() || block_needs_mask(p.causal, step.m0, n0, BN, p.rows, 0, 0);
        for (int warp = 0; warp < kWarps; ++warp)
          emulate_backward_warp(p, sK, sV, n0, warp, step, dk_acc[warp], dv_acc[warp]);
        emulate_add_dq(p, sK, step, dq);
      }
      for (int warp = 0; warp < kWarps; ++warp)
        for (int lane = 0; lane < 32; ++lane)
          for (int j = 0; j < d / 8; ++j)
            for (int e = 0; e < 4; ++e) {
              const Coord c = mma_c_coord(lane, e);
              const int64_t key = n0 + warp * 16 + c.row;
              if (key >= p.rows) continue;
              dk[key * kv_stride + kvh * d + j * 8 + c.col] += dk_acc[warp][j].v[lane][e] * p.scale();
              dv[key * kv_stride + kvh * d + j * 8 + c.col] += dv_acc[warp][j].v[lane][e];
            }
    }
}

double relative(const std::vector<float>& got, const std::vector<double>& ref) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    diff = std::max(diff, std::abs(double(got[i]) - ref[i]));
    scale = std::max(scale, std::abs(ref[i]));
  }
  return diff / scale;
}

struct Case {
  int64_t rows;
  int heads, kv_heads, d;
  bool causal;
  Rounding rounding;
  bool shuffled = false;  // rows hold the tokens in a shuffled order, with their positions
};

// Row r of a [rows][width] tensor in token order, taken to row r of the shuffled order.
std::vector<double> shuffle_rows(const std::vector<double>& x, const std::vector<int64_t>& pos, size_t width) {
  std::vector<double> out(x.size());
  for (size_t r = 0; r < pos.size(); ++r)
    std::copy_n(x.begin() + pos[r] * width, width, out.begin() + r * width);
  return out;
}
// The same for [heads][rows] (lse).
std::vector<double> shuffle_columns(const std::vector<double>& x, const std::vector<int64_t>& pos) {
  std::vector<double> out(x.size());
  const size_t rows = pos.size();
  for (size_t h = 0; h < x.size() / rows; ++h)
    for (size_t r = 0; r < rows; ++r)
      out[h * rows + r] = x[h * rows + pos[r]];
  return out;
}

void check_case(const Case& c) {
  Problem p;
  p.rows = c.rows;
  p.heads = c.heads;
  p.kv_heads = c.kv_heads;
  p.d = c.d;
  p.causal = c.causal;
  p.rounding = c.rounding;
  auto draw = [&](size_t n, uint64_t stream, std::vector<float>& out) {
    out.resize(n);
    for (size_t i = 0; i < n; ++i)
      out[i] = p.round(float(wallfacer::runtime::seeded_uniform(7, stream, i)));
  };
  draw(size_t(c.rows) * c.heads * c.d, 0, p.q);
  draw(size_t(c.rows) * c.kv_heads * c.d, 1, p.k);
  draw(size_t(c.rows) * c.kv_heads * c.d, 2, p.v);
  draw(size_t(c.rows) * c.heads * c.d, 3, p.dO);
  auto widen = [](const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); };
  const wallfacer::reference::Shape shape{1, c.rows, c.heads, c.kv_heads, c.d, c.causal, 0};
  auto ref = wallfacer::reference::attention(shape, widen(p.q), widen(p.k), widen(p.v), widen(p.dO));
  if (c.shuffled) {  // a fixed permutation (stride 37, coprime with the case's rows)
    for (int64_t r = 0; r < c.rows; ++r)
      p.pos.push_back((r * 37 + 5) % c.rows);
    const size_t wq = size_t(c.heads) * c.d, wk = size_t(c.kv_heads) * c.d;
    auto narrow = [](const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); };
    p.q = narrow(shuffle_rows(widen(p.q), p.pos, wq));
    p.k = narrow(shuffle_rows(widen(p.k), p.pos, wk));
    p.v = narrow(shuffle_rows(widen(p.v), p.pos, wk));
    p.dO = narrow(shuffle_rows(widen(p.dO), p.pos, wq));
    ref.o = shuffle_rows(ref.o, p.pos, wq);
    ref.dq = shuffle_rows(ref.dq, p.pos, wq);
    ref.dk = shuffle_rows(ref.dk, p.pos, wk);
    ref.dv = shuffle_rows(ref.dv, p.pos, wk);
    ref.lse = shuffle_columns(ref.lse, p.pos);
  }

  std::vector<float> o, lse, dq, dk, dv;
  emulate_forward(p, o, lse);
  std::vector<float> D(size_t(c.rows) * c.heads);  // launch_backward_prep_half on the forward's O
  for (int64_t i = 0; i < c.rows; ++i)
    for (int h = 0; h < c.heads; ++h) {
      double sum = 0;
      for (int x = 0; x < c.d; ++x)
        sum += double(p.dO[(i * c.heads + h) * c.d + x]) * o[(i * c.heads + h) * c.d + x];
      D[h * c.rows + i] = float(sum);
    }
  emulate_backward(p, lse, D, dq, dk, dv);
  // fp32 sums alone stay near 1e-7; rounding P and dS gives about 2e-3 in bf16 (gpu-check's
  // tolerance: 1e-2) and 2e-4 in fp16 (2e-3).
  const double tolerance = c.rounding == Rounding::Bf16 ? 1e-2 : (c.rounding == Rounding::Fp16 ? 2e-3 : 1e-5);
  std::printf("relative errors: o %.1e, lse %.1e, dq %.1e, dk %.1e, dv %.1e (tolerance %.0e)\n", relative(o, ref.o),
              relative(lse, ref.lse), relative(dq, ref.dq), relative(dk, ref.dk), relative(dv, ref.dv), tolerance);
  EXPECT_LT(relative(o, ref.o), tolerance);
  EXPECT_LT(relative(lse, ref.lse), tolerance);
  EXPECT_LT(relative(dq, ref.dq), tolerance);
  EXPECT_LT(relative(dk, ref.dk), tolerance);
  EXPECT_LT(relative(dv, ref.dv), tolerance);
}

class FlashEmulation : public ::testing::TestWithParam<Case> {};

TEST_P(FlashEmulation, MatchesTheFp64Reference) {
  check_case(GetParam());
}

// Uneven lengths (partial tiles of queries and keys), causal and full, MHA and GQA, both head
// dims, without rounding and with bf16 or fp16 rounding; and rows in a shuffled token order with
// their positions (the kernels' path for position arrays, as zigzag and striped layouts give).
constexpr Rounding kNone = Rounding::None, kBf16 = Rounding::Bf16, kFp16 = Rounding::Fp16;
std::string case_label(const Case& c) {
  const char* rounding = c.rounding == kBf16 ? "bf16" : (c.rounding == kFp16 ? "fp16" : "exact");
  return "rows" + std::to_string(c.rows) + "_heads" + std::to_string(c.heads) + "_kv" + std::to_string(c.kv_heads) +
         "_d" + std::to_string(c.d) + (c.causal ? "_causal_" : "_full_") + rounding + (c.shuffled ? "_shuffled" : "");
}
std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return case_label(info.param);
}
void PrintTo(const Case& c, std::ostream* os) {  // for gtest: the label, not the struct's bytes
  *os << case_label(c);
}
INSTANTIATE_TEST_SUITE_P(Cases, FlashEmulation,
                         ::testing::Values(Case{100, 4, 2, 64, true, kNone}, Case{100, 4, 2, 64, true, kBf16},
                                           Case{77, 2, 1, 128, false, kNone}, Case{77, 2, 1, 128, false, kBf16},
                                           Case{150, 2, 2, 128, true, kNone}, Case{150, 2, 2, 128, true, kBf16},
                                           Case{150, 2, 2, 128, true, kFp16}, Case{64, 3, 3, 64, false, kFp16},
                                           Case{150, 2, 1, 128, true, kNone, true},
                                           Case{100, 2, 2, 64, true, kBf16, true}),
                         case_name);

}  // namespace
