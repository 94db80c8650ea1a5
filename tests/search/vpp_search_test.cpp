// Virtual stages as a search dimension (docs/step.md "Interleaved 1F1B"): a step search over
// --vpp prices every count that divides a stage's layers, interleaving shortens the pipelined
// step, and a plan with virtual stages survives its file.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/plan/plan.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include <wallfacer/search/search.hpp>
#include <wallfacer/topology/topology.hpp>

namespace wallfacer {
namespace {

TEST(VirtualStageSearch, PricesEveryCountThatDividesAndInterleavingShortensTheStep) {
  const Topology topology = Topology::load("dgx-h100", 2);
  Workload w = load_workload("llama-3-8b");
  w.layers = 8;
  w.seq = 4096;
  w.batch = 4;  // four micro-batches of one sequence: a bubble of 1 in 5 items without interleaving
  const CostModel model(topology, Calibration::defaults());
  SearchOptions options;
  options.scope = Scope::Step;
  options.strategy = StrategyKind::Ulysses;
  options.pipeline_degrees = {2};
  options.virtual_stages = {1, 2, 4, 8};  // 8 does not divide a stage's 4 layers
  options.sequence_parallel = 8;
  options.priced_top = 3;  // price the three counts in full: a bound would prune the slower ones
  const SearchResult result = search_plans(topology, w, model, options);
  std::map<int, double> step_by_v;
  for (const Candidate& c : result.candidates) {
    EXPECT_NE(c.plan.params.virtual_stages, 8) << c.describe_params();
    if (!c.feasible || c.pruned) continue;
    step_by_v[c.plan.params.virtual_stages] = c.cost.step_ms;
    if (c.plan.params.virtual_stages > 1) {
      EXPECT_NE(c.describe_params().find(fmt::format("V={}", c.plan.params.virtual_stages)), std::string::npos);
    }
  }
  ASSERT_EQ(step_by_v.size(), 3u);
  EXPECT_LT(step_by_v[2], step_by_v[1]);
  EXPECT_LT(step_by_v[4], step_by_v[2]);
  ASSERT_GE(result.best, 0);
  EXPECT_GT(result.candidates[size_t(result.best)].plan.params.virtual_stages, 1);
}

TEST(VirtualStageSearch, PlanFilesKeepTheVirtualStages) {
  const Topology topology = Topology::load("dgx-h100", 2);
  Workload w = load_workload("llama-3-8b");
  w.layers = 8;
  w.seq = 4096;
  w.batch = 16;
  w.microbatches = 2;
  Plan plan = make_plan(StrategyKind::Ulysses, {.sequence_parallel = 8, .pipeline_parallel = 2, .virtual_stages = 2}, w,
                        topology, 16);
  plan.scope = Scope::Step;  // pipeline stages split the layers of a whole step
  std::ostringstream text;
  write_plan(plan, text);
  EXPECT_NE(text.str().find("  virtual_stages: 2\n"), std::string::npos);
  const Plan back = parse_plan(text.str(), "plan.yaml");
  EXPECT_EQ(back.params.virtual_stages, 2);
  EXPECT_EQ(back.params, plan.params);
  // One virtual stage is not written: plans without interleaving read as before.
  plan.params.virtual_stages = 1;
  std::ostringstream plain;
  write_plan(plan, plain);
  EXPECT_EQ(plain.str().find("virtual_stages"), std::string::npos);
  EXPECT_EQ(parse_plan(plain.str(), "plan.yaml").params.virtual_stages, 1);
}

}  // namespace
}  // namespace wallfacer
