// A composed whole step (simulator/compose.hpp) against the full replay of every layer, the
// reference: every strategy, ZeRO stages, checkpointing modes, micro-batches, tensor and pipeline
// parallelism, one, two and eight nodes. simulate() composes where its replays of 1, 2 and 3
// layers per stage grow by the same amount per layer and replays every layer otherwise; either
// way the result must be the full replay's. Both sides are SimGrid replays dated to its 1 ns
// clock, so each time of a replay carries up to 1 ns of rounding and the composition multiplies
// the difference of two replays by t = layers - 2: the tolerance is (2t + 1) ns plus 1e-12 of the
// value. Counts are equal; bytes agree to 1e-12.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>

#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/search/search.hpp>
#include <wallfacer/simulator/simulator.hpp>
#include "simulator/sim_test_util.hpp"

namespace wallfacer {
namespace {

// Llama-3-8B cut to `layers` layers, one sequence of `tokens`.
Workload compose_workload(int layers, int64_t tokens = 8 * 4096) {
  WorkloadOverrides overrides;
  overrides.seq = tokens;
  overrides.batch = 1;
  overrides.causal = true;
  overrides.layers = layers;
  return load_workload("llama-3-8b", overrides);
}

Plan step_plan_for(StrategyKind kind, const Workload& workload, const Topology& topology) {
  Plan plan = test::plan_for(kind, workload, topology, topology.num_gpus());
  plan.scope = Scope::Step;
  return plan;
}

// The best step plan of one strategy with the given tensor and pipeline degrees (the search
// fills in micro-batches and placement).
Plan searched_step_plan(StrategyKind kind, const Workload& workload, const Topology& topology, int tp, int pp) {
  const CostModel model(topology, Calibration::defaults());
  SearchOptions options;
  options.strategy = kind;
  options.scope = Scope::Step;
  options.mode = SearchMode::Heuristic;
  options.tensor_degrees = {tp};
  options.pipeline_degrees = {pp};
  const SearchResult found = search_plans(topology, workload, model, options);
  EXPECT_GE(found.best, 0) << "no feasible plan with T=" << tp << " Pp=" << pp;
  return found.best >= 0 ? found.candidates[size_t(found.best)].plan : Plan{};
}

// SimGrid's clock step and what composition makes of it (header).
double tolerance_ms(double value_ms, const SimResult& composed) {
  const auto& from = composed.composed_from;
  const double t = double(composed.layers - from.front()) / double(from.back() - from.front());  // layers - 2
  return (2 * t + 1) * 1e-6 + 1e-12 * std::abs(value_ms);
}

// Returns whether simulate() composed the step.
bool expect_same_as_full_replay(const Plan& plan, const Topology& topology) {
  SimOptions compose;
  compose.composition = SimOptions::Composition::Always;
  const SimResult composed = simulate(plan, topology, compose);
  SimOptions full_options;
  full_options.composition = SimOptions::Composition::Never;
  full_options.busiest_links = 0;
  const SimResult full = simulate(plan, topology, full_options);
  EXPECT_TRUE(full.composed_from.empty());
  if (composed.composed_from.empty()) {  // not composed: the same replay
    EXPECT_EQ(composed.step_ms, full.step_ms);
    EXPECT_EQ(composed.activities, full.activities);
    fmt::print("{:<11} T={} Pp={} M={}: every layer replayed ({:.9f} ms)\n", to_string(plan.strategy),
               plan.params.tensor_parallel, plan.params.pipeline_parallel, plan.workload.microbatches, full.step_ms);
    return false;
  }
  EXPECT_EQ(composed.composed_from,
            (std::vector<int>{2 * plan.params.pipeline_parallel, 3 * plan.params.pipeline_parallel}));
  EXPECT_EQ(composed.layers, plan.workload.layers);
  EXPECT_EQ(full.layers, plan.workload.layers);
  fmt::print("{:<11} T={} Pp={} M={}: full {:.9f} ms, composed {:.9f} ms ({:+.2e})\n", to_string(plan.strategy),
             plan.params.tensor_parallel, plan.params.pipeline_parallel, plan.workload.microbatches, full.step_ms,
             composed.step_ms, composed.step_ms / full.step_ms - 1);
  EXPECT_NEAR(composed.step_ms, full.step_ms, tolerance_ms(full.step_ms, composed));
  EXPECT_NEAR(composed.forward_ms, full.forward_ms, tolerance_ms(full.forward_ms, composed));
  EXPECT_NEAR(composed.backward_ms, full.backward_ms, 2 * tolerance_ms(full.backward_ms, composed));
  EXPECT_EQ(composed.activities, full.activities);
  EXPECT_EQ(composed.transfers, full.transfers);
  EXPECT_EQ(composed.ranks.size(), full.ranks.size());
  if (composed.ranks.size() != full.ranks.size()) return true;
  for (size_t r = 0; r < full.ranks.size(); ++r) {
    SCOPED_TRACE(fmt::format("rank {}", r));
    const RankStats &c = composed.ranks[r], &f = full.ranks[r];
    EXPECT_NEAR(c.compute_ms, f.compute_ms, tolerance_ms(f.compute_ms, composed));
    EXPECT_NEAR(c.comm_ms, f.comm_ms, 2 * tolerance_ms(f.comm_ms, composed));
    EXPECT_NEAR(c.idle_ms, f.idle_ms, 4 * tolerance_ms(full.step_ms, composed));
  }
  EXPECT_EQ(composed.link_classes.size(), full.link_classes.size());
  if (composed.link_classes.size() != full.link_classes.size()) return true;
  for (size_t k = 0; k < full.link_classes.size(); ++k) {
    const LinkClassStats &c = composed.link_classes[k], &f = full.link_classes[k];
    EXPECT_EQ(c.kind, f.kind);
    EXPECT_EQ(c.links, f.links);
    EXPECT_NEAR(c.bytes, f.bytes, 1e-12 * f.bytes);
    EXPECT_NEAR(c.max_utilization, f.max_utilization, 1e-9 * f.max_utilization + 1e-15);
    EXPECT_NEAR(c.mean_utilization, f.mean_utilization, 1e-9 * f.mean_utilization + 1e-15);
  }
  // The ten busiest resources, by name, carry the full replay's bytes.
  std::map<std::string, double> full_bytes;
  for (const LinkStats& l : full.busiest_links)
    full_bytes[l.name] = l.bytes;
  EXPECT_EQ(composed.busiest_links.size(), std::min<size_t>(10, full.busiest_links.size()));
  for (const LinkStats& l : composed.busiest_links) {
    EXPECT_TRUE(full_bytes.count(l.name)) << l.name;
    EXPECT_NEAR(l.bytes, full_bytes[l.name], 1e-12 * l.bytes);
  }
  return true;
}

// Where the layers' replays repeat exactly the step is composed, else every layer is replayed; the
// Ulysses plan repeats from the first layer on here, in every rank's figures, so it composes.
// (The all-gather and LSS plans repeat in the step but not in some ranks' communication time.)
TEST(SimulatorCompose, EveryStrategysStepIsTheFullReplaysOnTwoNodes) {
  const Topology topology = Topology::load("dgx-h100", 2);
  for (StrategyKind kind : all_strategies()) {
    SCOPED_TRACE(to_string(kind));
    const bool composed =
        expect_same_as_full_replay(step_plan_for(kind, compose_workload(6, 16 * 4096), topology), topology);
    if (kind == StrategyKind::Ulysses) {
      EXPECT_TRUE(composed);
    }
  }
}

TEST(SimulatorCompose, ZeroStagesCheckpointingAndMicroBatchesCompose) {
  const Topology topology = Topology::load("dgx-h100", 1);
  struct Case {
    StrategyKind kind;
    int zero_stage;
    Checkpointing checkpointing;
    int microbatches;
  };
  for (const Case& c :
       {Case{StrategyKind::Ulysses, 0, Checkpointing::Selective, 1},
        Case{StrategyKind::Zigzag, 2, Checkpointing::None, 1}, Case{StrategyKind::WallFacer, 3, Checkpointing::Full, 1},
        Case{StrategyKind::Usp, 1, Checkpointing::Selective, 2}}) {
    SCOPED_TRACE(fmt::format("{} ZeRO {} M={}", to_string(c.kind), c.zero_stage, c.microbatches));
    Workload w = compose_workload(6);
    w.zero_stage = c.zero_stage;
    w.checkpointing = c.checkpointing;
    w.batch = c.microbatches;
    w.microbatches = c.microbatches;
    expect_same_as_full_replay(step_plan_for(c.kind, w, topology), topology);
  }
}

TEST(SimulatorCompose, TensorAndPipelineParallelStepsCompose) {
  const Topology topology = Topology::load("dgx-h100", 2);
  Workload w = compose_workload(8, 16 * 4096);
  w.batch = 4;
  EXPECT_TRUE(expect_same_as_full_replay(searched_step_plan(StrategyKind::Ulysses, w, topology, 2, 1), topology));
  // The pipeline's stages wait for each other a little differently in each layer (rank
  // communication times), so this one is replayed in full after the check.
  expect_same_as_full_replay(searched_step_plan(StrategyKind::Ring, w, topology, 1, 2), topology);
}

TEST(SimulatorCompose, EightNodesCompose) {
  const Topology topology = Topology::load("dgx-h100", 8);
  for (StrategyKind kind : {StrategyKind::DoubleRing, StrategyKind::WallFacer}) {
    SCOPED_TRACE(to_string(kind));
    expect_same_as_full_replay(step_plan_for(kind, compose_workload(5, 64 * 4096), topology), topology);
  }
}

// Where composition is never tried: a chosen layer count, an attention-scope plan, a topology
// whose nodes differ (its layers need not repeat exactly), or a step of at most three layers.
TEST(SimulatorCompose, FewerLayersIrregularNodesAndShortStepsReplayEveryLayer) {
  const Topology topology = Topology::load("dgx-h100", 1);
  const Plan plan = step_plan_for(StrategyKind::Ulysses, compose_workload(5), topology);
  SimOptions always;
  always.composition = SimOptions::Composition::Always;
  SimOptions fewer = always;
  fewer.step_layers = 4;
  EXPECT_TRUE(simulate(plan, topology, fewer).composed_from.empty());
  Plan attention = plan;
  attention.scope = Scope::Attention;
  EXPECT_TRUE(simulate(attention, topology, always).composed_from.empty());
  EXPECT_TRUE(simulate(step_plan_for(StrategyKind::Ulysses, compose_workload(3), topology), topology, always)
                  .composed_from.empty());
  const Topology mixed = Topology::load("lab-mixed");
  const SimResult irregular = simulate(step_plan_for(StrategyKind::Ring, compose_workload(5), mixed), mixed, always);
  EXPECT_TRUE(irregular.composed_from.empty());
  EXPECT_EQ(irregular.layers, 5);
}

// Auto composes where the three replays are less work than the full one: not a 5-layer step
// (3F + 6L > F + 5L), but the same plan's 32-layer step, whose layers dominate its replay.
TEST(SimulatorCompose, AutoComposesWhereItIsLessWork) {
  const Topology topology = Topology::load("dgx-h100", 1);
  EXPECT_TRUE(
      simulate(step_plan_for(StrategyKind::Ulysses, compose_workload(5), topology), topology).composed_from.empty());
  EXPECT_EQ(
      simulate(step_plan_for(StrategyKind::Ulysses, compose_workload(32), topology), topology).composed_from.size(),
      2u);
}

// The trace of a composed step is the 3-layer replay's, and says how many layers it ran.
TEST(SimulatorCompose, TraceShowsTheLongestReplay) {
  const Topology topology = Topology::load("dgx-h100", 1);
  const Plan plan = step_plan_for(StrategyKind::Ulysses, compose_workload(5), topology);
  SimOptions options;
  options.composition = SimOptions::Composition::Always;
  options.trace_path = test::temp_path("compose-trace.json");
  const SimResult composed = simulate(plan, topology, options);
  ASSERT_EQ(composed.composed_from.size(), 2u);
  const auto trace = nlohmann::json::parse(test::read_file(options.trace_path));
  EXPECT_EQ(trace.at("otherData").at("layers_replayed").get<int>(), 3);
  options.composition = SimOptions::Composition::Never;
  simulate(plan, topology, options);
  EXPECT_EQ(nlohmann::json::parse(test::read_file(options.trace_path)).at("otherData").at("layers_replayed").get<int>(),
            5);
  std::filesystem::remove(options.trace_path);
}

}  // namespace
}  // namespace wallfacer
