// WallFacer, all-gather K/V and LSS executed for real (local threads backend, fp32) on
// configurations beyond the runtime suite's eight ranks: team sizes 3 and 4, G = 1 and G > 1,
// data-parallel replicas and uneven contiguous shards, each against the fp64 naive reference.
#include <gtest/gtest.h>

#include <tuple>

#include <wallfacer/runtime/layer_runner.hpp>
#include "strategies_team/team_plans.hpp"

namespace wallfacer {
namespace {

using namespace team_testing;

void expect_matches_reference(StrategyKind kind, const StrategyParams& params, const Workload& w) {
  const Plan plan = plan_of(kind, params, w);
  runtime::LayerRunOptions options;
  options.check = true;
  const runtime::LayerRunResult r =
      runtime::run_layer_local(plan, build_schedule(plan), runtime::seeded_inputs(w, 11, false), options);
  ASSERT_EQ(r.checks.size(), 5u);
  for (const auto& c : r.checks)
    EXPECT_TRUE(c.ok) << c.name << " relative error " << c.stats.relative;
  EXPECT_TRUE(r.weight_grad.ok) << r.weight_grad.first_mismatch;
}

TEST(TeamNumerics, WallFacerMatchesTheReference) {
  for (auto [S, C, D] : std::vector<std::tuple<int, int, int>>{{16, 4, 1}, {16, 2, 1}, {18, 3, 1}, {8, 2, 2}})
    for (bool causal : {true, false}) {
      SCOPED_TRACE(testing::Message() << "S=" << S << " C=" << C << " D=" << D << " causal=" << causal);
      expect_matches_reference(StrategyKind::WallFacer, params_of(StrategyKind::WallFacer, S, D, C),
                               workload(causal ? 4 * S : 4 * S + 5, 4, 2, causal, D, 8));
    }
}

TEST(TeamNumerics, GatheredKvStrategiesMatchTheReference) {
  for (StrategyKind kind : {StrategyKind::AllGather, StrategyKind::Lss})
    for (auto [S, D] : std::vector<std::pair<int, int>>{{12, 1}, {5, 2}})
      for (bool causal : {true, false}) {
        SCOPED_TRACE(testing::Message() << to_string(kind) << " S=" << S << " D=" << D << " causal=" << causal);
        // All-gather's zigzag needs 2S | N when causal; LSS cuts contiguous, uneven segments.
        const bool zigzag = kind == StrategyKind::AllGather && causal;
        expect_matches_reference(kind, params_of(kind, S, D), workload(zigzag ? 4 * S : 4 * S + 5, 4, 1, causal, D, 8));
      }
}

}  // namespace
}  // namespace wallfacer
