// ScheduleBuilder::build_all on several threads gives the schedule build() gives: the same
// programs op for op and the same token pool, ids included, for every feasible parameter set of
// every strategy on 16 ranks (1 to 16 blocks, and more threads than ranks).
#include <gtest/gtest.h>

#include <string>

#include <wallfacer/schedule/strategy.hpp>
#include "schedule/test_plans.hpp"

namespace wallfacer {
namespace {

using testing::hand_plan;
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

}  // namespace
}  // namespace wallfacer
