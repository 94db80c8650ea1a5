// Every strategy's schedule (every parameter combination the planner enumerates: data-parallel
// splits, WallFacer team sizes and both placements, USP degrees, double-ring windows) executed
// for real on 1, 2, 4 and 8 ranks with the local threads backend, causal and full, GQA and MQA,
// and a sequence length that divides unevenly: each run within 1e-4 (relative, fp32) of the fp64
// naive reference, WeightGrad all-reduces exact, and all strategies agreeing with each other.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>

#include <wallfacer/runtime/layer_runner.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include <wallfacer/topology/topology.hpp>
#include "runtime/hand_programs.hpp"

namespace wallfacer::testing {
namespace {

using runtime::LayerRunResult;

const Topology& eight_gpus() {
  static const Topology topology = Topology::load("dgx-h100");
  return topology;
}

struct NamedWorkload {
  std::string name;
  Workload workload;
};

std::vector<NamedWorkload> workloads() {
  return {
      {"causal-gqa", tiny_workload(64, 8, 4, 16, 2, true)},
      {"full-gqa", tiny_workload(64, 8, 4, 16, 2, false)},
      {"causal-uneven", tiny_workload(50, 4, 2, 16, 1, true)},
      {"full-mqa-uneven", tiny_workload(42, 4, 1, 32, 1, false)},
  };
}

// Largest |a - b| over largest |b| of two tensors.
double relative_difference(const runtime::Tensor<double>& a, const runtime::Tensor<double>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.data.size(); ++i) {
    diff = std::max(diff, std::abs(a.data[i] - b.data[i]));
    scale = std::max(scale, std::abs(b.data[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

// Outputs of the single-rank ring: what every strategy must agree with.
const runtime::LayerOutputs& baseline(const NamedWorkload& nw) {
  static std::map<std::string, runtime::LayerOutputs> cache;
  auto it = cache.find(nw.name);
  if (it != cache.end()) return it->second;
  StrategyParams params;
  Plan plan = make_plan(StrategyKind::Ring, params, nw.workload, eight_gpus(), 1);
  auto inputs = runtime::seeded_inputs(nw.workload, 3, false);
  LayerRunResult r = runtime::run_layer_local(plan, build_schedule(plan), inputs, {});
  return cache.emplace(nw.name, r.outputs).first->second;
}

std::string describe(StrategyKind kind, const StrategyParams& p, int ranks, const std::string& workload) {
  return fmt::format("{} P={} S={} D={} C={} u={} w={} placement={} on {}", to_string(kind), ranks, p.sequence_parallel,
                     p.data_parallel, team_size(p), ulysses_degree(p), window_size(p), to_string(placement_of(p)),
                     workload);
}

class EveryStrategy : public ::testing::TestWithParam<StrategyKind> {};

TEST_P(EveryStrategy, MatchesReferenceAndAgrees) {
  const StrategyKind kind = GetParam();
  int runs = 0, multi_rank_runs = 0;
  for (const NamedWorkload& nw : workloads()) {
    const runtime::LayerOutputs& base = baseline(nw);
    auto inputs = runtime::seeded_inputs(nw.workload, 3, false);
    for (int P : {1, 2, 4, 8}) {
      for (const StrategyParams& params : enumerate_params(kind, nw.workload, P)) {
        if (!check_feasible(kind, params, nw.workload, P).ok) continue;
        const std::string what = describe(kind, params, P, nw.name);
        SCOPED_TRACE(what);
        Plan plan = make_plan(kind, params, nw.workload, eight_gpus(), P);
        runtime::LayerRunOptions options;
        options.check = true;
        LayerRunResult r = runtime::run_layer_local(plan, build_schedule(plan), inputs, options);
        ASSERT_EQ(r.checks.size(), 5u);
        for (const auto& c : r.checks)
          EXPECT_TRUE(c.ok) << c.name << " relative error " << c.stats.relative << " > " << c.tolerance;
        EXPECT_EQ(r.weight_grad.present, P > 1);
        EXPECT_TRUE(r.weight_grad.ok) << r.weight_grad.first_mismatch;
        EXPECT_LE(relative_difference(r.outputs.o, base.o), 1e-4);
        EXPECT_LE(relative_difference(r.outputs.lse, base.lse), 1e-4);
        EXPECT_LE(relative_difference(r.outputs.dq, base.dq), 1e-4);
        EXPECT_LE(relative_difference(r.outputs.dk, base.dk), 1e-4);
        EXPECT_LE(relative_difference(r.outputs.dv, base.dv), 1e-4);
        ++runs;
        if (P > 1) ++multi_rank_runs;
      }
    }
  }
  // Every strategy runs on several rank counts for these workloads.
  EXPECT_GE(multi_rank_runs, 3) << to_string(kind);
  RecordProperty("runs", runs);
}

INSTANTIATE_TEST_SUITE_P(Runtime, EveryStrategy, ::testing::ValuesIn(all_strategies()),
                         [](const ::testing::TestParamInfo<StrategyKind>& info) {
                           std::string name = to_string(info.param);
                           for (char& ch : name)
                             if (ch == '-') ch = '_';
                           return name;
                         });

// WallFacer with every team size the rank count allows (C^2 | P), in both placements, built
// explicitly rather than through enumerate_params.
TEST(WallFacerRuntime, EveryTeamSizeAndPlacement) {
  int runs = 0;
  for (const NamedWorkload& nw : {workloads()[0], workloads()[1]}) {
    auto inputs = runtime::seeded_inputs(nw.workload, 3, false);
    for (int P : {4, 8})
      for (int C = 1; C * C <= P; ++C) {
        if (P % (C * C) != 0) continue;
        for (Placement placement : {Placement::CollectIntra, Placement::P2PIntra}) {
          const StrategyParams params{
              .sequence_parallel = P,
              .knobs = WallFacerKnobs{
                  C, placement == Placement::P2PIntra ? TeamPlacement::P2PIntra : TeamPlacement::CollectIntra}};
          const std::string what = describe(StrategyKind::WallFacer, params, P, nw.name);
          SCOPED_TRACE(what);
          ASSERT_TRUE(check_feasible(StrategyKind::WallFacer, params, nw.workload, P).ok) << what;
          Plan plan = make_plan(StrategyKind::WallFacer, params, nw.workload, eight_gpus(), P);
          runtime::LayerRunOptions options;
          options.check = true;
          LayerRunResult r = runtime::run_layer_local(plan, build_schedule(plan), inputs, options);
          for (const auto& c : r.checks)
            EXPECT_TRUE(c.ok) << c.name << " relative error " << c.stats.relative;
          EXPECT_TRUE(r.ok);
          ++runs;
        }
      }
  }
  EXPECT_EQ(runs, 2 * (2 * 2 + 2 * 2));  // P = 4 and 8 each allow C = 1, 2
}

}  // namespace
}  // namespace wallfacer::testing
