// Node-local GPU orders: which GPUs are interchangeable, and how many distinct orders remain.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <set>

#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/plan/workload.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include <wallfacer/topology/topology.hpp>
#include "orders.hpp"

namespace wallfacer {
namespace {

// Number of distinct classes in a twin-class vector.
size_t classes(const std::vector<int>& twin) {
  return std::set<int>(twin.begin(), twin.end()).size();
}

TEST(NodeOrders, NvSwitchGpusAreAllInterchangeable) {
  const Topology t = Topology::load("dgx-h100", 2);
  const detail::NodeOrders orders(t, t.num_gpus());
  EXPECT_EQ(classes(orders.twin_class()), 1u);
  EXPECT_EQ(orders.count_distinct(100), 1u);
  EXPECT_EQ(orders.all_distinct(100).size(), 1u);
}

TEST(NodeOrders, PcieSwitchPairsAreTwins) {
  // pcie-8gpu: four switches with two GPUs each; only GPUs under one switch are interchangeable.
  const Topology t = Topology::load("pcie-8gpu");
  const detail::NodeOrders orders(t, 8);
  const auto& twin = orders.twin_class();
  EXPECT_EQ(classes(twin), 4u);
  for (int g = 0; g < 8; g += 2)
    EXPECT_EQ(twin[size_t(g)], twin[size_t(g + 1)]);
  // 8! / (2!)^4 orders that differ by more than twin swaps; of those, the ones that exchanging
  // whole switches (a symmetry) maps onto each other count once, the identity first.
  EXPECT_EQ(orders.count_distinct(5040), 2520u);
  const auto all = orders.all_distinct(5040);
  EXPECT_EQ(all.size(), 2520u * 16 / orders.symmetries().size());
  EXPECT_EQ(all.front(), orders.identity());
  std::set<std::vector<int>> unique(all.begin(), all.end());
  EXPECT_EQ(unique.size(), all.size());
  for (const auto& o : all)
    EXPECT_TRUE(std::is_permutation(o.begin(), o.end(), orders.identity().begin()));
}

// count_distinct counts sequences of twin classes in closed form: against every permutation of a
// node's GPUs, the distinct class sequences of the positions used, on nodes of several structures
// and for every number of GPUs used; and against 16! / 2^8 for 16 GPUs under 8 PCIe switches.
TEST(NodeOrders, DistinctOrdersAreCountedAsEveryPermutationGives) {
  for (const char* preset : {"pcie-8gpu", "dgx-1v", "summit", "dgx-a100"}) {
    const Topology t = Topology::load(preset, 2);
    for (int ranks = 2; ranks <= t.gpus_per_node(); ++ranks) {
      const detail::NodeOrders orders(t, ranks);
      if (!orders.applicable()) continue;
      std::vector<int> order = orders.identity();
      std::set<std::vector<int>> sequences;
      do {
        std::vector<int> sequence;
        for (int pos = 0; pos < ranks; ++pos)
          sequence.push_back(orders.twin_class()[size_t(order[size_t(pos)])]);
        sequences.insert(sequence);
      } while (std::next_permutation(order.begin(), order.end()));
      EXPECT_EQ(orders.count_distinct(1000000), sequences.size()) << preset << ", " << ranks << " GPUs";
      EXPECT_EQ(orders.count_distinct(sequences.size() - 1), sequences.size()) << "saturates one above the limit";
    }
  }
  const Topology a2 = Topology::load("a2-megagpu-16g", 2);
  const detail::NodeOrders orders(a2, 32);
  ASSERT_EQ(classes(orders.twin_class()), 8u);
  EXPECT_EQ(orders.count_distinct(size_t(1) << 40), size_t(81729648000));  // 16! / 2^8
  EXPECT_EQ(orders.count_distinct(50000), 50001u);
  EXPECT_TRUE(orders.all_distinct(50000).empty());
}

TEST(NodeOrders, TooManyOrdersGiveNone) {
  const Topology t = Topology::load("pcie-8gpu");
  const detail::NodeOrders orders(t, 8);
  EXPECT_TRUE(orders.all_distinct(100).empty());
  EXPECT_EQ(orders.count_distinct(100), 101u);
}

TEST(NodeOrders, BestRingOrderKeepsSwitchPartnersAdjacent) {
  const Topology t = Topology::load("pcie-8gpu");
  const detail::NodeOrders orders(t, 8);
  const auto best = orders.best_ring_order(50000);
  // Consecutive positions 2k, 2k+1 sit under one PCIe switch (pairs {0,1}, {2,3}, ...).
  for (int k = 0; k < 4; ++k)
    EXPECT_EQ(best[size_t(2 * k)] / 2, best[size_t(2 * k + 1)] / 2) << k;
}

// best_ring_order remembers the order it found by the topology's content, the GPUs used per node
// and the nodes scored; scored anew on one thread, every case must give the same order, whatever
// was asked before it (fewer GPUs of a node, one node instead of two, other nodes, another cluster).
TEST(NodeOrders, RememberedRingOrderIsTheOneScoredAnew) {
  const Topology pcie2 = Topology::load("pcie-8gpu", 2), pcie4 = Topology::load("pcie-8gpu", 4);
  const Topology cube2 = Topology::load("dgx-1v", 2), cube16 = Topology::load("dgx-1v", 16);
  const std::vector<std::pair<const Topology*, int>> cases{{&pcie2, 16},   {&pcie2, 4},    {&pcie2, 12}, {&pcie2, 8},
                                                           {&pcie2, 6},    {&pcie4, 32},   {&cube2, 16}, {&cube2, 8},
                                                           {&cube16, 128}, {&cube16, 120}, {&cube2, 5},  {&pcie2, 16}};
  std::set<std::vector<int>> distinct;
  for (const auto& [topology, ranks] : cases) {
    const detail::NodeOrders orders(*topology, ranks);
    const std::vector<int> remembered = orders.best_ring_order(50000, 2);
    EXPECT_EQ(remembered, orders.score_ring_orders(50000, 1)) << topology->name() << ", " << ranks << " GPUs";
    distinct.insert(remembered);
  }
  EXPECT_GT(distinct.size(), 2u);  // the cases do not all share one order
}

TEST(NodeOrders, GpuOrderAppliesTheLocalOrderToEveryNode) {
  const Topology t = Topology::load("pcie-8gpu", 2);
  const detail::NodeOrders orders(t, 16);
  const std::vector<int> local{1, 0, 3, 2, 5, 4, 7, 6};
  const auto gpus = orders.gpu_order(local);
  ASSERT_EQ(gpus.size(), 16u);
  for (int r = 0; r < 16; ++r)
    EXPECT_EQ(gpus[size_t(r)], (r / 8) * 8 + local[size_t(r % 8)]);
}

// The search moves one plan from order to order instead of making it anew: every field must be
// what make_plan gives for that order (pipeline stages and tensor slices permute the positions).
TEST(NodeOrders, PlacingAPlanGivesWhatMakePlanGives) {
  const Topology t = Topology::load("pcie-8gpu", 2);
  const detail::NodeOrders orders(t, 16);
  const Workload w = load_workload("gpt-3b", {});
  std::vector<std::pair<StrategyKind, StrategyParams>> cases;
  for (StrategyKind kind : all_strategies())
    for (StrategyParams params : enumerate_params(kind, w, 8)) {
      params.pipeline_parallel = 2;
      if (check_feasible(kind, params, w, 16).ok) cases.emplace_back(kind, params);
    }
  for (StrategyKind kind : {StrategyKind::Ring, StrategyKind::Usp})
    for (StrategyParams params : enumerate_params(kind, w, 16))
      if (check_feasible(kind, params, w, 16).ok) cases.emplace_back(kind, params);
  ASSERT_GT(cases.size(), 4u);
  const std::vector<std::vector<int>> all = orders.all_distinct(5040);
  for (const auto& [kind, params] : cases) {
    Plan placed = make_plan(kind, params, w, t, 16);
    std::vector<int> positions;
    for (const RankSlot& slot : placed.ranks)
      positions.push_back(slot.gpu);
    for (size_t o = 0; o < all.size(); o += 7) {
      orders.place(placed, positions, all[o]);
      const Plan made = make_plan(kind, params, w, t, 16, orders.gpu_order(all[o]));
      ASSERT_EQ(placed.ranks, made.ranks) << to_string(kind) << " order " << o;
      for (size_t g = 0; g < made.groups.size(); ++g)
        ASSERT_EQ(placed.groups[g].all_reduce, made.groups[g].all_reduce);
    }
  }
}

// The search prices one candidate under many GPU orders with one PreparedTiming: compute durations
// and all-to-all slices found once, each distinct transfer or collective priced once per order and
// copied to every op that names it. Under every order that must equal pricing every op on its own
// (CostModel::evaluate_times of the schedule), to the bit: ring and tree all-reduces, all-to-alls,
// data, tensor and pipeline parallelism, estimate and bound timing.
TEST(NodeOrders, PricingDistinctTransfersOncePerOrderEqualsPricingEveryOp) {
  const Topology t = Topology::load("pcie-8gpu", 2);
  const detail::NodeOrders orders(t, 16);
  const Workload w = load_workload("gpt-3b", {});
  const CostModel model(t, Calibration::defaults());
  const std::vector<std::vector<int>> all = orders.all_distinct(5040);
  ASSERT_GT(all.size(), 20u);
  int priced = 0;
  for (StrategyKind kind : all_strategies())
    for (int T : {1, 2})
      for (int Pp : {1, 2})
        for (StrategyParams params : enumerate_params(kind, w, 16 / (T * Pp))) {
          params.tensor_parallel = T;
          params.pipeline_parallel = Pp;
          if (!check_feasible(kind, params, w, 16).ok) continue;
          for (AllReduceAlgorithm algorithm : {AllReduceAlgorithm::Ring, AllReduceAlgorithm::Tree}) {
            Plan plan = make_plan(kind, params, w, t, 16, {}, algorithm);
            Schedule schedule;
            model.build_timed(plan, schedule);
            std::vector<int> positions;
            for (const RankSlot& slot : plan.ranks)
              positions.push_back(slot.gpu);
            for (Timing timing : {Timing::Estimate, Timing::LowerBound}) {
              std::optional<PreparedTiming> prepared;
              for (size_t o = 0; o < all.size(); o += 11) {
                orders.place(plan, positions, all[o]);
                if (!prepared) prepared.emplace(plan, schedule, timing);
                const CostBreakdown once = model.evaluate_times(plan, *prepared, /*with_parts=*/false);
                const CostBreakdown every = model.evaluate_times(plan, schedule, timing);
                ASSERT_EQ(once.step_ms, every.step_ms) << to_string(kind) << " order " << o;
                ASSERT_EQ(once.forward_ms, every.forward_ms) << to_string(kind) << " order " << o;
                ASSERT_EQ(once.compute_ms, every.compute_ms) << to_string(kind) << " order " << o;
                ++priced;
              }
            }
          }
        }
  EXPECT_GT(priced, 200);
}

// A cost model keeps the prices of flows that run together by the GPUs they connect and hands them
// to every later pricer (FlowPriceCache): one model pricing many candidates under many orders, the
// whole step included, gives each exactly what a fresh model gives it. The nodes have two NICs, so
// ring collectives across them run on two channels whose rings depend on the order.
TEST(NodeOrders, FlowPricesKeptAcrossPlansEqualPricesComputedAfresh) {
  const Topology t = Topology::load("pcie-8gpu", 2);
  const detail::NodeOrders orders(t, 16);
  Workload w = load_workload("gpt-3b", {});
  w.layers = 2;
  const CostModel shared(t, Calibration::defaults());
  const std::vector<std::vector<int>> all = orders.all_distinct(5040);
  int compared = 0;
  for (StrategyKind kind : all_strategies())
    for (int T : {1, 2})
      for (StrategyParams params : enumerate_params(kind, w, 16 / T)) {
        params.tensor_parallel = T;
        if (!check_feasible(kind, params, w, 16).ok) continue;
        for (size_t o = 0; o < all.size(); o += 53) {
          Plan plan = make_plan(kind, params, w, t, 16, orders.gpu_order(all[o]));
          const CostModel fresh(t, Calibration::defaults());
          ASSERT_EQ(shared.evaluate(plan).step_ms, fresh.evaluate(plan).step_ms) << to_string(kind) << " order " << o;
          if (o % 159 != 0) continue;
          plan.scope = Scope::Step;
          const CostModel fresh_step(t, Calibration::defaults());
          const CostBreakdown a = shared.evaluate_step(plan), b = fresh_step.evaluate_step(plan);
          ASSERT_EQ(a.step_ms, b.step_ms) << to_string(kind) << " order " << o;
          ASSERT_EQ(a.attention_ms, b.attention_ms) << to_string(kind) << " order " << o;
          ++compared;
        }
      }
  EXPECT_GT(compared, 40);
}

}  // namespace
}  // namespace wallfacer
