// Blockwise kernels (fp32 and fp64) against the naive fp64 reference over many blockings: one
// block, uneven blocks, shuffled key-block order, partials merged afterwards, head ranges, small
// tiles, permuted token storage (zigzag-like positions), GQA and MQA, causal and full masks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include <wallfacer/runtime/attention_kernels.hpp>
#include <wallfacer/runtime/reference_attention.hpp>
#include "blockwise_runner.hpp"

namespace wallfacer::kernel_test {
namespace {

constexpr double kTolFp64 = 1e-10;
constexpr double kTolFp32 = 1e-4;

struct Case {
  std::string name;
  reference::Shape shape;
  Blocking blocking;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

void expect_matches(const reference::Outputs& got, const reference::Outputs& want, double tol,
                    const std::string& what) {
  EXPECT_LE(max_relative_error(got.o, want.o), tol) << what << ": O";
  EXPECT_LE(max_relative_error(got.lse, want.lse), tol) << what << ": lse";
  EXPECT_LE(max_relative_error(got.dq, want.dq), tol) << what << ": dQ";
  EXPECT_LE(max_relative_error(got.dk, want.dk), tol) << what << ": dK";
  EXPECT_LE(max_relative_error(got.dv, want.dv), tol) << what << ": dV";
}

reference::Shape make_shape(int64_t n, int h, int h_kv, int d, bool causal) {
  reference::Shape s;
  s.seq = n;
  s.heads = h;
  s.kv_heads = h_kv;
  s.head_dim = d;
  s.causal = causal;
  return s;
}

// Random permutation of 0..n-1: storage rows carry arbitrary global positions.
std::vector<int64_t> random_permutation(int64_t n, uint32_t seed) {
  std::vector<int64_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937 rng(seed);
  std::shuffle(perm.begin(), perm.end(), rng);
  return perm;
}

// Zigzag storage of 2 ranks (4 chunks): rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
std::vector<int64_t> zigzag_permutation(int64_t n) {
  const int64_t c = n / 4;
  std::vector<int64_t> perm;
  for (int chunk : {0, 3, 1, 2})
    for (int64_t i = 0; i < c; ++i)
      perm.push_back(chunk * c + i);
  return perm;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (bool causal : {true, false}) {
    const std::string m = causal ? "causal" : "full";
    const int64_t n = 300;
    const reference::Shape mha = make_shape(n, 4, 4, 32, causal);
    out.push_back({m + "_one_block", mha, {.q_bounds = {0, n}, .k_bounds = {0, n}}});
    out.push_back(
        {m + "_one_block_small_tiles", mha, {.q_bounds = {0, n}, .k_bounds = {0, n}, .tile_q = 16, .tile_k = 48}});
    out.push_back(
        {m + "_uneven_blocks", mha, {.q_bounds = uneven_bounds(n, 5, 3), .k_bounds = uneven_bounds(n, 7, 4)}});
    Blocking shuffled{.q_bounds = uneven_bounds(n, 4, 5),
                      .k_bounds = uneven_bounds(n, 6, 6),
                      .shuffle_key_blocks = true,
                      .tile_q = 32,
                      .tile_k = 64,
                      .seed = 7};
    out.push_back({m + "_shuffled_key_blocks", mha, shuffled});
    shuffled.via_partials = true;
    out.push_back({m + "_shuffled_partials_merged", mha, shuffled});
    out.push_back({m + "_permuted_positions",
                   mha,
                   {.q_bounds = uneven_bounds(n, 3, 8),
                    .k_bounds = uneven_bounds(n, 5, 9),
                    .shuffle_key_blocks = true,
                    .permutation = random_permutation(n, 10),
                    .tile_q = 16,
                    .tile_k = 32,
                    .seed = 11}});
    out.push_back({m + "_zigzag_two_ranks",
                   mha,
                   {.q_bounds = {0, n / 2, n}, .k_bounds = {0, n / 2, n}, .permutation = zigzag_permutation(n)}});
    const reference::Shape gqa = make_shape(200, 8, 2, 24, causal);
    out.push_back({m + "_gqa_one_block", gqa, {.q_bounds = {0, 200}, .k_bounds = {0, 200}}});
    out.push_back({m + "_gqa_head_ranges_per_group",
                   gqa,
                   {.q_bounds = {0, 90, 200}, .k_bounds = {0, 50, 130, 200}, .head_bounds = {0, 4, 8}}});
    out.push_back({m + "_gqa_head_ranges_across_groups",
                   gqa,
                   {.q_bounds = uneven_bounds(200, 3, 12),
                    .k_bounds = uneven_bounds(200, 4, 13),
                    .head_bounds = {0, 3, 5, 8},
                    .shuffle_key_blocks = true,
                    .via_partials = true,
                    .tile_q = 16,
                    .tile_k = 40,
                    .seed = 14}});
    const reference::Shape mqa = make_shape(160, 4, 1, 64, causal);
    out.push_back(
        {m + "_mqa",
         mqa,
         {.q_bounds = uneven_bounds(160, 3, 15), .k_bounds = uneven_bounds(160, 3, 16), .head_bounds = {0, 1, 4}}});
  }
  return out;
}

class BlockwiseVsReference : public ::testing::TestWithParam<Case> {};

TEST_P(BlockwiseVsReference, Fp64MatchesReference) {
  const Case& c = GetParam();
  const Inputs in = random_inputs(c.shape, 42);
  const reference::Outputs want = reference::attention(c.shape, in.q, in.k, in.v, in.dO);
  expect_matches(run_blockwise<double>(in, c.blocking), want, kTolFp64, c.name);
}

TEST_P(BlockwiseVsReference, Fp32MatchesReference) {
  const Case& c = GetParam();
  const Inputs in = random_inputs(c.shape, 43);
  const reference::Outputs want = reference::attention(c.shape, in.q, in.k, in.v, in.dO);
  expect_matches(run_blockwise<float>(in, c.blocking), want, kTolFp32, c.name);
}

INSTANTIATE_TEST_SUITE_P(Blockings, BlockwiseVsReference, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// Scores of several hundred: exp overflows unless every step subtracts a running maximum.
TEST(BlockwiseKernels, LargeScoresStayFinite) {
  const reference::Shape shape = make_shape(128, 2, 2, 16, true);
  const Inputs in = random_inputs(shape, 5, 40.0);
  const reference::Outputs want = reference::attention(shape, in.q, in.k, in.v, in.dO);
  const Blocking b{.q_bounds = {0, 50, 128},
                   .k_bounds = {0, 30, 90, 128},
                   .shuffle_key_blocks = true,
                   .via_partials = true,
                   .tile_q = 16,
                   .tile_k = 16,
                   .seed = 3};
  expect_matches(run_blockwise<double>(in, b), want, kTolFp64, "fp64");
  expect_matches(run_blockwise<float>(in, b), want, kTolFp32, "fp32");
}

// Batched use: callers loop over batch elements with per-element pointers.
TEST(BlockwiseKernels, BatchElementsAreIndependent) {
  reference::Shape shape = make_shape(64, 2, 1, 16, true);
  shape.batch = 2;
  const Inputs in = random_inputs(shape, 9);
  const reference::Outputs want = reference::attention(shape, in.q, in.k, in.v, in.dO);
  reference::Shape one = shape;
  one.batch = 1;
  const size_t qn = in.q.size() / 2, kn = in.k.size() / 2;
  for (size_t b = 0; b < 2; ++b) {
    Inputs part{one,
                {in.q.begin() + b * qn, in.q.begin() + (b + 1) * qn},
                {in.k.begin() + b * kn, in.k.begin() + (b + 1) * kn},
                {in.v.begin() + b * kn, in.v.begin() + (b + 1) * kn},
                {in.dO.begin() + b * qn, in.dO.begin() + (b + 1) * qn}};
    const reference::Outputs got = run_blockwise<double>(part, {.q_bounds = {0, 64}, .k_bounds = {0, 20, 64}});
    EXPECT_LE(max_relative_error(got.o, {want.o.begin() + b * qn, want.o.begin() + (b + 1) * qn}), kTolFp64);
    EXPECT_LE(max_relative_error(got.dk, {want.dk.begin() + b * kn, want.dk.begin() + (b + 1) * kn}), kTolFp64);
  }
}

}  // namespace
}  // namespace wallfacer::kernel_test
