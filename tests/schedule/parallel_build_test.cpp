// ScheduleBuilder::build_all on several threads gives the schedule build() gives: the same
// programs op for op and the same token pool, ids included, for every feasible parameter set of
// every strategy on 16 ranks (1 to 16 blocks, and more threads than ranks); and the programs of
// tensor slices and pipeline stages renamed from one another are those built.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>

#include <wallfacer/schedule/all_reduce.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include "schedule/test_plans.hpp"

namespace wallfacer {
namespace {

using testing::for_each_split_plan;
using testing::hand_plan;
using testing::seq_params;
using testing::small_workload;
using testing::Split;

void expect_same_schedule(const Schedule& expected, const Schedule& got, const std::string& what) {
  ASSERT_EQ(expected.tokens.size(), got.tokens.size()) << what;
  for (size_t id = 0; id < expected.tokens.size(); ++id)
    ASSERT_TRUE(expected.tokens.get(int32_t(id)) == got.tokens.get(int32_t(id))) << what << ": token set " << id;
  ASSERT_EQ(expected.ranks.size(), got.ranks.size()) << what;
  for (size_t r = 0; r < expected.ranks.size(); ++r)
    EXPECT_TRUE(expected.ranks[r] == got.ranks[r]) << what << ": rank " << r << " differs";
  EXPECT_EQ(expected.flow_sets.size(), got.flow_sets.size()) << what;
}

// Builds every rank of `builder`'s plan into one pool: rename() of each rank r from each of its
// siblings (`count` of them, `stride` apart from first(r)) gives r's own program and interns
// nothing. Returns the renames checked.
template <typename First>
int expect_renamed_copies(const ScheduleBuilder& builder, First&& first, int stride, int count,
                          const std::string& what) {
  const int ranks = builder.num_ranks();
  TokenSetPool pool;
  std::vector<RankProgram> built;
  for (int r = 0; r < ranks; ++r)
    built.push_back(builder.build_rank(r, pool));
  const size_t sets = pool.size();
  int renamed = 0;
  for (int r = 0; r < ranks; ++r)
    for (int k = 0, sibling = first(r); k < count; ++k, sibling += stride) {
      if (!builder.renames(r, sibling)) {
        ADD_FAILURE() << what << ": rank " << r << " is not renamed from rank " << sibling;
        return renamed;
      }
      EXPECT_TRUE(builder.rename(r, built[size_t(sibling)]) == built[size_t(r)])
          << what << ": rank " << r << " from rank " << sibling;
      ++renamed;
    }
  EXPECT_EQ(pool.size(), sets) << what;
  return renamed;
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
  for_each_split_plan(workload, ranks, {{2, 1}, {1, 2}, {2, 2}}, [&](const Plan& plan, Split split) {
    const Schedule sequential = ScheduleBuilder(plan).build();
    for (int threads : {4, 16}) {
      const std::string what = std::string(to_string(plan.strategy)) + " T=" + std::to_string(split.tensor) +
                               " P=" + std::to_string(split.pipeline) + " on " + std::to_string(threads) + " threads";
      expect_same_schedule(sequential, ScheduleBuilder(plan).build_all(threads), what);
    }
    ++built;
  });
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
  for_each_split_plan(workload, ranks, {{2, 1}, {4, 1}}, [&](const Plan& plan, Split split) {
    const int T = split.tensor;
    const ScheduleBuilder builder(plan);
    renamed += expect_renamed_copies(
        builder, [&](int r) { return r / T * T; }, 1, T, fmt::format("{} T={}", to_string(plan.strategy), T));
    EXPECT_FALSE(builder.renames(0, T));  // another slice rank
  });
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
  for_each_split_plan(workload, ranks, {{1, 2}, {1, 4}, {2, 2}}, [&](Plan plan, Split split) {
    for (CommGroup& group : plan.groups)
      if (runs_all_reduces(group.kind) && group.name.rfind("p1.", 0) == 0) group.all_reduce = AllReduceAlgorithm::Tree;
    const ScheduleBuilder builder(plan);
    const int W = ranks / split.pipeline;
    renamed += expect_renamed_copies(
        builder, [&](int r) { return r % W; }, W, split.pipeline,
        fmt::format("{} P={} T={}", to_string(plan.strategy), split.pipeline, split.tensor));
    EXPECT_FALSE(builder.renames(0, 1));  // another stage rank
  });
  EXPECT_GT(renamed, 16 * 2 * 8);
}

}  // namespace
}  // namespace wallfacer
