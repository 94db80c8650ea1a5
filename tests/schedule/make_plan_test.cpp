// make_plan on a real topology preset: rank slots, placements and the plan-to-schedule path.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include <wallfacer/topology/topology.hpp>
#include "common/strategy_params.hpp"
#include "schedule/test_plans.hpp"

namespace wallfacer {
namespace {

StrategyParams usp(int u, int r, Placement placement) {
  return test::typed_params(StrategyKind::Usp, {.S = u * r, .u = u, .r = r, .placement = placement});
}

TEST(MakePlan, FillsSlotsFromTheTopology) {
  const Topology topo = Topology::load("dgx-h100", 2);
  const Workload w = testing::small_workload(64, 8, 8, true);
  const Plan plan = make_plan(StrategyKind::Ring, testing::seq_params(16), w, topo, 16);
  ASSERT_EQ(plan.num_ranks(), 16);
  EXPECT_EQ(plan.topology_name, topo.name());
  EXPECT_EQ(plan.topology_hash, topo.content_hash());
  for (const RankSlot& slot : plan.ranks) {
    EXPECT_EQ(slot.gpu, slot.rank);
    EXPECT_EQ(slot.node, topo.node_of_gpu(slot.gpu));
    EXPECT_EQ(slot.local_gpu, topo.local_gpu(slot.gpu));
    const int nic = topo.nic_of_gpu(slot.gpu);
    EXPECT_EQ(slot.nic, nic >= 0 ? topo.devices()[size_t(nic)].name : "");
  }
  // The strategy's groups; the world all-reduce of a small model's gradients over two nodes is
  // latency-bound, so the planner makes it a tree (all_reduce_test.cpp checks the rule).
  std::vector<CommGroup> expected = make_groups(StrategyKind::Ring, testing::seq_params(16), 16);
  for (CommGroup& g : expected)
    if (g.kind == GroupKind::World) g.all_reduce = AllReduceAlgorithm::Tree;
  EXPECT_EQ(plan.groups, expected);
  EXPECT_NO_THROW(build_schedule(plan));
}

TEST(MakePlan, ContextFirstPutsRingGroupsOnConsecutiveGpus) {
  const Topology topo = Topology::load("dgx-h100", 2);
  const Workload w = testing::small_workload(64, 8, 8, true);
  const Plan head = make_plan(StrategyKind::Usp, usp(2, 8, Placement::HeadFirst), w, topo, 16);
  const Plan ctx = make_plan(StrategyKind::Usp, usp(2, 8, Placement::ContextFirst), w, topo, 16);
  // Same logical groups; ring1 = {1, 3, ..., 15}.
  EXPECT_EQ(head.groups, ctx.groups);
  const int ring1 = ctx.find_group("ring1");
  ASSERT_GE(ring1, 0);
  std::vector<int> head_gpus, ctx_gpus;
  for (int r : ctx.groups[size_t(ring1)].ranks) {
    head_gpus.push_back(head.ranks[size_t(r)].gpu);
    ctx_gpus.push_back(ctx.ranks[size_t(r)].gpu);
  }
  EXPECT_EQ(head_gpus, (std::vector<int>{1, 3, 5, 7, 9, 11, 13, 15}));
  EXPECT_EQ(ctx_gpus, (std::vector<int>{8, 9, 10, 11, 12, 13, 14, 15}));  // one node
}

TEST(MakePlan, RejectsInfeasibleAndOversizedRequests) {
  const Topology topo = Topology::load("dgx-h100", 1);
  const Workload w = testing::small_workload(64, 8, 8, true);
  EXPECT_THROW(make_plan(StrategyKind::Ring, testing::seq_params(16), w, topo, 16), InputError);
  EXPECT_THROW(make_plan(StrategyKind::Ulysses, testing::seq_params(3), w, topo, 3), InputError);
}

// make_plan takes its groups from a store the whole process shares (a search makes the plans of
// the same candidates again in every trial of its suggestions); it finds groups by a hash of the
// key and must compare keys in full (a placement is not hashed). Every parameter set
// of every strategy, with tensor and pipeline parallelism around it, planned twice in turn (the
// second time from the store) has the groups that make_groups makes for it alone.
TEST(MakePlan, PlansMadeAgainHaveTheirOwnStrategysGroups) {
  const Topology topo = Topology::load("dgx-h100", 2);
  const Workload w = testing::small_workload(256, 8, 8, true, 4);
  int plans = 0;
  for (int pass = 0; pass < 2; ++pass)
    testing::for_each_split_plan(w, 16, {{1, 1}, {2, 1}, {1, 2}, {2, 2}}, [&](const Plan& hand, const testing::Split&) {
      const StrategyParams& q = hand.params;
      SCOPED_TRACE(fmt::format("pass {} {} S={} D={} T={} P={} C={} u={} w={} placement {}", pass,
                               to_string(hand.strategy), q.sequence_parallel, q.data_parallel, q.tensor_parallel,
                               q.pipeline_parallel, team_size(q), ulysses_degree(q), window_size(q),
                               int(placement_of(q))));
      const Plan plan = make_plan(hand.strategy, hand.params, w, topo, 16);
      const std::vector<CommGroup> expected = make_groups(hand.strategy, hand.params, 16);
      ASSERT_EQ(plan.groups.size(), expected.size());
      for (size_t g = 0; g < expected.size(); ++g) {
        EXPECT_EQ(plan.groups[g].name, expected[g].name);
        EXPECT_EQ(plan.groups[g].kind, expected[g].kind);
        EXPECT_EQ(plan.groups[g].ranks, expected[g].ranks);
      }
      plans += pass;
    });
  EXPECT_GT(plans, 40);
}

}  // namespace
}  // namespace wallfacer
