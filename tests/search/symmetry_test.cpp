// Symmetric GPU orders: the symmetries found are real (every route maps onto an equal one), the
// orders they merge price the same, and the exhaustive search over the merged orders finds
// exactly the optimum of a brute force over every permutation of a node's GPUs, each priced on
// its own by CostModel::evaluate.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include <wallfacer/search/search.hpp>
#include <wallfacer/topology/topology.hpp>
#include "orders.hpp"

namespace wallfacer {
namespace {

// Nodes of `gpus` GPUs on NVSwitch, a PCIe switch and one NIC per pair of GPUs (the DGX A100
// layout with half its NICs), two sockets, one network switch.
std::string paired_nic_yaml(int nodes, int gpus) {
  std::string switches;
  for (int s = 0; s < gpus / 2; ++s)
    switches +=
        fmt::format("      - {{cpu: {}, gpus: [{}, {}], nics: [{}]}}\n", s < gpus / 4 ? 0 : 1, 2 * s, 2 * s + 1, s);
  return fmt::format(R"(name: paired-nics
description: test cluster
gpu: {{model: A100-SXM4-80GB, peak_bf16_tflops: 312, peak_fp16_tflops: 312, memory_GiB: 80, hbm_GBps: 2039, source: test}}
nodes: {}
node:
  gpus: {}
  cpus: {{count: 2, model: test, link: {{bandwidth_GBps: 16, latency_us: 0.5, source: test}}}}
  gpu_fabric: {{type: nvswitch, bandwidth_GBps: 300, latency_us: 0.3, source: test}}
  pcie:
    bandwidth_GBps: 31.5
    latency_us: 0.5
    source: test
    switches:
{}  nics: {{count: {}, rate_Gbps: 200, source: test}}
network: {{type: single_switch, link_latency_us: 0.35, source: test}}
)",
                     nodes, gpus, switches, gpus / 2);
}

bool is_permutation_of_identity(const std::vector<int>& p) {
  std::vector<int> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i)
    if (sorted[i] != int(i)) return false;
  return true;
}

TEST(Symmetry, ExchangingPcieSwitchesWithTheirGpusAndNicsIsASymmetry) {
  const Topology t = Topology::parse(paired_nic_yaml(4, 8), "paired.yaml");
  const detail::NodeOrders orders(t, t.num_gpus());
  // Four twin pairs, and the pairs with their NICs interchangeable, sockets too: 2^4 * 4!.
  EXPECT_EQ(orders.symmetries().size(), 384u);
  EXPECT_EQ(orders.symmetries().front(), orders.identity());
  std::set<std::vector<int>> unique(orders.symmetries().begin(), orders.symmetries().end());
  EXPECT_EQ(unique.size(), orders.symmetries().size());
  for (const auto& sigma : orders.symmetries()) {
    ASSERT_TRUE(is_permutation_of_identity(sigma));
    // Every route keeps its hop count, bandwidth and latency under the permutation.
    for (int a = 0; a < t.num_gpus(); ++a)
      for (int b = 0; b < t.num_gpus(); ++b) {
        if (a == b) continue;
        const int image_a = a / 8 * 8 + sigma[size_t(a % 8)], image_b = b / 8 * 8 + sigma[size_t(b % 8)];
        EXPECT_EQ(t.route(a, b).hops.size(), t.route(image_a, image_b).hops.size());
        EXPECT_EQ(t.route(a, b).bottleneck_GBps, t.route(image_a, image_b).bottleneck_GBps);
      }
  }
  // 8! / 384 classes of orders, against 8! / 2^4 that differ by more than twin swaps.
  EXPECT_EQ(orders.count_distinct(5040), 2520u);
  const auto all = orders.all_distinct(5040);
  EXPECT_EQ(all.size(), 105u);
  EXPECT_EQ(all.front(), orders.identity());
  std::set<std::vector<int>> keys;
  for (const auto& o : all)
    EXPECT_TRUE(keys.insert(orders.canonical(o)).second);
}

TEST(Symmetry, PcieBoxSwitchesAreNotSymmetricWithoutEqualPaths) {
  // pcie-8gpu: every symmetry found maps each twin pair onto a twin pair.
  const Topology t = Topology::load("pcie-8gpu");
  const detail::NodeOrders orders(t, 8);
  EXPECT_GE(orders.symmetries().size(), 16u);
  for (const auto& sigma : orders.symmetries())
    for (int g = 0; g < 8; g += 2)
      EXPECT_EQ(sigma[size_t(g)] / 2, sigma[size_t(g + 1)] / 2);
  const auto all = orders.all_distinct(5040);
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(all.size() * orders.symmetries().size(), size_t(40320));
}

// Strategy, parameters and the plan's knobs: what identifies a candidate across searches.
std::string candidate_key(const Candidate& c) {
  return fmt::format("{} {}", to_string(c.plan.strategy), c.describe_params());
}

struct BruteForceCase {
  int nodes, gpus_per_node, ranks;
};

class BruteForce : public ::testing::TestWithParam<BruteForceCase> {};

// Every permutation of a node's GPUs, each priced by CostModel::evaluate from a fresh plan: the
// exhaustive search (symmetric orders merged, one prepared timing per candidate) gives every
// candidate exactly the best of them, and the same overall best.
TEST_P(BruteForce, ExhaustiveSearchFindsTheBestOfEveryPermutation) {
  const BruteForceCase& c = GetParam();
  const Topology t = Topology::parse(paired_nic_yaml(c.nodes, c.gpus_per_node), "paired.yaml");
  WorkloadOverrides o;
  o.seq = 12288;  // divisible by twice every rank count here (zigzag layouts)
  o.zero_stage = 3;
  const Workload w = load_workload("gpt-3b", o);
  const CostModel model(t, Calibration::defaults());
  SearchOptions options;
  options.mode = SearchMode::Exhaustive;
  options.ranks = c.ranks;
  options.tensor_degrees = {1, 2};
  const SearchResult result = search_plans(t, w, model, options);
  ASSERT_EQ(result.best, 0);
  // The symmetries leave fewer orders to price than there are permutations, even up to twins.
  const detail::NodeOrders node_orders(t, c.ranks);
  EXPECT_LT(node_orders.all_distinct(5040).size(), node_orders.count_distinct(5040));

  std::vector<int> local(size_t(c.gpus_per_node));
  std::iota(local.begin(), local.end(), 0);
  std::vector<std::vector<int>> gpu_orders;
  do {
    std::vector<int> gpus;
    for (int r = 0; r < c.ranks; ++r)
      gpus.push_back(r / c.gpus_per_node * c.gpus_per_node + local[size_t(r % c.gpus_per_node)]);
    gpu_orders.push_back(gpus);
  } while (std::next_permutation(local.begin(), local.end()));

  double overall = std::numeric_limits<double>::infinity();
  int compared = 0;
  for (const Candidate& found : result.candidates) {
    if (!found.feasible) continue;
    double best = std::numeric_limits<double>::infinity();
    for (const auto& gpus : gpu_orders) {
      const Plan plan = make_plan(found.plan.strategy, found.plan.params, found.plan.workload, t, c.ranks, gpus);
      best = std::min(best, model.evaluate(plan).step_ms);
    }
    EXPECT_NEAR(found.cost.step_ms, best, 1e-9 * best) << candidate_key(found);
    overall = std::min(overall, best);
    ++compared;
  }
  EXPECT_GT(compared, 3);
  EXPECT_NEAR(result.candidates.front().cost.step_ms, overall, 1e-9 * overall);
}

INSTANTIATE_TEST_SUITE_P(Clusters, BruteForce,
                         ::testing::Values(BruteForceCase{2, 4, 8}, BruteForceCase{3, 4, 12}, BruteForceCase{2, 4, 6},
                                           BruteForceCase{2, 6, 12}),
                         [](const auto& info) {
                           return fmt::format("n{}_g{}_r{}", info.param.nodes, info.param.gpus_per_node,
                                              info.param.ranks);
                         });

}  // namespace
}  // namespace wallfacer
