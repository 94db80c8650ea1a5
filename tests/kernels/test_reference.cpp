// The naive fp64 reference against closed forms (uniform weights, a single key, the causal first
// row, GQA as replicated heads) and its gradients against central finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/runtime/reference_attention.hpp>
#include "blockwise_runner.hpp"

namespace wallfacer::reference {
namespace {

using kernel_test::random_inputs;

Shape make_shape(int64_t n, int h, int h_kv, int d, bool causal) {
  Shape s;
  s.seq = n;
  s.heads = h;
  s.kv_heads = h_kv;
  s.head_dim = d;
  s.causal = causal;
  return s;
}

// All keys equal: weights are uniform over the visible keys, lse = log(count) + score.
TEST(ReferenceAttention, EqualKeysGiveUniformWeights) {
  for (bool causal : {false, true}) {
    const Shape sh = make_shape(6, 1, 1, 4, causal);
    auto in = random_inputs(sh, 1);
    for (int64_t j = 0; j < sh.seq; ++j)
      for (int c = 0; c < 4; ++c)
        in.k[j * 4 + c] = 0.25 * (c + 1);
    const Outputs out = attention(sh, in.q, in.k, in.v, {});
    EXPECT_TRUE(out.dq.empty());
    for (int64_t i = 0; i < sh.seq; ++i) {
      const int64_t count = causal ? i + 1 : sh.seq;
      double score = 0;
      for (int c = 0; c < 4; ++c)
        score += in.q[i * 4 + c] * 0.25 * (c + 1);
      score /= 2.0;  // 1/sqrt(4)
      EXPECT_NEAR(out.lse[i], std::log(double(count)) + score, 1e-12);
      for (int c = 0; c < 4; ++c) {
        double mean = 0;
        for (int64_t j = 0; j < count; ++j)
          mean += in.v[j * 4 + c] / count;
        EXPECT_NEAR(out.o[i * 4 + c], mean, 1e-12);
      }
    }
  }
}

// One key: the output is its value row whatever the query, and dV collects all of dO.
TEST(ReferenceAttention, SingleKeyReturnsValueRow) {
  const Shape sh = make_shape(1, 3, 1, 5, false);
  const auto in = random_inputs(sh, 2);
  const Outputs out = attention(sh, in.q, in.k, in.v, in.dO);
  for (int h = 0; h < 3; ++h) {
    double score = 0;
    for (int c = 0; c < 5; ++c)
      score += in.q[h * 5 + c] * in.k[c] / std::sqrt(5.0);
    EXPECT_NEAR(out.lse[h], score, 1e-12);
    for (int c = 0; c < 5; ++c) {
      EXPECT_NEAR(out.o[h * 5 + c], in.v[c], 1e-12);
      EXPECT_NEAR(out.dq[h * 5 + c], 0.0, 1e-12);  // softmax over one key has no gradient
    }
  }
  for (int c = 0; c < 5; ++c)
    EXPECT_NEAR(out.dv[c], in.dO[c] + in.dO[5 + c] + in.dO[10 + c], 1e-12);
}

TEST(ReferenceAttention, CausalFirstRowSeesOnlyItself) {
  const Shape sh = make_shape(5, 2, 2, 3, true);
  const auto in = random_inputs(sh, 3);
  const Outputs out = attention(sh, in.q, in.k, in.v, {});
  for (int h = 0; h < 2; ++h)
    for (int c = 0; c < 3; ++c)
      EXPECT_NEAR(out.o[h * 3 + c], in.v[h * 3 + c], 1e-12);
}

// GQA equals MHA with each kv head repeated `group` times; dK/dV sum over the group.
TEST(ReferenceAttention, GqaEqualsReplicatedHeads) {
  const Shape gqa = make_shape(9, 4, 2, 3, true);
  const Shape mha = make_shape(9, 4, 4, 3, true);
  const auto in = random_inputs(gqa, 4);
  std::vector<double> k4(9 * 4 * 3), v4(k4.size());
  for (int64_t j = 0; j < 9; ++j)
    for (int h = 0; h < 4; ++h)
      for (int c = 0; c < 3; ++c) {
        k4[(j * 4 + h) * 3 + c] = in.k[(j * 2 + h / 2) * 3 + c];
        v4[(j * 4 + h) * 3 + c] = in.v[(j * 2 + h / 2) * 3 + c];
      }
  const Outputs a = attention(gqa, in.q, in.k, in.v, in.dO);
  const Outputs b = attention(mha, in.q, k4, v4, in.dO);
  for (size_t i = 0; i < a.o.size(); ++i)
    EXPECT_NEAR(a.o[i], b.o[i], 1e-13);
  for (size_t i = 0; i < a.dq.size(); ++i)
    EXPECT_NEAR(a.dq[i], b.dq[i], 1e-13);
  for (int64_t j = 0; j < 9; ++j)
    for (int g = 0; g < 2; ++g)
      for (int c = 0; c < 3; ++c) {
        const double sum = b.dk[(j * 4 + 2 * g) * 3 + c] + b.dk[(j * 4 + 2 * g + 1) * 3 + c];
        EXPECT_NEAR(a.dk[(j * 2 + g) * 3 + c], sum, 1e-13);
      }
}

// Loss = sum(O * dO); its gradient by central differences must equal dq, dk, dv.
TEST(ReferenceAttention, GradientsMatchFiniteDifferences) {
  for (bool causal : {true, false}) {
    const Shape sh = make_shape(5, 2, 1, 3, causal);
    auto in = random_inputs(sh, 5);
    const Outputs out = attention(sh, in.q, in.k, in.v, in.dO);
    auto loss = [&] {
      const Outputs o = attention(sh, in.q, in.k, in.v, {});
      double s = 0;
      for (size_t i = 0; i < o.o.size(); ++i)
        s += o.o[i] * in.dO[i];
      return s;
    };
    const double eps = 1e-6;
    auto check = [&](std::vector<double>& x, const std::vector<double>& grad, const char* name) {
      for (size_t i = 0; i < x.size(); ++i) {
        const double saved = x[i];
        x[i] = saved + eps;
        const double up = loss();
        x[i] = saved - eps;
        const double down = loss();
        x[i] = saved;
        EXPECT_NEAR(grad[i], (up - down) / (2 * eps), 1e-7) << name << "[" << i << "]";
      }
    };
    check(in.q, out.dq, "dq");
    check(in.k, out.dk, "dk");
    check(in.v, out.dv, "dv");
  }
}

TEST(ReferenceAttention, RejectsMismatchedSizes) {
  const Shape sh = make_shape(4, 2, 1, 3, true);
  const auto in = random_inputs(sh, 6);
  EXPECT_THROW(attention(sh, in.q, in.v, {1.0}, {}), InputError);
  EXPECT_THROW(attention(make_shape(4, 3, 2, 3, true), in.q, in.k, in.v, {}), InputError);
}

}  // namespace
}  // namespace wallfacer::reference
