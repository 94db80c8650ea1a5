// Feasibility rules (docs/algorithms.md §12), parameter enumeration, groups and placements.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include "common/strategy_params.hpp"
#include "schedule/test_plans.hpp"

namespace wallfacer {
namespace {

using testing::small_workload;

StrategyParams params_of(StrategyKind kind, int S, int D = 1, int u = 1, int r = 1, int w = 1) {
  return test::typed_params(kind, {.S = S, .D = D, .u = u, .r = r, .w = w});
}

void expect_infeasible(StrategyKind kind, const StrategyParams& p, const Workload& w, int ranks,
                       const std::string& words) {
  const Feasibility f = check_feasible(kind, p, w, ranks);
  EXPECT_FALSE(f.ok) << to_string(kind) << " should be infeasible (" << words << ")";
  EXPECT_NE(f.reason.find(words), std::string::npos) << f.reason;
}

TEST(Feasibility, GenericRules) {
  const Workload w = small_workload(64, 8, 8, true, 2);
  expect_infeasible(StrategyKind::Ring, params_of(StrategyKind::Ring, 4, 1), w, 8, "!= 8 ranks");
  expect_infeasible(StrategyKind::Ring, params_of(StrategyKind::Ring, 2, 4), w, 8, "batch (2) not divisible");
  expect_infeasible(StrategyKind::Ring, params_of(StrategyKind::Ring, 8), small_workload(5, 8, 8, true), 8, "shorter");
  EXPECT_TRUE(check_feasible(StrategyKind::Ring, params_of(StrategyKind::Ring, 4, 2), w, 8).ok);
}

TEST(Feasibility, SequenceRanksFitTheMessageTags) {
  // Schedules number their steps (< S) in 16 bits of each message tag.
  const Workload w = small_workload(1 << 20, 8, 8, true);
  for (StrategyKind kind : {StrategyKind::Ring, StrategyKind::DoubleRing, StrategyKind::WallFacer})
    expect_infeasible(kind, params_of(kind, 65537 * 2), w, 65537 * 2,
                      "exceeds the 65536 ranks a schedule's message tags");
  EXPECT_TRUE(check_feasible(StrategyKind::Ring, params_of(StrategyKind::Ring, 65536), w, 65536).ok);
}

TEST(Feasibility, ZigzagNeedsTwoChunksPerRank) {
  expect_infeasible(StrategyKind::Zigzag, params_of(StrategyKind::Zigzag, 4), small_workload(20, 4, 4, true), 4,
                    "divisible by 2 x 4");
  EXPECT_TRUE(
      check_feasible(StrategyKind::Zigzag, params_of(StrategyKind::Zigzag, 4), small_workload(24, 4, 4, true), 4).ok);
}

TEST(Feasibility, UlyssesHeadRules) {
  expect_infeasible(StrategyKind::Ulysses, params_of(StrategyKind::Ulysses, 3, 1, 3), small_workload(64, 8, 8, true), 3,
                    "heads (8) not divisible by Ulysses degree 3");
  expect_infeasible(StrategyKind::Ulysses, params_of(StrategyKind::Ulysses, 16, 1, 16), small_workload(64, 8, 8, true),
                    16, "exceeds");
  // 6 query heads, 3 kv heads, degree 2: kv heads neither split nor replicate evenly.
  expect_infeasible(StrategyKind::Ulysses, params_of(StrategyKind::Ulysses, 2, 1, 2), small_workload(64, 6, 3, true), 2,
                    "kv_heads (3)");
  // Replication: 8 heads, 2 kv heads, degree 4.
  EXPECT_TRUE(check_feasible(StrategyKind::Ulysses, params_of(StrategyKind::Ulysses, 4, 1, 4),
                             small_workload(64, 8, 2, true), 4)
                  .ok);
}

TEST(Feasibility, UspAndDoubleRing) {
  const Workload w = small_workload(64, 8, 8, true);
  expect_infeasible(StrategyKind::Usp, params_of(StrategyKind::Usp, 8, 1, 2, 2), w, 8, "!= sequence parallel");
  expect_infeasible(StrategyKind::Usp, params_of(StrategyKind::Usp, 8, 1, 2, 4), small_workload(40, 8, 8, true), 8,
                    "zigzag");
  EXPECT_TRUE(
      check_feasible(StrategyKind::Usp, params_of(StrategyKind::Usp, 8, 1, 2, 4), small_workload(40, 8, 8, false), 8)
          .ok);
  expect_infeasible(StrategyKind::DoubleRing, params_of(StrategyKind::DoubleRing, 8, 1, 1, 1, 3), w, 8, "windows of 3");
  expect_infeasible(StrategyKind::DoubleRing, params_of(StrategyKind::DoubleRing, 8, 1, 3, 1, 1), w, 8,
                    "does not divide");
  EXPECT_TRUE(check_feasible(StrategyKind::DoubleRing, params_of(StrategyKind::DoubleRing, 8, 1, 2, 1, 2), w, 8).ok);
}

// Each strategy takes only its own knobs type: USP's degrees and placement mean nothing to the
// ring or to WallFacer, and a plan that hands them over is rejected, not silently read.
TEST(Feasibility, KnobsOnlyOfTheirOwnStrategy) {
  const Workload w = small_workload(64, 8, 8, true);
  const StrategyParams usp{.sequence_parallel = 4, .knobs = UspKnobs{2, 2, ContextPlacement::ContextFirst}};
  expect_infeasible(StrategyKind::Ring, usp, w, 4, "parameters of another strategy given to ring");
  expect_infeasible(StrategyKind::WallFacer, usp, w, 4, "parameters of another strategy given to wallfacer");
  EXPECT_TRUE(check_feasible(StrategyKind::Usp, usp, w, 4).ok);
  const StrategyParams none{.sequence_parallel = 4};
  expect_infeasible(StrategyKind::Usp, none, w, 4, "parameters of another strategy given to usp");
  EXPECT_TRUE(check_feasible(StrategyKind::Ring, none, w, 4).ok);
}

TEST(Enumerate, DegreesAndPlacements) {
  const Workload w = small_workload(64, 8, 8, true, 2);
  const auto usp = enumerate_params(StrategyKind::Usp, w, 8);
  // D = 1: u in {2, 4} x 2 placements; D = 2 (S = 4): u = 2 x 2 placements.
  EXPECT_EQ(usp.size(), 6u);
  for (const auto& p : usp) {
    const UspKnobs& k = std::get<UspKnobs>(p.knobs);
    EXPECT_EQ(k.ulysses * k.ring, p.sequence_parallel);
    EXPECT_GT(k.ulysses, 1);
    EXPECT_GT(k.ring, 1);
  }
  const auto dr = enumerate_params(StrategyKind::DoubleRing, small_workload(64, 8, 8, true, 1), 8);
  // u = 1: c = 8, w in {2, 4}; u = 2: c = 4, w = 2, two placements.
  EXPECT_EQ(dr.size(), 4u);
  const auto ring = enumerate_params(StrategyKind::Ring, small_workload(64, 8, 8, true, 12), 8);
  std::set<int> ds;
  for (const auto& p : ring)
    ds.insert(p.data_parallel);
  EXPECT_EQ(ds, (std::set<int>{1, 2, 4}));  // divisors of gcd(8, 12)
}

TEST(Groups, UspHeadFirstGroupsAndContextFirstPlacement) {
  const StrategyParams p = params_of(StrategyKind::Usp, 8, 1, 2, 4);
  const auto groups = make_groups(StrategyKind::Usp, p, 8);
  // a2a0..a2a3 {2x, 2x+1}, ring0 {0,2,4,6}, ring1 {1,3,5,7}, world.
  ASSERT_EQ(groups.size(), 7u);
  EXPECT_EQ(groups[1].ranks, (std::vector<int>{2, 3}));
  EXPECT_EQ(groups[1].kind, GroupKind::AllToAll);
  EXPECT_EQ(groups[5].ranks, (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(groups[5].kind, GroupKind::Ring);
  EXPECT_EQ(groups[6].kind, GroupKind::World);
}

TEST(Groups, DataParallelReplicasArePrefixed) {
  const auto groups = make_groups(StrategyKind::Ring, params_of(StrategyKind::Ring, 2, 2), 4);
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[0].name, "d0.ring");
  EXPECT_EQ(groups[1].ranks, (std::vector<int>{2, 3}));
  EXPECT_EQ(groups[2].name, "world");
}

TEST(Groups, DoubleRingWindows) {
  const auto groups = make_groups(StrategyKind::DoubleRing, params_of(StrategyKind::DoubleRing, 8, 1, 1, 1, 4), 8);
  // win0 {0..3}, win1 {4..7}, inter0..3 {o, o+4}, one diagonal cycle (lcm(2, 4) = 4 members) x 2.
  std::vector<std::string> names;
  for (const auto& g : groups)
    names.push_back(g.name);
  EXPECT_EQ(names, (std::vector<std::string>{"win0", "win1", "inter0", "inter1", "inter2", "inter3", "dkv-inter0",
                                             "dkv-inter1", "world"}));
  EXPECT_EQ(groups[3].ranks, (std::vector<int>{1, 5}));
  EXPECT_EQ(groups[6].ranks, (std::vector<int>{0, 5, 2, 7}));
}

TEST(Builder, BuildsOneRankOfAHugeRingQuickly) {
  // 16,384 ranks: building a rank must not touch the other ranks' programs.
  Workload w = small_workload(int64_t(1) << 24, 32, 8, true, 1, 128);
  const Plan plan = testing::hand_plan(StrategyKind::Zigzag, params_of(StrategyKind::Zigzag, 16384), w);
  const ScheduleBuilder builder(plan);
  const Schedule one = builder.build({777});
  ASSERT_EQ(one.ranks.size(), 1u);
  EXPECT_EQ(one.ranks[0].rank, 777);
  ASSERT_EQ(one.flow_sets.size(), 2u);
  EXPECT_EQ(one.flow_sets[0].flows.size(), 16384u);
}

}  // namespace
}  // namespace wallfacer
