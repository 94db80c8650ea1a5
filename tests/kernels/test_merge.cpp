// The log-sum-exp merge (identities, closed form, extreme values), fully masked rows leaving the
// accumulator untouched, and backward_prep against its definition.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <wallfacer/runtime/attention_kernels.hpp>

namespace wallfacer::kernels {
namespace {

template <typename T>
class MergeTest : public ::testing::Test {};
using Precisions = ::testing::Types<float, double>;
TYPED_TEST_SUITE(MergeTest, Precisions);

template <typename T>
std::vector<T> random_vector(size_t n, uint32_t seed, double lo, double hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<T> v(n);
  for (T& x : v)
    x = static_cast<T>(dist(rng));
  return v;
}

constexpr int64_t kRows = 5;
constexpr int kHeads = 3, kDim = 8;

TYPED_TEST(MergeTest, EmptyPartialIsIdentityOnBothSides) {
  using T = TypeParam;
  const std::vector<T> o = random_vector<T>(kRows * kHeads * kDim, 1, -2, 2);
  const std::vector<T> lse = random_vector<T>(kRows * kHeads, 2, -5, 5);
  std::vector<T> empty_o(o.size()), empty_lse(lse.size());
  reset_accumulator(empty_o.data(), empty_lse.data(), kRows, kHeads, kDim, 0, 0);

  std::vector<T> a_o = o, a_lse = lse;
  merge_partial(a_o.data(), a_lse.data(), empty_o.data(), empty_lse.data(), kRows, kHeads, kDim, 0, 0);
  EXPECT_EQ(a_o, o);
  EXPECT_EQ(a_lse, lse);

  std::vector<T> e_o = empty_o, e_lse = empty_lse;
  merge_partial(e_o.data(), e_lse.data(), o.data(), lse.data(), kRows, kHeads, kDim, 0, 0);
  EXPECT_EQ(e_o, o);
  EXPECT_EQ(e_lse, lse);

  merge_partial(empty_o.data(), empty_lse.data(), empty_o.data(), empty_lse.data(), kRows, kHeads, kDim, 0, 0);
  for (T x : empty_lse)
    EXPECT_EQ(x, -std::numeric_limits<T>::infinity());
  for (T x : empty_o)
    EXPECT_EQ(x, T{0});
}

TYPED_TEST(MergeTest, MatchesClosedFormAndCommutes) {
  using T = TypeParam;
  const double eps = std::is_same_v<T, float> ? 1e-6 : 1e-14;
  // Offsets up to 1000 would overflow a naive exp(lse) in either precision. The inputs' own
  // rounding at that magnitude (an ulp of the lse) bounds the attainable accuracy.
  for (double offset : {0.0, 80.0, 1000.0, -1000.0}) {
    const double tol = eps * (1 + std::abs(offset));
    const std::vector<T> oa = random_vector<T>(kRows * kHeads * kDim, 3, -1, 1);
    const std::vector<T> ob = random_vector<T>(kRows * kHeads * kDim, 4, -1, 1);
    const std::vector<T> la = random_vector<T>(kRows * kHeads, 5, offset - 3, offset + 3);
    const std::vector<T> lb = random_vector<T>(kRows * kHeads, 6, offset - 3, offset + 3);
    std::vector<T> ab_o = oa, ab_l = la, ba_o = ob, ba_l = lb;
    merge_partial(ab_o.data(), ab_l.data(), ob.data(), lb.data(), kRows, kHeads, kDim, 0, 0);
    merge_partial(ba_o.data(), ba_l.data(), oa.data(), la.data(), kRows, kHeads, kDim, 0, 0);
    for (int h = 0; h < kHeads; ++h) {
      for (int64_t i = 0; i < kRows; ++i) {
        const double a = static_cast<double>(la[h * kRows + i]) - offset;
        const double b = static_cast<double>(lb[h * kRows + i]) - offset;
        const double lse = std::log(std::exp(a) + std::exp(b));  // shifted: safe in double
        EXPECT_NEAR(ab_l[h * kRows + i], lse + offset, tol);
        EXPECT_NEAR(ab_l[h * kRows + i], ba_l[h * kRows + i], tol);
        for (int c = 0; c < kDim; ++c) {
          const size_t k = (i * kHeads + h) * kDim + c;
          const double want = std::exp(a - lse) * oa[k] + std::exp(b - lse) * ob[k];
          EXPECT_NEAR(ab_o[k], want, tol);
          EXPECT_NEAR(ab_o[k], ba_o[k], tol);
        }
      }
    }
  }
}

TYPED_TEST(MergeTest, IsAssociative) {
  using T = TypeParam;
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-13;
  const size_t n = kRows * kHeads * kDim, m = kRows * kHeads;
  const std::vector<T> o[3] = {random_vector<T>(n, 7, -1, 1), random_vector<T>(n, 8, -1, 1),
                               random_vector<T>(n, 9, -1, 1)};
  const std::vector<T> l[3] = {random_vector<T>(m, 10, -4, 4), random_vector<T>(m, 11, -4, 4),
                               random_vector<T>(m, 12, -4, 4)};
  std::vector<T> left_o = o[0], left_l = l[0], right_o = o[1], right_l = l[1];
  merge_partial(left_o.data(), left_l.data(), o[1].data(), l[1].data(), kRows, kHeads, kDim, 0, 0);
  merge_partial(left_o.data(), left_l.data(), o[2].data(), l[2].data(), kRows, kHeads, kDim, 0, 0);
  merge_partial(right_o.data(), right_l.data(), o[2].data(), l[2].data(), kRows, kHeads, kDim, 0, 0);
  std::vector<T> all_o = o[0], all_l = l[0];
  merge_partial(all_o.data(), all_l.data(), right_o.data(), right_l.data(), kRows, kHeads, kDim, 0, 0);
  for (size_t k = 0; k < n; ++k)
    EXPECT_NEAR(left_o[k], all_o[k], tol);
  for (size_t k = 0; k < m; ++k)
    EXPECT_NEAR(left_l[k], all_l[k], tol);
}

// Causal block whose queries (positions 0..149) partly precede every key (100..199): rows
// 0..99 see no key and must keep their accumulator bit for bit; tiles of 16 put rows 96..99 in
// a tile that is only partly masked.
TYPED_TEST(MergeTest, FullyMaskedRowsKeepAccumulator) {
  using T = TypeParam;
  const int d = 16, h = 2;
  const int64_t nq = 150, nk = 100;
  std::vector<int64_t> q_pos(nq), k_pos(nk);
  for (int64_t i = 0; i < nq; ++i)
    q_pos[i] = i;
  for (int64_t j = 0; j < nk; ++j)
    k_pos[j] = 100 + j;
  const std::vector<T> q = random_vector<T>(nq * h * d, 13, -1, 1);
  const std::vector<T> k = random_vector<T>(nk * h * d, 14, -1, 1);
  const std::vector<T> v = random_vector<T>(nk * h * d, 15, -1, 1);
  const std::vector<T> o0 = random_vector<T>(nq * h * d, 16, -1, 1);
  const std::vector<T> l0 = random_vector<T>(nq * h, 17, -1, 1);
  for (int tile : {0, 16}) {
    AttnShape shape;
    shape.heads = shape.kv_heads = h;
    shape.head_dim = d;
    shape.causal = true;
    shape.tile_q = shape.tile_k = tile;
    std::vector<T> o = o0, l = l0;
    attention_forward<T>({q.data(), q_pos.data(), nq}, {k.data(), v.data(), k_pos.data(), nk}, shape, o.data(),
                         l.data(), 0, 0);
    for (int hh = 0; hh < h; ++hh) {
      for (int64_t i = 0; i < nq; ++i) {
        const bool masked = i < 100;
        EXPECT_EQ(masked, l[hh * nq + i] == l0[hh * nq + i]) << "row " << i;
        for (int c = 0; c < d; ++c) {
          const size_t idx = (i * h + hh) * d + c;
          if (masked) {
            EXPECT_EQ(o[idx], o0[idx]);
          }
          EXPECT_TRUE(std::isfinite(o[idx]));
        }
      }
    }
    // The same block with the queries entirely before the keys: backward adds nothing.
    std::vector<T> lse(nq * h, T{0}), D(nq * h, T{0}), dq(nq * h * d, T{0}), dk(nk * h * d, T{0}), dv = dk;
    attention_backward<T>({q.data(), q_pos.data(), 100}, {k.data(), v.data(), k_pos.data(), nk},
                          {o0.data(), lse.data(), D.data(), nq}, shape, dq.data(), dk.data(), dv.data());
    for (T x : dq)
      EXPECT_EQ(x, T{0});
    for (T x : dk)
      EXPECT_EQ(x, T{0});
    for (T x : dv)
      EXPECT_EQ(x, T{0});
  }
}

TYPED_TEST(MergeTest, BackwardPrepIsRowDotProduct) {
  using T = TypeParam;
  const int64_t rows = 7, row_stride = 3 * kDim + 5, lse_stride = 9;
  const int heads = 3;
  const std::vector<T> o = random_vector<T>(rows * row_stride, 18, -1, 1);
  const std::vector<T> g = random_vector<T>(rows * row_stride, 19, -1, 1);
  std::vector<T> D(heads * lse_stride, T{-7});
  backward_prep(o.data(), g.data(), rows, heads, kDim, row_stride, D.data(), lse_stride);
  for (int h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < lse_stride; ++i) {
      if (i >= rows) {
        EXPECT_EQ(D[h * lse_stride + i], T{-7});  // padding untouched
        continue;
      }
      double want = 0;
      for (int c = 0; c < kDim; ++c) {
        const int64_t k = i * row_stride + h * kDim + c;
        want += static_cast<double>(o[k]) * g[k];
      }
      const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-14;
      EXPECT_NEAR(D[h * lse_stride + i], want, tol);
    }
  }
}

}  // namespace
}  // namespace wallfacer::kernels
