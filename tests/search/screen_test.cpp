// The closed-form screen that picks which candidates the large-cluster search prices
// (planner/search/screen.hpp): properties that follow from its formulas' meaning, independent of
// their constants.
#include <gtest/gtest.h>

#include <set>

#include <wallfacer/cost/calibration.hpp>
#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/plan/workload.hpp>
#include <wallfacer/search/search.hpp>
#include <wallfacer/topology/topology.hpp>
#include "common/strategy_params.hpp"
#include "screen.hpp"

namespace wallfacer {
namespace {

Workload workload_of(int64_t seq) {
  WorkloadOverrides overrides;
  overrides.seq = seq;
  overrides.batch = 1;
  overrides.causal = true;
  return load_workload("llama-3-8b", overrides);
}

StrategyParams ring_params(StrategyKind kind, int sequence_parallel, int ulysses, int window, Placement placement) {
  return test::typed_params(
      kind,
      {.S = sequence_parallel, .u = ulysses, .r = sequence_parallel / ulysses, .w = window, .placement = placement});
}

double estimate(StrategyKind kind, const StrategyParams& p, const Workload& w, const Topology& t) {
  return detail::screen_estimate_ms(kind, p, w, t, Calibration::defaults());
}

TEST(SearchScreen, WindowsOnOneLinkClassCostWhatThePlainRingCosts) {
  // One node: every hop crosses the same kind of link, so cutting the ring into windows moves
  // the same blocks over the same links in the same number of steps as USP's plain ring.
  const Topology topology = Topology::load("dgx-h100", 1);
  for (int64_t seq : {int64_t(16384), int64_t(1) << 20}) {
    const Workload w = workload_of(seq);
    for (int window : {2, 4}) {
      const StrategyParams p = ring_params(StrategyKind::DoubleRing, 8, 2, window, Placement::ContextFirst);
      EXPECT_DOUBLE_EQ(
          estimate(StrategyKind::DoubleRing, p, w, topology),
          estimate(StrategyKind::Usp, ring_params(StrategyKind::Usp, 8, 2, 1, Placement::ContextFirst), w, topology))
          << "seq " << seq << " window " << window;
    }
  }
}

TEST(SearchScreen, WindowsInsideANodeBeatThePlainRingWhenTransfersDominate) {
  // Two DGX H100 nodes, a short sequence: K,V hops take longer than the blocks they overlap. A
  // window of one node's 8 GPUs keeps 14 of the 15 hops on NVLink; the plain ring of 16 crosses
  // the network every step (its hops all pay the inter-node class in the screen).
  const Topology topology = Topology::load("dgx-h100", 2);
  const Workload w = workload_of(16 * 256);
  const double windowed = estimate(StrategyKind::DoubleRing,
                                   ring_params(StrategyKind::DoubleRing, 16, 1, 8, Placement::Default), w, topology);
  const double plain = estimate(StrategyKind::DoubleRing,
                                ring_params(StrategyKind::DoubleRing, 16, 1, 16, Placement::Default), w, topology);
  EXPECT_LT(windowed, plain);
  // Blocks are those of the whole ring either way, and a compute-bound sequence hides every K,V
  // hop. What still differs is the backward's fp32 dK,dV accumulator, whose every hop is exposed:
  // 14 of its 15 ring hops move from the network to NVLink.
  const Workload long_seq = workload_of(int64_t(1) << 20);
  const double long_windowed =
      estimate(StrategyKind::DoubleRing, ring_params(StrategyKind::DoubleRing, 16, 1, 8, Placement::Default), long_seq,
               topology);
  const double long_plain =
      estimate(StrategyKind::DoubleRing, ring_params(StrategyKind::DoubleRing, 16, 1, 16, Placement::Default), long_seq,
               topology);
  const double dkv_bytes = 2.0 * (double(long_seq.seq) / 16) * double(long_seq.kv_width()) * 4;
  auto hop_ms = [&](int a, int b) {
    const Route& r = topology.route(a, b);
    return (r.latency_us * 1e-6 + dkv_bytes / (r.bottleneck_GBps * 1e9)) * 1e3;
  };
  EXPECT_NEAR(long_plain - long_windowed, 14 * (hop_ms(0, 8) - hop_ms(0, 1)), 1e-9 * long_plain);
}

TEST(SearchScreen, EveryRankWaitsForTheWeightGradientAllReduce) {
  // 4,096 GPUs and a short sequence: blocks and K,V hops are tiny, and what remains is the
  // all-reduce of the projections' fp32 gradients over all ranks. As a ring its 2(P-1) step
  // latencies alone would take tens of milliseconds; as NCCL's trees (per channel, a chain of 7
  // NVLink hops in each node and a double binary tree of depth 9 over the 512 nodes, up and down;
  // 4 channels, one per two NICs) each node sends twice a quarter of the buffer per NIC.
  const Topology topology = Topology::load("dgx-h100", 512);
  const Workload w = workload_of(4096 * 16);
  const int P = topology.num_gpus();
  const Route& inter = topology.route(0, topology.gpus_per_node());
  const Route& intra = topology.route(0, 1);
  const double alpha_s = inter.latency_us * 1e-6, bytes_per_s = inter.bottleneck_GBps * 1e9;
  const double bytes = double(w.attention_parameters_per_layer()) * 4;
  const double ring_ms = (2.0 * (P - 1) * alpha_s + 2.0 * (P - 1) / P * bytes / bytes_per_s) * 1e3;
  const double tree_ms = (2.0 * (7 * intra.latency_us * 1e-6 + 9 * alpha_s) + 2 * bytes / (4 * bytes_per_s)) * 1e3;
  ASSERT_LT(tree_ms, ring_ms / 3);
  const double usp =
      estimate(StrategyKind::Usp, ring_params(StrategyKind::Usp, P, 8, 1, Placement::HeadFirst), w, topology);
  EXPECT_GT(usp, tree_ms);
  EXPECT_LT(usp, ring_ms);  // the ring's latencies are not charged
  const StrategyParams team{.sequence_parallel = P, .knobs = WallFacerKnobs{.team = 16}};
  EXPECT_GT(estimate(StrategyKind::WallFacer, team, w, topology), tree_ms);
}

TEST(SearchScreen, NoScreenedOutEstimateBeatsTheChosenPlan) {
  // Above 512 GPUs the search prices only what the screen keeps, then prices any candidate left
  // out whose estimate is below the best price found; on 1,024 GPUs that finds the plan that
  // bounding every candidate finds.
  const Topology topology = Topology::load("dgx-h100", 128);
  const Workload w = workload_of(int64_t(1) << 20);
  const CostModel model(topology, Calibration::defaults());
  const SearchResult screened = search_plans(topology, w, model, SearchOptions{});
  ASSERT_EQ(screened.best, 0);
  const double best = screened.candidates.front().cost.step_ms;
  int screened_out = 0;
  for (const Candidate& c : screened.candidates) {
    if (c.reason.rfind("screened out", 0) != 0) continue;
    ++screened_out;
    EXPECT_GE(c.cost.step_ms, best) << c.describe_params() << " " << c.describe_placement();
  }
  EXPECT_GT(screened_out, 0);
  SearchOptions everything;
  everything.screen_above_gpus = 1 << 30;
  const SearchResult full = search_plans(topology, w, model, everything);
  EXPECT_DOUBLE_EQ(best, full.candidates.front().cost.step_ms);
}

// Screened-out candidates whose estimate beats the best price are priced after all in estimate
// order, the next ones ahead on other threads: three threads rescue, price, prune and reject the
// same candidates, with the same figures and reasons, as one thread does. The screen keeps only
// each strategy's best-screened candidate here, so that candidates are rescued.
TEST(SearchScreen, ThreadsRescueTheScreenedOutCandidatesOneThreadRescues) {
  const Topology topology = Topology::load("dgx-h100", 4);
  const Workload w = workload_of(int64_t(1) << 18);
  const CostModel model(topology, Calibration::defaults());
  for (const Scope scope : {Scope::Attention, Scope::Step}) {
    SCOPED_TRACE(to_string(scope));
    SearchOptions options;
    options.scope = scope;
    options.mode = SearchMode::Heuristic;
    options.screen_above_gpus = 8;
    options.screen_keep = 0;
    options.screen_ties = 1;
    const SearchResult alone = search_plans(topology, w, model, options);
    options.threads = 3;
    const SearchResult threaded = search_plans(topology, w, model, options);
    ASSERT_GE(alone.best, 0);
    EXPECT_EQ(threaded.best, alone.best);
    ASSERT_EQ(threaded.candidates.size(), alone.candidates.size());
    std::set<StrategyKind> strategies;
    int priced = 0, screened_out = 0;
    for (size_t i = 0; i < alone.candidates.size(); ++i) {
      const Candidate& a = alone.candidates[i];
      const Candidate& b = threaded.candidates[i];
      SCOPED_TRACE(a.describe_params() + " " + a.describe_placement());
      EXPECT_EQ(b.plan.strategy, a.plan.strategy);
      EXPECT_EQ(b.describe_params(), a.describe_params());
      EXPECT_EQ(b.describe_placement(), a.describe_placement());
      EXPECT_EQ(b.feasible, a.feasible);
      EXPECT_EQ(b.pruned, a.pruned);
      EXPECT_EQ(b.screened, a.screened);
      EXPECT_EQ(b.reason, a.reason);
      EXPECT_EQ(b.cost.step_ms, a.cost.step_ms);
      strategies.insert(a.plan.strategy);
      screened_out += a.screened;
      priced += a.feasible && !a.screened && !a.pruned;
    }
    EXPECT_GT(screened_out, 0);
    // More than the one candidate a strategy the screen kept were priced: some were rescued.
    EXPECT_GT(priced, int(strategies.size()));
  }
}

}  // namespace
}  // namespace wallfacer
