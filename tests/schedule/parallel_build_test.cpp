// ScheduleBuilder::build_all on several threads gives the schedule build() gives: the same
// programs op for op and the same token pool, ids included, for every feasible parameter set of
// every strategy on 16 ranks (1 to 16 blocks, and more threads than ranks); and the programs of
// tensor slices and pipeline stages renamed from one another are those built.
#include <gtest/gtest.h>

#include <string>

#include <wallfacer/schedule/all_reduce.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include "schedule/test_plans.hpp"

namespace wallfacer {
namespace {

using testing::hand_plan;
using testing::seq_params;
using testing::small_workload;

void expect_same_schedule(const Schedule& expected, const Schedule& got, const std::string& what) {
  ASSERT_EQ(expected.tokens.size(), got.tokens.size()) << what;
  for (size_t id = 0; id < expected.tokens.size(); ++id)
    ASSERT_TRUE(expected.tokens.get(int32_t(id)) == got.tokens.get(int32_t(id))) << what << ": token set " << id;
  ASSERT_EQ(expected.ranks.size(), got.ranks.size()) << what;
  for (size_t r = 0; r < expected.ranks.size(); ++r)
    EXPECT_TRUE(expected.ranks[r] == got.ranks[r]) << what << ": rank " << r << " differs";
  EXPECT_EQ(expected.flow_sets.size(), got.flow_sets.size()) << what;
}

TEST(ParallelBuild, EveryStrategyGivesTheSequentialScheduleOnAnyNumberOfThreads) {
  const int ranks = 16;
  const Workload workload = small_workload(16 * 48, 8, 4, true, 2);
  int built = 0;
  for (StrategyKind kind : all_strategies()) {
    for (const StrategyParams& params : enumerate_params(kind, workload, ranks)) {
      if (!check_feasible(kind, params, workload, ranks).ok) continue;
      const Plan plan = hand_plan(kind, params, workload);
      const ScheduleBuilder builder(plan);
      const Schedule sequential = builder.build();
      for (int threads : {2, 3, 16, 64}) {
        const std::string what = std::string(to_string(kind)) + " on " + std::to_string(threads) + " threads";
        expect_same_schedule(sequential, builder.build_all(threads), what);
      }
      ++built;
    }
  }
  EXPECT_GE(built, 8);  // at least one parameter set per strategy
}

// A builder makes its pipeline stages' and tensor slices' builders when first asked for: threads
// that build ranks of a fresh builder at once make each of them once and get the schedule one
// thread gets, for every strategy under tensor parallelism 2, pipeline parallelism 2 and both.
TEST(ParallelBuild, StagesAndSlicesMadeOnSeveralThreadsAtOnceGiveTheSequentialSchedule) {
  const int ranks = 16;
  Workload workload = small_workload(16 * 48, 8, 4, true, 2);
  workload.layers = 2;
  int built = 0;
  for (auto [T, Pp] : {std::pair{2, 1}, std::pair{1, 2}, std::pair{2, 2}}) {
    Workload slice = workload;
    slice.heads /= T;
    slice.kv_heads /= T;
    for (StrategyKind kind : all_strategies())
      for (StrategyParams params : enumerate_params(kind, slice, ranks / (T * Pp))) {
        params.tensor_parallel = T;
        params.pipeline_parallel = Pp;
        if (!check_feasible(kind, params, workload, ranks).ok) continue;
        const Plan plan = hand_plan(kind, params, workload);
        const Schedule sequential = ScheduleBuilder(plan).build();
        for (int threads : {4, 16}) {
          const std::string what = std::string(to_string(kind)) + " T=" + std::to_string(T) +
                                   " P=" + std::to_string(Pp) + " on " + std::to_string(threads) + " threads";
          expect_same_schedule(sequential, ScheduleBuilder(plan).build_all(threads), what);
        }
        ++built;
      }
  }
  EXPECT_GE(built, 24);  // every strategy under each split
}

// The tensor slices of one slice rank build one program, renamed: rename() of any sibling's
// program gives what build_rank() gives, op for op (the token pool untouched), for every strategy
// under tensor parallelism 2 and 4 on 16 ranks; pipeline plans and plans without tensor slices
// are not renamed.
TEST(ParallelBuild, TensorSlicesOfOneSliceRankAreRenamedCopies) {
  const int ranks = 16;
  const Workload workload = small_workload(16 * 48, 8, 4, true, 2);
  int renamed = 0;
  for (int T : {2, 4}) {
    Workload slice = workload;
    slice.heads /= T;
    slice.kv_heads /= T;
    for (StrategyKind kind : all_strategies())
      for (StrategyParams params : enumerate_params(kind, slice, ranks / T)) {
        params.tensor_parallel = T;
        if (!check_feasible(kind, params, workload, ranks).ok) continue;
        const ScheduleBuilder builder(hand_plan(kind, params, workload));
        TokenSetPool pool;
        std::vector<RankProgram> built;
        for (int r = 0; r < ranks; ++r)
          built.push_back(builder.build_rank(r, pool));
        const size_t sets = pool.size();
        for (int r = 0; r < ranks; ++r)
          for (int sibling = r / T * T; sibling < r / T * T + T; ++sibling) {
            ASSERT_TRUE(builder.renames(r, sibling));
            EXPECT_TRUE(builder.rename(r, built[size_t(sibling)]) == built[size_t(r)])
                << to_string(kind) << " T=" << T << ": rank " << r << " from rank " << sibling;
            ++renamed;
          }
        EXPECT_FALSE(builder.renames(0, T));  // another slice rank
        EXPECT_EQ(pool.size(), sets);
      }
  }
  EXPECT_GT(renamed, 16 * 4 * 8);
  const Plan flat = hand_plan(StrategyKind::Ring, seq_params(ranks), workload);
  EXPECT_FALSE(ScheduleBuilder(flat).renames(0, 0));
}

// The ranks of one stage rank in every pipeline stage build one program, renamed: rename() of any
// other stage's program gives what build_rank() gives, op for op (all-reduces run as their own
// group does, here a tree on every second stage), for every strategy on 2 and 4 stages of 16
// ranks, and with tensor parallelism 2 inside the stages; another stage rank is not renamed.
TEST(ParallelBuild, PipelineStagesOfOneStageRankAreRenamedCopies) {
  const int ranks = 16;
  Workload workload = small_workload(16 * 48, 8, 4, true, 2);
  workload.layers = 4;
  int renamed = 0;
  for (auto [Pp, T] : {std::pair{2, 1}, std::pair{4, 1}, std::pair{2, 2}}) {
    Workload slice = workload;
    slice.heads /= T;
    slice.kv_heads /= T;
    for (StrategyKind kind : all_strategies())
      for (StrategyParams params : enumerate_params(kind, slice, ranks / (Pp * T))) {
        params.pipeline_parallel = Pp;
        params.tensor_parallel = T;
        if (!check_feasible(kind, params, workload, ranks).ok) continue;
        Plan plan = hand_plan(kind, params, workload);
        for (CommGroup& group : plan.groups)
          if (runs_all_reduces(group.kind) && group.name.rfind("p1.", 0) == 0)
            group.all_reduce = AllReduceAlgorithm::Tree;
        const ScheduleBuilder builder(plan);
        TokenSetPool pool;
        std::vector<RankProgram> built;
        for (int r = 0; r < ranks; ++r)
          built.push_back(builder.build_rank(r, pool));
        const size_t sets = pool.size();
        const int W = ranks / Pp;
        for (int r = 0; r < ranks; ++r)
          for (int sibling = r % W; sibling < ranks; sibling += W) {
            ASSERT_TRUE(builder.renames(r, sibling));
            EXPECT_TRUE(builder.rename(r, built[size_t(sibling)]) == built[size_t(r)])
                << to_string(kind) << " P=" << Pp << " T=" << T << ": rank " << r << " from rank " << sibling;
            ++renamed;
          }
        EXPECT_FALSE(builder.renames(0, 1));  // another stage rank
        EXPECT_EQ(pool.size(), sets);
      }
  }
  EXPECT_GT(renamed, 16 * 2 * 8);
}

}  // namespace
}  // namespace wallfacer
