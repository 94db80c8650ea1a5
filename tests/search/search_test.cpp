// The topology scheduler: the heuristic finds the exhaustive optimum on small clusters, the same
// inputs give byte-identical plans, the strategy filter holds, and rejections say why.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/search/search.hpp>
#include <wallfacer/topology/topology.hpp>
#include "orders.hpp"

namespace wallfacer {
namespace {

// A 4-GPU board with NVLink between every pair, doubled on two pairs (V100 SXM2 style), joined to
// further boards by one 100 Gb/s NIC.
const char* kMeshYaml = R"(name: test-mesh
description: 4 GPUs in an NVLink mesh, two pairs with double links
gpu: {model: V100-SXM2-32GB, peak_bf16_tflops: 0, peak_fp16_tflops: 125, memory_GiB: 32, hbm_GBps: 900, source: test}
nodes: 2
node:
  gpus: 4
  cpus: {count: 1, model: test, link: {bandwidth_GBps: 10, latency_us: 0.5, source: test}}
  gpu_fabric:
    type: nvlink_mesh
    link_bandwidth_GBps: 25
    latency_us: 0.6
    source: test
    links:
      - {gpus: [0, 1], links: 2}
      - {gpus: [0, 2], links: 1}
      - {gpus: [0, 3], links: 1}
      - {gpus: [1, 2], links: 1}
      - {gpus: [1, 3], links: 1}
      - {gpus: [2, 3], links: 2}
  pcie:
    bandwidth_GBps: 15.75
    latency_us: 0.5
    source: test
    switches:
      - {cpu: 0, gpus: [0, 1], nics: [0]}
      - {cpu: 0, gpus: [2, 3]}
  nics: {count: 1, rate_Gbps: 100, source: test}
network:
  type: single_switch
  link_latency_us: 1.0
  source: test
)";

struct Case {
  std::string name;
  std::function<Topology()> topology;
  std::string model;
  int64_t seq;
  int gpus = 0;  // 0 = all
  std::string dtype = "bf16";
  int batch = 1;
};

Workload workload_of(const Case& c) {
  WorkloadOverrides o;
  o.seq = c.seq;
  o.dtype = c.dtype;
  o.batch = c.batch;
  o.zero_stage = 3;
  return load_workload(c.model, o);
}

SearchResult run(const Topology& topology, const Workload& w, SearchMode mode, int gpus = 0,
                 std::optional<StrategyKind> strategy = std::nullopt) {
  const CostModel model(topology, Calibration::defaults());
  SearchOptions options;
  options.mode = mode;
  options.ranks = gpus;
  options.strategy = strategy;
  return search_plans(topology, w, model, options);
}

std::vector<Case> cases() {
  return {
      {"dgx-h100 x1", [] { return Topology::load("dgx-h100", 1); }, "llama-3-8b", 65536},
      {"dgx-h100 x4", [] { return Topology::load("dgx-h100", 4); }, "gpt-3b", 32768},
      {"dgx-h100 x2 batch 2", [] { return Topology::load("dgx-h100", 2); }, "llama-3-8b", 32768, 0, "bf16", 2},
      {"pcie-8gpu", [] { return Topology::load("pcie-8gpu"); }, "llama-3-8b", 32768},
      {"pcie-8gpu x2", [] { return Topology::load("pcie-8gpu", 2); }, "gpt-3b", 32768},
      {"pcie-8gpu 4 of 8", [] { return Topology::load("pcie-8gpu"); }, "gpt-3b", 16384, 4},
      {"nvlink mesh x2", [] { return Topology::parse(kMeshYaml, "mesh.yaml"); }, "gpt-3b", 16384, 0, "fp16"},
      {"a2-highgpu x2", [] { return Topology::load("a2-highgpu-8g", 2); }, "gpt-3b", 32768},
  };
}

class HeuristicVsExhaustive : public ::testing::TestWithParam<Case> {};

TEST_P(HeuristicVsExhaustive, FindsTheSameBestStepTime) {
  const Case& c = GetParam();
  const Topology topology = c.topology();
  const Workload w = workload_of(c);
  const SearchResult exhaustive = run(topology, w, SearchMode::Exhaustive, c.gpus);
  const SearchResult heuristic = run(topology, w, SearchMode::Heuristic, c.gpus);
  ASSERT_EQ(exhaustive.best, 0) << c.name << ": no feasible plan";
  ASSERT_EQ(heuristic.best, 0);
  const Candidate& e = exhaustive.candidates.front();
  const Candidate& h = heuristic.candidates.front();
  EXPECT_NEAR(h.cost.step_ms, e.cost.step_ms, 1e-9 * e.cost.step_ms)
      << c.name << ": exhaustive " << to_string(e.plan.strategy) << " " << e.describe_params() << " "
      << e.describe_placement() << ", heuristic " << to_string(h.plan.strategy) << " " << h.describe_params() << " "
      << h.describe_placement();
  // Every exhaustive candidate is fully priced; the heuristic never beats it.
  for (const Candidate& x : exhaustive.candidates)
    EXPECT_FALSE(x.pruned);
  EXPECT_GE(h.cost.step_ms, e.cost.step_ms * (1 - 1e-12));
}

INSTANTIATE_TEST_SUITE_P(Clusters, HeuristicVsExhaustive, ::testing::ValuesIn(cases()), [](const auto& info) {
  std::string name = info.param.name;
  for (char& ch : name)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return name;
});

TEST(Search, SameInputsGiveByteIdenticalPlans) {
  const Workload w = workload_of({"", {}, "gpt-3b", 32768});
  std::string first;
  for (int i = 0; i < 2; ++i) {
    // Fresh route caches; 4 of 8 GPUs, so orders also choose which GPUs (many ties to break).
    const Topology topology = Topology::load("pcie-8gpu");
    const SearchResult r = run(topology, w, SearchMode::Auto, 4);
    ASSERT_EQ(r.best, 0);
    std::string text = plan_to_yaml(r.candidates.front().plan);
    for (const Candidate& c : r.candidates)
      text += fmt::format("{} {} {} {:.17g} {}\n", to_string(c.plan.strategy), c.describe_params(),
                          c.describe_placement(), c.cost.step_ms, c.reason);
    if (i == 0)
      first = text;
    else
      EXPECT_EQ(text, first);
  }
}

TEST(Search, StrategyFilterKeepsOnlyThatStrategy) {
  const Topology topology = Topology::load("dgx-h100", 2);
  const Workload w = workload_of({"", {}, "llama-3-8b", 32768});
  const SearchResult r = run(topology, w, SearchMode::Auto, 0, StrategyKind::WallFacer);
  ASSERT_FALSE(r.candidates.empty());
  for (const Candidate& c : r.candidates)
    EXPECT_EQ(c.plan.strategy, StrategyKind::WallFacer);
  ASSERT_EQ(r.best, 0);
  // C = 1, 2, 4 with both placements where they differ.
  EXPECT_GE(r.candidates.size(), 3u);
}

TEST(Search, FeasibleCandidatesComeFirstSortedByStepTime) {
  // Fully priced candidates by step time, then the ones the heuristic pruned by their bound (each
  // above the best price, or it would have been priced), then the rejected ones.
  const Topology topology = Topology::load("dgx-h100", 8);  // 64 GPUs: Ulysses degree 64 > 32 heads
  const Workload w = workload_of({"", {}, "llama-3-8b", 65536});
  const SearchResult r = run(topology, w, SearchMode::Heuristic);
  ASSERT_EQ(r.best, 0);
  bool seen_rejected = false, seen_pruned = false, seen_rule = false;
  for (size_t i = 0; i < r.candidates.size(); ++i) {
    const Candidate& c = r.candidates[i];
    if (!c.feasible) {
      seen_rejected = true;
      EXPECT_FALSE(c.reason.empty());
      seen_rule = seen_rule || c.reason.find("heads") != std::string::npos;
      continue;
    }
    EXPECT_FALSE(seen_rejected) << "feasible candidate after a rejected one";
    if (c.pruned) {
      EXPECT_GT(c.cost.step_ms, r.candidates.front().cost.step_ms) << c.describe_params();
    } else {
      EXPECT_FALSE(seen_pruned) << "priced candidate after a pruned one";
    }
    const Candidate& previous = r.candidates[i > 0 ? i - 1 : 0];
    if (i > 0 && previous.feasible && previous.pruned == c.pruned) {
      EXPECT_LE(previous.cost.step_ms, c.cost.step_ms);
    }
    seen_pruned = seen_pruned || c.pruned;
  }
  EXPECT_TRUE(seen_pruned);
  EXPECT_TRUE(seen_rule);
}

TEST(Search, MemoryAboveBudgetIsRejectedWithItsSize) {
  const Topology topology = Topology::load("dgx-h100", 1);
  WorkloadOverrides o;
  o.seq = int64_t(1) << 22;  // 4M tokens of Llama-3-8B on 8 GPUs
  o.zero_stage = 0;
  const Workload w = load_workload("llama-3-8b", o);
  const SearchResult r = run(topology, w, SearchMode::Heuristic);
  EXPECT_EQ(r.best, -1);
  const std::regex budget(R"(needs [0-9]+\.[0-9] GiB > 72\.0 GiB budget)");
  int memory_rejections = 0;
  for (const Candidate& c : r.candidates)
    memory_rejections += std::regex_search(c.reason, budget) ? 1 : 0;
  EXPECT_GT(memory_rejections, 0);
}

TEST(Search, Bf16OnAGpuWithoutItIsRejected) {
  const Topology topology = Topology::load("dgx-1v", 1);
  const Workload w = workload_of({"", {}, "gpt-3b", 16384});
  const SearchResult r = run(topology, w, SearchMode::Heuristic);
  EXPECT_EQ(r.best, -1);
  for (const Candidate& c : r.candidates)
    EXPECT_FALSE(c.feasible);
}

TEST(Search, TooManyGpusIsAnInputError) {
  const Topology topology = Topology::load("dgx-h100", 1);
  const Workload w = workload_of({"", {}, "gpt-3b", 16384});
  EXPECT_THROW(run(topology, w, SearchMode::Auto, 9), InputError);
}

}  // namespace
}  // namespace wallfacer

namespace wallfacer {
namespace {

// With ZeRO stages and checkpointing modes to choose from, every feasible candidate takes, for its
// checkpointing mode, the lowest ZeRO stage whose step memory fits; brute force over the stages
// below it shows none of them fits.
TEST(StepSearch, ChoosesTheLowestZeroStageThatFits) {
  const Topology topology = Topology::load("dgx-h100", 1);
  Workload w = load_workload("llama-3-8b");
  w.layers = 4;
  w.seq = 16384;
  w.batch = 1;
  const CostModel model(topology, Calibration::defaults());
  SearchOptions options;
  options.scope = Scope::Step;
  options.strategy = StrategyKind::Ulysses;
  options.zero_stages = {0, 1, 2, 3};
  options.checkpointing_modes = {Checkpointing::None, Checkpointing::Full};
  options.memory_budget_fraction = 0.2;  // 16 GiB of 80: forces sharding at least somewhere
  const SearchResult result = search_plans(topology, w, model, options);
  const double budget = 0.2 * topology.gpu().memory_GiB;
  std::set<std::pair<int, Checkpointing>> chosen;
  int priced = 0;
  // Pruned candidates carry their chosen settings too (the choice comes before any pricing).
  for (const Candidate& c : result.candidates) {
    if (!c.feasible) continue;
    priced += c.pruned ? 0 : 1;
    EXPECT_TRUE(c.chose_memory_settings);
    Schedule attention;
    model.build_timed(c.plan, attention);
    if (!c.pruned) {
      EXPECT_LE(c.cost.memory.total_GiB, budget);
    }
    // Listed as feasible, priced or pruned, means its step fits.
    EXPECT_LE(step_memory(c.plan, attention).total_GiB, budget) << c.describe_params();
    chosen.insert({c.plan.workload.zero_stage, c.plan.workload.checkpointing});
    for (int lower = 0; lower < c.plan.workload.zero_stage; ++lower) {
      Plan p = c.plan;
      p.workload.zero_stage = lower;
      EXPECT_GT(step_memory(p, attention).total_GiB, budget) << c.describe_params() << ": ZeRO " << lower << " fits";
    }
  }
  EXPECT_GT(priced, 0);
  EXPECT_GT(chosen.size(), 1u) << "one setting for every candidate: the test does not exercise the choice";
}

// With a budget that only some candidates' steps fit, the rest are rejected with their memory, none
// listed as feasible (a pruned candidate is never memory-checked by pricing, so the rejection must
// come first), and the memory each rejection names is the step memory model's; with memory
// settings chosen by the search and with the workload's own. A candidate that fits and is priced
// carries the figures evaluate_step gives it. On a DGX H100 node the candidates are only placed
// before the step is priced (one node-local order); on two nodes of the 32-GPU A100 cluster (GPU
// pairs under a PCIe switch with a NIC: several orders) the heuristic prices them on the attention layer first
// and prunes there, which must not leave a rejected candidate pruned.
TEST(StepSearch, CandidatesThatCannotFitAreRejectedNotPruned) {
  Workload w = load_workload("llama-3-8b");
  w.layers = 4;
  w.seq = 65536;
  w.batch = 1;
  w.checkpointing = Checkpointing::None;
  for (const std::string preset : {"dgx-h100", WALLFACER_SOURCE_DIR "/bench/a100-32.yaml"})
    for (bool choose : {true, false}) {
      SCOPED_TRACE(fmt::format("{}, {}", preset, choose ? "memory settings chosen" : "the workload's memory settings"));
      const Topology topology = Topology::load(preset, preset == "dgx-h100" ? 1 : 2);
      ASSERT_EQ(detail::NodeOrders(topology, topology.num_gpus()).count_distinct(3) > 1, preset != "dgx-h100");
      const CostModel model(topology, Calibration::defaults());
      SearchOptions options;
      options.mode = SearchMode::Heuristic;
      options.scope = Scope::Step;
      options.tensor_degrees = {1, 2, 4, 8};
      if (choose) {
        options.zero_stages = {0, 1};
        options.checkpointing_modes = {Checkpointing::None};
      }
      // Budgets between the smallest and the largest step memory (16 GPUs hold less each).
      options.memory_budget_fraction = (choose ? 0.2 : 0.25) * (preset == "dgx-h100" ? 1 : 0.6);
      const SearchResult result = search_plans(topology, w, model, options);
      const double budget = options.memory_budget_fraction * topology.gpu().memory_GiB;
      int fit = 0, rejected = 0, priced = 0;
      for (const Candidate& c : result.candidates) {
        if (c.plan.ranks.empty() || c.chose_memory_settings != choose) continue;
        Schedule attention;
        model.build_timed(c.plan, attention);
        const double GiB = step_memory(c.plan, attention).total_GiB;
        if (c.feasible) {
          ++fit;
          EXPECT_LE(GiB, budget) << c.describe_params() << (c.pruned ? " (pruned)" : "");
          if (c.pruned) continue;
          ++priced;
          EXPECT_EQ(c.cost.step_ms, model.evaluate_step(c.plan).step_ms) << c.describe_params();
        } else {
          ++rejected;
          EXPECT_FALSE(c.pruned) << c.describe_params();
          EXPECT_GT(GiB, budget) << c.describe_params() << ": " << c.reason;
          EXPECT_NE(c.reason.find("GiB budget"), std::string::npos) << c.reason;
          EXPECT_NEAR(c.cost.memory.total_GiB, GiB, 1e-9);
        }
      }
      EXPECT_GT(fit, 0) << "no candidate fits: the test does not exercise the search";
      EXPECT_GT(priced, 0);
      EXPECT_GT(rejected, 0) << "every candidate fits: the test does not exercise the rejection";
    }
}

}  // namespace
}  // namespace wallfacer

namespace wallfacer {
namespace {

// Two DGX H100 nodes and a 4-layer Llama-3-8B at 64K tokens, two sequences: a whole-step search
// over tensor and pipeline degrees small enough to price every candidate by brute force.
Workload small_step_workload() {
  Workload w = load_workload("llama-3-8b");
  w.layers = 4;
  w.seq = 65536;
  w.batch = 2;
  return w;
}

SearchOptions tensor_and_pipeline_step_search() {
  SearchOptions options;
  options.scope = Scope::Step;
  options.tensor_degrees = {1, 2, 4, 8};
  options.pipeline_degrees = {1, 2};
  return options;
}

// The whole-step search prices candidates best bound first and prunes on bounds: brute force
// (every feasible candidate priced as a whole step, memory checked) finds no step below the
// chosen plan's, and every pruned candidate's step is at least the best one and at least the
// bound it is listed with. Tensor and pipeline parallel candidates included; with compute slowed
// by communication too (the bounds time the steps at full speed, so they stay below).
void expect_bounds_never_prune_the_best_step(const CostOptions& cost_options) {
  const Topology topology = Topology::load("dgx-h100", 2);
  const Workload w = small_step_workload();
  const CostModel model(topology, Calibration::defaults(), cost_options);
  SearchOptions options = tensor_and_pipeline_step_search();
  const SearchResult result = search_plans(topology, w, model, options);
  ASSERT_GE(result.best, 0);
  const double best = result.candidates[size_t(result.best)].cost.step_ms;
  const double budget = options.memory_budget_fraction * topology.gpu().memory_GiB;
  int pruned = 0, priced = 0;
  for (const Candidate& c : result.candidates) {
    if (!c.feasible) continue;
    const CostBreakdown full = model.evaluate_step(c.plan);
    if (full.memory.total_GiB > budget) continue;
    EXPECT_GE(full.step_ms, best * (1 - 1e-9)) << c.describe_params();
    if (c.pruned) {
      ++pruned;
      EXPECT_LE(c.cost.step_ms, full.step_ms * (1 + 1e-12)) << c.describe_params() << ": " << c.reason;
    } else {
      ++priced;
      EXPECT_NEAR(c.cost.step_ms, full.step_ms, 1e-9 * full.step_ms) << c.describe_params();
    }
  }
  EXPECT_GT(pruned, 0);
  EXPECT_GT(priced, 0);
  // Three priced at the top: they are the three best steps of the brute force, in order.
  options.priced_top = 3;
  const SearchResult top3 = search_plans(topology, w, model, options);
  std::vector<double> steps;
  for (const Candidate& c : top3.candidates)
    if (c.feasible) {
      const CostBreakdown full = model.evaluate_step(c.plan);
      if (full.memory.total_GiB <= budget) steps.push_back(full.step_ms);
    }
  std::sort(steps.begin(), steps.end());
  ASSERT_GE(steps.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const Candidate& c = top3.candidates[i];
    EXPECT_TRUE(c.feasible && !c.pruned) << i;
    EXPECT_NEAR(c.cost.step_ms, steps[i], 1e-9 * steps[i]) << i;
  }
}

TEST(StepSearch, BoundsNeverPruneTheBestStep) {
  expect_bounds_never_prune_the_best_step(CostOptions{});
}

TEST(StepSearch, BoundsNeverPruneTheBestStepWithComputeSlowedByCommunication) {
  CostOptions slowed;
  slowed.comm_slowdown = true;
  expect_bounds_never_prune_the_best_step(slowed);
}

// A sample of timed ranks (each pipeline column timed on its own, so that the timed bound is the
// busiest column's own end) and every strategy's best asked for: brute force (every feasible
// candidate priced, memory checked) finds no step below a pruned candidate's bound, and each
// strategy's best step among those the search priced is its best of all; on three threads the
// same candidates are priced and pruned, for the same reasons. On 32 GPUs sampled at 8 ranks,
// some pricings stop at a column past the step to beat (CostModel::evaluate_step); on 64, some on
// its latest end with compute at full speed (not timed slowed); under ZeRO 3
// some candidates are pruned on their synchronisation stream's bound before any timing.
TEST(StepSearch, SampledBoundsAndStrategyBestsAgreeWithPricingEveryCandidate) {
  int timed_pruned = 0, columns_pruned = 0, sync_pruned = 0, full_speed_pruned = 0;
  for (const auto& [nodes, sample, zero] :
       {std::tuple{2, 4, 1}, std::tuple{4, 8, 1}, std::tuple{4, 8, 3}, std::tuple{8, 8, 1}}) {
    SCOPED_TRACE(fmt::format("{} nodes, {} ranks timed, ZeRO {}", nodes, sample, zero));
    const Topology topology = Topology::load("dgx-h100", nodes);
    Workload w = small_step_workload();
    w.zero_stage = zero;
    // Under ZeRO 3: enough layers for the columns to compose (the synchronisation bound counts
    // their copies), and few enough tokens for the weight gathers to outlast some layouts' compute.
    if (zero == 3) {
      w.layers = 8;
      w.seq = 8192;
    }
    CostOptions sampled;
    sampled.max_timed_ranks = sample;
    const CostModel model(topology, Calibration::defaults(), sampled);
    SearchOptions options = tensor_and_pipeline_step_search();
    options.strategy_bests = true;
    const SearchResult result = search_plans(topology, w, model, options);
    ASSERT_GE(result.best, 0);
    const double budget = options.memory_budget_fraction * topology.gpu().memory_GiB;
    std::map<StrategyKind, double> truth, found;
    for (const Candidate& c : result.candidates) {
      if (!c.feasible) continue;
      const CostBreakdown full = model.evaluate_step(c.plan);
      if (full.memory.total_GiB > budget) continue;
      auto [it, first] = truth.try_emplace(c.plan.strategy, full.step_ms);
      if (!first) it->second = std::min(it->second, full.step_ms);
      if (c.pruned) {
        EXPECT_LE(c.cost.step_ms, full.step_ms * (1 + 1e-12)) << c.describe_params() << ": " << c.reason;
        timed_pruned += c.reason.find("alone takes") != std::string::npos;
        sync_pruned += c.reason.find("synchronisation alone takes") != std::string::npos;
        // Pruned while its columns were timed: the latest end of its first columns, as the whole
        // pricing times them (with the last one's compute at full speed where the reason says
        // so), short of the last.
        if (c.reason.find("of its timed") != std::string::npos) {
          ++columns_pruned;
          const bool at_full_speed = c.reason.find("at full speed") != std::string::npos;
          full_speed_pruned += at_full_speed;
          const std::vector<double>& ends = at_full_speed ? full.latest_full_speed_ends_ms : full.latest_ends_ms;
          ASSERT_FALSE(ends.empty()) << c.describe_params() << ": " << c.reason;
          const auto last = ends.end() - 1;
          EXPECT_NE(std::find(ends.begin(), last, c.cost.step_ms), last) << c.describe_params() << ": " << c.reason;
        }
        continue;
      }
      auto [f, none] = found.try_emplace(c.plan.strategy, c.cost.step_ms);
      if (!none) f->second = std::min(f->second, c.cost.step_ms);
    }
    ASSERT_EQ(found.size(), truth.size());
    for (const auto& [kind, step] : truth)
      EXPECT_NEAR(found[kind], step, 1e-9 * step) << to_string(kind);
    options.threads = 3;
    const SearchResult threaded = search_plans(topology, w, model, options);
    ASSERT_EQ(threaded.candidates.size(), result.candidates.size());
    for (size_t i = 0; i < result.candidates.size(); ++i) {
      EXPECT_EQ(threaded.candidates[i].pruned, result.candidates[i].pruned) << i;
      EXPECT_EQ(threaded.candidates[i].reason, result.candidates[i].reason) << i;
      EXPECT_EQ(threaded.candidates[i].cost.step_ms, result.candidates[i].cost.step_ms) << i;
    }
  }
  EXPECT_GT(timed_pruned, 0);
  EXPECT_GT(columns_pruned, 0);
  EXPECT_GT(full_speed_pruned, 0);
  EXPECT_GT(sync_pruned, 0);
}

// Steps priced ahead on other threads change nothing the search reports: the same candidates in
// the same order, priced or pruned alike, with the same steps and reasons, bit for bit.
TEST(StepSearch, ThreadsGiveTheSameRanking) {
  const Topology topology = Topology::load("dgx-h100", 2);
  const Workload w = small_step_workload();
  const CostModel model(topology, Calibration::defaults());
  SearchOptions options = tensor_and_pipeline_step_search();
  options.priced_top = 3;
  const SearchResult one = search_plans(topology, w, model, options);
  for (int threads : {2, 3, 8}) {
    options.threads = threads;
    const SearchResult many = search_plans(topology, w, model, options);
    EXPECT_EQ(many.best, one.best) << threads;
    ASSERT_EQ(many.candidates.size(), one.candidates.size()) << threads;
    int priced = 0;
    for (size_t i = 0; i < one.candidates.size(); ++i) {
      const Candidate &a = one.candidates[i], &b = many.candidates[i];
      EXPECT_EQ(b.describe_params(), a.describe_params()) << threads << " threads, row " << i;
      EXPECT_EQ(b.plan.strategy, a.plan.strategy) << threads << " threads, row " << i;
      EXPECT_EQ(b.feasible, a.feasible) << threads << " threads, row " << i;
      EXPECT_EQ(b.pruned, a.pruned) << threads << " threads, row " << i;
      EXPECT_EQ(b.reason, a.reason) << threads << " threads, row " << i;
      EXPECT_EQ(b.cost.step_ms, a.cost.step_ms) << threads << " threads, row " << i;
      EXPECT_EQ(b.cost.memory.total_GiB, a.cost.memory.total_GiB) << threads << " threads, row " << i;
      priced += a.feasible && !a.pruned;
    }
    EXPECT_GE(priced, 3);
  }
}

// Pipeline stages split a whole step's layers: an attention search leaves them out (its stages
// would all compute the same blocks, which the checker rejects), a step search tries them.
TEST(Search, PipelineStagesOnlyInWholeStepSearches) {
  const Topology topology = Topology::load("dgx-h100", 2);
  WorkloadOverrides o;
  o.seq = 8192;
  o.batch = 2;
  const Workload w = load_workload("llama-3-8b", o);
  const CostModel model(topology, Calibration::defaults());
  SearchOptions options;
  options.pipeline_degrees = {1, 2};
  options.tensor_degrees = {8};
  for (Scope scope : {Scope::Attention, Scope::Step}) {
    options.scope = scope;
    const SearchResult result = search_plans(topology, w, model, options);
    int pipelined = 0;
    for (const Candidate& c : result.candidates)
      pipelined += c.plan.params.pipeline_parallel > 1;
    if (scope == Scope::Attention)
      EXPECT_EQ(pipelined, 0);
    else
      EXPECT_GT(pipelined, 0);
  }
}

// The attention search on several threads: candidates bounded and priced ahead, including ones
// the heuristic then prunes after all (put back as they were), change nothing it reports. The
// 64-GPU search prunes by bounds; the 2,048-GPU one screens first. At full speed: with compute
// slowed by communication the bounds (timed at full speed) prune none of the 64-GPU candidates.
TEST(Search, ThreadsGiveTheSameAttentionRanking) {
  CostOptions full_speed;
  full_speed.comm_slowdown = false;
  for (int nodes : {8, 256}) {
    const Topology topology = Topology::load("dgx-h100", nodes);
    WorkloadOverrides o;
    o.seq = int64_t(1) << 20;
    const Workload w = load_workload("llama-3-8b", o);
    const CostModel model(topology, Calibration::defaults(), full_speed);
    SearchOptions options;
    options.mode = SearchMode::Heuristic;
    const SearchResult one = search_plans(topology, w, model, options);
    int priced = 0, pruned = 0;
    for (const Candidate& c : one.candidates) {
      priced += c.feasible && !c.pruned;
      pruned += c.reason.rfind("not fully timed", 0) == 0;
    }
    EXPECT_GE(priced, 2) << nodes << " nodes";
    EXPECT_GE(pruned, 1) << nodes << " nodes";
    for (int threads : {2, 3, 8}) {
      options.threads = threads;
      const SearchResult many = search_plans(topology, w, model, options);
      EXPECT_EQ(many.best, one.best) << threads;
      ASSERT_EQ(many.candidates.size(), one.candidates.size()) << threads;
      for (size_t i = 0; i < one.candidates.size(); ++i) {
        const Candidate &a = one.candidates[i], &b = many.candidates[i];
        const std::string row = fmt::format("{} nodes, {} threads, row {}", nodes, threads, i);
        EXPECT_EQ(b.describe_params(), a.describe_params()) << row;
        EXPECT_EQ(b.describe_placement(), a.describe_placement()) << row;
        EXPECT_EQ(b.plan.strategy, a.plan.strategy) << row;
        EXPECT_EQ(b.feasible, a.feasible) << row;
        EXPECT_EQ(b.pruned, a.pruned) << row;
        EXPECT_EQ(b.reason, a.reason) << row;
        EXPECT_EQ(b.cost.step_ms, a.cost.step_ms) << row;
        EXPECT_EQ(b.cost.forward_ms, a.cost.forward_ms) << row;
        EXPECT_EQ(b.cost.volume.p2p_forward, a.cost.volume.p2p_forward) << row;
        EXPECT_EQ(b.cost.memory.total_GiB, a.cost.memory.total_GiB) << row;
      }
    }
  }
}

}  // namespace
}  // namespace wallfacer
