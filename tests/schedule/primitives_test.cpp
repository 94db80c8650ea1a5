// Schedule primitives and the strategy toolkit against brute force.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include <wallfacer/schedule/schedule.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include "schedule/test_plans.hpp"
#include "strategies/common.hpp"

namespace wallfacer {
namespace {

using detail::ProgramBuilder;

int64_t brute_pairs(const TokenSet& q, const TokenSet& k, Mask mask) {
  int64_t n = 0;
  for (const auto& qr : q)
    for (int64_t i = qr.begin; i < qr.end; ++i)
      for (const auto& kr : k)
        for (int64_t j = kr.begin; j < kr.end; ++j)
          n += (mask == Mask::None || j <= i) ? 1 : 0;
  return n;
}

TokenSet random_set(std::mt19937& rng, int64_t limit) {
  // Up to three disjoint ranges in random order.
  std::uniform_int_distribution<int64_t> pos(0, limit);
  std::set<int64_t> cuts;
  for (int i = 0; i < 6; ++i)
    cuts.insert(pos(rng));
  std::vector<int64_t> c(cuts.begin(), cuts.end());
  TokenSet out;
  for (size_t i = 0; i + 1 < c.size(); i += 2)
    out.push_back({c[i], c[i + 1]});
  std::shuffle(out.begin(), out.end(), rng);
  return out;
}

TEST(LivePairs, MatchesBruteForceOnRandomSets) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 400; ++trial) {
    const TokenSet q = random_set(rng, 40), k = random_set(rng, 40);
    ASSERT_EQ(live_pairs(q, k, Mask::Causal), brute_pairs(q, k, Mask::Causal)) << trial;
    ASSERT_EQ(live_pairs(q, k, Mask::None), brute_pairs(q, k, Mask::None)) << trial;
  }
}

TEST(LivePairs, DiagonalBlockIsTriangleWithDiagonal) {
  EXPECT_EQ(live_pairs({{10, 20}}, {{10, 20}}, Mask::Causal), 55);
  EXPECT_EQ(live_pairs({{0, 5}}, {{5, 9}}, Mask::Causal), 0);
  EXPECT_EQ(live_pairs({{5, 9}}, {{0, 5}}, Mask::Causal), 20);
}

TEST(BlockFlops, FollowsTheFlashAttentionConvention) {
  ScheduleDims d;
  d.batch = 3;
  d.head_dim = 64;
  const TokenSet q{{0, 100}}, k{{0, 100}};
  EXPECT_DOUBLE_EQ(block_flops(d, q, k, Mask::None, 8, Phase::Forward), 4.0 * 3 * 100 * 100 * 8 * 64);
  EXPECT_DOUBLE_EQ(block_flops(d, q, k, Mask::None, 8, Phase::Backward), 2.5 * 4.0 * 3 * 100 * 100 * 8 * 64);
  EXPECT_DOUBLE_EQ(block_flops(d, q, k, Mask::Causal, 8, Phase::Forward), 4.0 * 3 * 5050 * 8 * 64);
}

TEST(PayloadBytes, CountsScalarsAndPrecision) {
  ScheduleDims d;
  d.head_dim = 128;
  d.elem_bytes = 2;
  const FieldMask kv = field_bit(Field::K) | field_bit(Field::V);
  EXPECT_EQ(payload_bytes(d, kv, 10, 4, 2, false), 2 * 128 * 2 * 10 * 4 * 2);
  EXPECT_EQ(payload_bytes(d, kv, 10, 4, 2, true), 2 * 128 * 4 * 10 * 4 * 2);
  EXPECT_EQ(payload_bytes(d, field_bit(Field::Lse), 10, 4, 1, false), 4 * 10 * 4);
  EXPECT_EQ(fields_to_string(kv), "K|V");
}

TEST(TokenSetPool, InternsCanonicalForms) {
  TokenSetPool pool;
  const int32_t a = pool.intern({{0, 4}, {4, 8}});
  const int32_t b = pool.intern({{0, 8}});
  const int32_t c = pool.intern({{4, 8}, {0, 4}});
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(pool.get(c).size(), 2u);
  EXPECT_EQ(pool.intern({{3, 3}}), pool.intern({}));
}

// Many sets, so the table grows several times: each set keeps the id of its first interning,
// ids count up from 0 in that order, and sets of the same ranges in another order stay distinct.
TEST(TokenSetPool, KeepsIdsThroughGrowth) {
  TokenSetPool pool;
  std::vector<TokenSet> sets;
  for (int64_t i = 0; i < 5000; ++i) {
    sets.push_back({{i, i + 1}, {i + 3, i + 7}});
    sets.push_back({{i + 3, i + 7}, {i, i + 1}});
  }
  for (size_t k = 0; k < sets.size(); ++k)
    ASSERT_EQ(pool.intern(sets[k]), int32_t(k)) << k;
  EXPECT_EQ(pool.size(), sets.size());
  for (size_t k = 0; k < sets.size(); k += 7) {
    EXPECT_EQ(pool.intern(sets[k]), int32_t(k)) << k;
    EXPECT_EQ(pool.get(int32_t(k)), sets[k]) << k;
  }
  EXPECT_EQ(pool.size(), sets.size());
}

TEST(Layouts, ContiguousShardsAreUnevenFirstLonger) {
  std::vector<int64_t> sizes;
  int64_t next = 0;
  for (int i = 0; i < 4; ++i) {
    const TokenRange r = detail::contiguous_range(10, 4, i);
    EXPECT_EQ(r.begin, next);
    next = r.end;
    sizes.push_back(r.size());
  }
  EXPECT_EQ(next, 10);
  EXPECT_EQ(sizes, (std::vector<int64_t>{3, 3, 2, 2}));
}

TEST(Layouts, CanonicalMergesAdjacentRangesAndDropsEmptyOnes) {
  EXPECT_EQ(detail::canonical({{0, 4}, {4, 8}, {8, 8}, {10, 12}, {3, 5}}), (TokenSet{{0, 8}, {10, 12}, {3, 5}}));
  EXPECT_EQ(detail::canonical({{5, 5}}), TokenSet{});
  EXPECT_TRUE(detail::is_canonical({{0, 4}, {10, 12}, {3, 5}}));
  EXPECT_TRUE(detail::is_canonical({}));
  EXPECT_FALSE(detail::is_canonical({{0, 4}, {4, 6}}));
  EXPECT_FALSE(detail::is_canonical({{0, 4}, {6, 6}}));
  // Against its definition on random lists: canonical's output is canonical, and a canonical list
  // is its own canonical form.
  std::mt19937 rng(7);
  for (int i = 0; i < 200; ++i) {
    TokenSet set = random_set(rng, 40);
    if (i % 2) set.push_back({set.empty() ? 0 : set.back().end, (set.empty() ? 0 : set.back().end) + i % 3});
    const TokenSet made = detail::canonical(set);
    EXPECT_TRUE(detail::is_canonical(made));
    EXPECT_EQ(detail::is_canonical(set), made == set);
    EXPECT_EQ(token_count(made), token_count(set));
  }
}

TEST(Layouts, ZigzagPairsChunks) {
  EXPECT_EQ(detail::zigzag_shard(16, 4, 0), (TokenSet{{0, 2}, {14, 16}}));
  EXPECT_EQ(detail::zigzag_shard(16, 4, 3), (TokenSet{{6, 10}}));  // chunks 3 and 4 are adjacent
}

TEST(Layouts, Zigzag2DSplitsEachChunkIntoUlyssesPieces) {
  // ring 2, ulysses 2, N = 16: chunks of 4; rank rho*2+v takes piece v (2 tokens) of chunks rho, 3-rho.
  EXPECT_EQ(detail::zigzag2d_shard(16, 2, 2, 0), (TokenSet{{0, 2}, {12, 14}}));
  EXPECT_EQ(detail::zigzag2d_shard(16, 2, 2, 1), (TokenSet{{2, 4}, {14, 16}}));
  EXPECT_EQ(detail::zigzag2d_shard(16, 2, 2, 3), (TokenSet{{6, 8}, {10, 12}}));
  // Every token exactly once over all ranks.
  std::vector<int> seen(48, 0);
  for (int s = 0; s < 6; ++s)
    for (const auto& r : detail::zigzag2d_shard(48, 3, 2, s))
      for (int64_t t = r.begin; t < r.end; ++t)
        ++seen[size_t(t)];
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), 48);
}

TEST(Layouts, IntersectKeepsFirstOperandOrder) {
  EXPECT_EQ(detail::intersect(TokenSet{{10, 20}, {0, 5}}, TokenSet{{3, 12}}), (TokenSet{{10, 12}, {3, 5}}));
  EXPECT_TRUE(detail::intersect(TokenSet{{0, 5}}, TokenSet{{5, 9}}).empty());
}

TEST(Heads, UlyssesKvHeadsReplicateWhenDegreeExceedsKvHeads) {
  // 8 query heads, 2 kv heads, degree 4: members 0,1 use kv head 0; 2,3 use kv head 1.
  EXPECT_EQ(detail::ulysses_kv_heads(8, 2, 4, 1), (HeadRange{0, 1}));
  EXPECT_EQ(detail::ulysses_kv_heads(8, 2, 4, 2), (HeadRange{1, 2}));
  EXPECT_EQ(detail::ulysses_kv_heads(8, 8, 4, 2), (HeadRange{4, 6}));
}

class BuilderTest : public ::testing::Test {
 protected:
  BuilderTest() {
    plan_ = testing::hand_plan(StrategyKind::Ring, testing::seq_params(1),
                               testing::small_workload(32, 2, 2, /*causal=*/true));
  }
  Plan plan_;
  TokenSetPool pool_;
};

TEST_F(BuilderTest, ZigzagFirstStepSplitsIntoLiveBlocksOnly) {
  ProgramBuilder b(plan_, 0, pool_);
  const int32_t q = b.buffer("q", field_bit(Field::Q), {0, 2}, 8);
  const int32_t kv = b.buffer("kv", field_bit(Field::K) | field_bit(Field::V), {0, 2}, 8);
  const int32_t acc = b.buffer("acc", field_bit(Field::O) | field_bit(Field::Lse), {0, 2}, 8, true);
  const TokenSet mine{{4, 8}, {24, 28}};
  // Own chunks: (early x early) causal, (late x early) full + (late x late) causal.
  const auto own = b.attn_fwd(q, kv, acc, mine, mine, {0, 2}, 0);
  // Later chunks of another rank {8..12, 20..24}: early q sees nothing, late q sees both fully.
  const auto later = b.attn_fwd(q, kv, acc, mine, {{8, 12}, {20, 24}}, {0, 2}, 1);
  // Earlier chunks {0..4, 28..32}: both q chunks see the first chunk fully, nobody the last.
  const auto earlier = b.attn_fwd(q, kv, acc, mine, {{0, 4}, {28, 32}}, {0, 2}, 2);
  const RankProgram& p = b.program();
  ASSERT_EQ(own.size(), 2u);
  EXPECT_EQ(p.ops[size_t(own[0])].mask, Mask::Causal);
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(pool_.get(p.ops[size_t(later[0])].tok[0]), (TokenSet{{24, 28}}));
  EXPECT_EQ(p.ops[size_t(later[0])].mask, Mask::None);
  ASSERT_EQ(earlier.size(), 1u);
  EXPECT_EQ(pool_.get(p.ops[size_t(earlier[0])].tok[1]), (TokenSet{{0, 4}}));
  EXPECT_EQ(p.ops[size_t(earlier[0])].mask, Mask::None);
  double flops = 0;
  for (const Op& op : p.ops)
    flops += op.flops;
  const TokenSet all_keys{{0, 12}, {20, 32}};
  EXPECT_DOUBLE_EQ(flops, 4.0 * 1 * live_pairs(mine, all_keys, Mask::Causal) * 2 * 4);
}

// The context strategies compute a rank's own tokens as one causal block whatever their ranges,
// as the zigzag ring's implementations run one causal kernel over the two local chunks: the same
// FLOPs as the live blocks above, one op.
TEST_F(BuilderTest, ContextDiagonalIsOneCausalBlockOfTheSameFlops) {
  double flops[2] = {0, 0};
  for (bool one : {false, true}) {
    ProgramBuilder b(plan_, 0, pool_);
    b.set_diagonal_as_one_block(one);
    const int32_t q = b.buffer("q", field_bit(Field::Q), {0, 2}, 8);
    const int32_t kv = b.buffer("kv", field_bit(Field::K) | field_bit(Field::V), {0, 2}, 8);
    const int32_t acc = b.buffer("acc", field_bit(Field::O) | field_bit(Field::Lse), {0, 2}, 8, true);
    const TokenSet mine{{4, 8}, {24, 28}};
    const auto own = b.attn_fwd(q, kv, acc, mine, mine, {0, 2}, 0);
    ASSERT_EQ(own.size(), one ? 1u : 2u);
    const RankProgram& p = b.program();
    EXPECT_EQ(p.ops[size_t(own[0])].mask, Mask::Causal);
    if (one) {
      EXPECT_EQ(pool_.get(p.ops[size_t(own[0])].tok[0]), mine);
    }
    // Another rank's chunks are still cut into live blocks.
    EXPECT_EQ(b.attn_fwd(q, kv, acc, mine, {{8, 12}, {20, 24}}, {0, 2}, 1).size(), 1u);
    for (const int32_t op : own)
      flops[one] += p.ops[size_t(op)].flops;
  }
  EXPECT_DOUBLE_EQ(flops[1], flops[0]);
  EXPECT_DOUBLE_EQ(flops[1], 4.0 * 1 * live_pairs({{4, 8}, {24, 28}}, {{4, 8}, {24, 28}}, Mask::Causal) * 2 * 4);
}

// Every member of a zigzag ring runs the same attention blocks, the middle one too, whose two
// chunks are adjacent (one token range).
TEST(ContextSchedule, EveryZigzagMemberRunsTheSameBlocks) {
  const Plan plan = testing::hand_plan(StrategyKind::Zigzag, testing::seq_params(4),
                                       testing::small_workload(64, 2, 2, /*causal=*/true));
  const Schedule schedule = ScheduleBuilder(plan).build();
  ASSERT_EQ(schedule.ranks.size(), 4u);
  std::vector<std::vector<std::pair<OpKind, Mask>>> blocks(4);
  for (size_t r = 0; r < 4; ++r)
    for (const Op& op : schedule.ranks[r].ops)
      if (op.kind == OpKind::AttnFwd || op.kind == OpKind::AttnBwd) blocks[r].emplace_back(op.kind, op.mask);
  EXPECT_EQ(schedule.tokens.get(schedule.ranks[3].inputs[0].tokens).size(), 1u);  // the middle: one range
  for (size_t r = 1; r < 4; ++r)
    EXPECT_EQ(blocks[r], blocks[0]) << "rank " << r;
}

TEST_F(BuilderTest, ReceiveIntoDoubleBufferWaitsForItsReaders) {
  ProgramBuilder b(plan_, 0, pool_);
  const FieldMask kvf = field_bit(Field::K) | field_bit(Field::V);
  const int32_t q = b.buffer("q", field_bit(Field::Q), {0, 2}, 8);
  const int32_t kv = b.buffer("kv", kvf, {0, 2}, 8);
  const int32_t spare = b.buffer("kv.1", kvf, {0, 2}, 8);
  const int32_t acc = b.buffer("acc", field_bit(Field::O) | field_bit(Field::Lse), {0, 2}, 8, true);
  const TokenSet t{{0, 8}};
  const int32_t send0 = b.send(kv, t, kvf, 0, 1, -1, 0);
  const int32_t recv0 = b.recv(spare, t, kvf, 0, 1, -1, 0);
  const auto c0 = b.attn_fwd(q, kv, acc, t, t, {0, 2}, 0);
  const int32_t send1 = b.send(spare, t, kvf, 0, 2, -1, 1);  // forwards what recv0 brought
  const auto c1 = b.attn_fwd(q, spare, acc, t, t, {0, 2}, 1);
  const int32_t recv1 = b.recv(kv, t, kvf, 0, 2, -1, 1);  // overwrites kv: after send0 and c0
  const RankProgram& p = b.program();
  auto deps = [&](int32_t i) {
    return std::vector<int32_t>(p.deps_begin(p.ops[size_t(i)]), p.deps_end(p.ops[size_t(i)]));
  };
  EXPECT_TRUE(deps(send0).empty());
  EXPECT_EQ(deps(send1), (std::vector<int32_t>{recv0}));
  EXPECT_EQ(deps(c1.front()), (std::vector<int32_t>{recv0}));
  // recv1 overwrites kv: it waits for the send and the compute that read it (c1 read the spare).
  EXPECT_EQ(deps(recv1), (std::vector<int32_t>{send0, c0.front()}));
}

}  // namespace
}  // namespace wallfacer
