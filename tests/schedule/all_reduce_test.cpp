// The double binary tree against NCCL's documented trees and brute-force checks, its rounds as a
// proper edge colouring, its critical latency against the closed form, and the planner's choice
// of tree or ring.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/plan/workload.hpp>
#include <wallfacer/schedule/all_reduce.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include <wallfacer/topology/topology.hpp>
#include "schedule/test_plans.hpp"

namespace wallfacer {
namespace {

// parent -> children of one tree over n positions, from double_tree_links.
std::map<int, std::set<int>> children_of(int n, int tree) {
  std::map<int, std::set<int>> out;
  for (int k = 0; k < n; ++k) {
    const TreeLinks links = double_tree_links(n, k)[size_t(tree)];
    for (int child : links.children)
      if (child >= 0) out[k].insert(child);
  }
  return out;
}

TEST(DoubleBinaryTree, MatchesNcclsDocumentedTrees) {
  // NCCL's trees.cc draws the trees for 12 positions (second tree mirrored) and 13 (shifted).
  using Children = std::map<int, std::set<int>>;
  const Children tree0_12{{0, {8}}, {8, {4, 10}}, {4, {2, 6}}, {2, {1, 3}}, {6, {5, 7}}, {10, {9, 11}}};
  const Children tree1_12{{11, {3}}, {3, {1, 7}}, {1, {0, 2}}, {7, {5, 9}}, {5, {4, 6}}, {9, {8, 10}}};
  const Children tree1_13{{1, {9}}, {9, {5, 0}}, {5, {3, 7}}, {0, {11}}, {3, {2, 4}}, {7, {6, 8}}, {11, {10, 12}}};
  EXPECT_EQ(children_of(12, 0), tree0_12);
  EXPECT_EQ(children_of(12, 1), tree1_12);
  EXPECT_EQ(children_of(13, 1), tree1_13);
}

TEST(DoubleBinaryTree, EveryTreeSpansAllPositionsAndInnerPositionsAreLeavesOfTheOther) {
  for (int n = 1; n <= 300; ++n) {
    for (int tree = 0; tree < 2; ++tree) {
      int roots = 0, deepest = 0;
      for (int k = 0; k < n; ++k) {
        const TreeLinks links = double_tree_links(n, k)[size_t(tree)];
        if (links.parent < 0) ++roots;
        for (int child : links.children)
          if (child >= 0) {
            ASSERT_LT(child, n);
            EXPECT_EQ(double_tree_links(n, child)[size_t(tree)].parent, k) << n << " " << tree << " " << k;
          }
        // Walking up reaches the root in fewer than n steps: no cycles.
        int at = k, hops = 0;
        while (double_tree_links(n, at)[size_t(tree)].parent >= 0 && hops < n) {
          at = double_tree_links(n, at)[size_t(tree)].parent;
          ++hops;
        }
        ASSERT_LT(hops, n) << n;
        deepest = std::max(deepest, hops);
      }
      EXPECT_EQ(roots, 1) << n;
      EXPECT_EQ(deepest, n < 2 ? 0 : int(std::floor(std::log2(n - 1))) + 1) << n;
      EXPECT_EQ(deepest, tree_depth(n)) << n;
    }
    // Tree 0's root has one child and, for odd n, one in tree 1 too (as in NCCL's drawing).
    for (int k = 1; k < n; ++k) {
      const auto links = double_tree_links(n, k);
      const bool inner0 = links[0].children[0] >= 0, inner1 = links[1].children[0] >= 0;
      EXPECT_FALSE(inner0 && inner1) << "position " << k << " of " << n;
    }
  }
}

// The rounds of a layout's transfers form a proper colouring with as few rounds as the busiest
// member needs, and list every edge of both trees of every channel, both ways.
void expect_rounds_are_matchings(const TreeLayout& layout, const std::string& what) {
  const int n = int(layout.members.size());
  const std::vector<TreeTransfer> transfers = tree_transfers(layout);
  EXPECT_EQ(transfers.size(), layout.parents.size() * size_t(4 * (n - 1))) << what;
  std::vector<int> sends(size_t(n), 0), recvs(size_t(n), 0);
  std::set<std::pair<int, int>> send_round, recv_round;
  int rounds = 0;
  for (const TreeTransfer& t : transfers) {
    ++sends[size_t(t.from)];
    ++recvs[size_t(t.to)];
    EXPECT_TRUE(send_round.insert({t.from, t.round}).second) << what << ": member " << t.from << " sends twice";
    EXPECT_TRUE(recv_round.insert({t.to, t.round}).second) << what << ": member " << t.to << " receives twice";
    rounds = std::max(rounds, t.round + 1);
  }
  const int busiest =
      std::max(*std::max_element(sends.begin(), sends.end()), *std::max_element(recvs.begin(), recvs.end()));
  EXPECT_EQ(rounds, busiest) << what;  // König: no round more than the busiest member needs
  EXPECT_TRUE(std::is_sorted(transfers.begin(), transfers.end(),
                             [](const TreeTransfer& a, const TreeTransfer& b) { return a.round < b.round; }));
}

TEST(DoubleBinaryTree, RoundsAreMatchingsAsFewAsTheBusiestMemberNeeds) {
  for (int n : {2, 3, 8, 13, 64, 100, 1000}) {
    std::vector<int> members(static_cast<size_t>(n));
    std::iota(members.begin(), members.end(), 0);
    expect_rounds_are_matchings(single_channel_layout(members), std::to_string(n) + " members");
  }
  const Topology topology = Topology::load("dgx-h100", 4);
  StrategyParams seq;
  seq.sequence_parallel = 32;
  const Plan plan = make_plan(StrategyKind::Ring, seq, testing::small_workload(4096, 8, 8, true), topology, 32);
  expect_rounds_are_matchings(tree_layout(plan, plan.find_group("world"), topology), "4 channels on 32 GPUs");
}

TEST(DoubleBinaryTree, ChannelsSpreadTheTreesOverEveryRail) {
  // DGX H100: 8 NICs a node, so 4 channels; channel c joins the nodes through local GPU 2c in
  // tree 0 and 2c - 1 in tree 1 (NCCL spreads its channels over the NICs likewise).
  const Topology topology = Topology::load("dgx-h100", 4);
  ASSERT_EQ(tree_channels(topology), 4);
  EXPECT_EQ(tree_channels(Topology::load("dgx-h100", 1)), 4);
  StrategyParams seq;
  seq.sequence_parallel = 32;
  const Plan plan = make_plan(StrategyKind::Ring, seq, testing::small_workload(4096, 8, 8, true), topology, 32);
  const TreeLayout layout = tree_layout(plan, plan.find_group("world"), topology);
  ASSERT_EQ(layout.parents.size(), 4u);
  std::set<int> rails;
  for (const TreeTransfer& t : tree_transfers(layout)) {
    const RankSlot& from = plan.ranks[size_t(layout.members[size_t(t.from)])];
    const RankSlot& to = plan.ranks[size_t(layout.members[size_t(t.to)])];
    if (from.node == to.node) continue;
    const int rail = (2 * t.channel - t.tree + 8) % 8;
    EXPECT_EQ(from.local_gpu, rail) << "channel " << t.channel << " tree " << t.tree;
    EXPECT_EQ(to.local_gpu, rail) << "channel " << t.channel << " tree " << t.tree;
    rails.insert(from.local_gpu);
  }
  EXPECT_EQ(rails.size(), 8u);
  EXPECT_DOUBLE_EQ(tree_transfer_bytes(4000, 4), 500.0);  // 4000 bytes over 4 channels x 2 trees
}

std::vector<int> first_members(int n) {
  std::vector<int> members(static_cast<size_t>(n));
  std::iota(members.begin(), members.end(), 0);
  return members;
}

TEST(DoubleBinaryTree, CriticalLatencyIsTwiceTheDepthOnUniformLinks) {
  for (int n : {2, 5, 8, 12, 13, 4096}) {
    const double alpha = 3e-6;
    EXPECT_NEAR(tree_critical_latency_s(single_channel_layout(first_members(n)), [&](int, int) { return alpha; }),
                2 * tree_depth(n) * alpha, 1e-15)
        << n;
  }
  EXPECT_EQ(tree_depth(4096), 12);  // 0 -> 2048 -> 1024 -> ... -> odd leaves
  // Latency that grows with the distance between positions: the longest path up and down.
  const double deep = tree_critical_latency_s(single_channel_layout(first_members(8)),
                                              [](int a, int b) { return 1e-6 * std::abs(a - b); });
  // Tree 0: 0 -4- 4 -2- 2 -1- 1 (or 3, 5, 7): 7 up and 7 down.
  EXPECT_NEAR(deep, 14e-6, 1e-15);
}

TEST(DoubleBinaryTree, NodesAreChainsJoinedByANodeTree) {
  // 4 DGX nodes: in every tree each node is a chain of its 8 GPUs from the channel's entry GPU,
  // and only entry GPUs link nodes; so the longest path is 7 hops inside a node and the node
  // tree's depth between nodes (2 for 4 nodes), each way.
  const Topology topology = Topology::load("dgx-h100", 4);
  StrategyParams seq;
  seq.sequence_parallel = 32;
  const Plan plan = make_plan(StrategyKind::Ring, seq, testing::small_workload(4096, 8, 8, true), topology, 32);
  const TreeLayout layout = tree_layout(plan, plan.find_group("world"), topology);
  for (size_t c = 0; c < layout.parents.size(); ++c)
    for (int t = 0; t < 2; ++t) {
      const int entry = (2 * int(c) - t + 8) % 8;
      const std::vector<int32_t>& parent = layout.parents[c][size_t(t)];
      int roots = 0;
      for (size_t m = 0; m < parent.size(); ++m) {
        const RankSlot& self = plan.ranks[size_t(layout.members[m])];
        if (parent[m] < 0) {
          ++roots;
          EXPECT_EQ(self.local_gpu, entry);
          continue;
        }
        const RankSlot& up = plan.ranks[size_t(layout.members[size_t(parent[m])])];
        if (self.local_gpu == entry) {
          EXPECT_NE(up.node, self.node);
          EXPECT_EQ(up.local_gpu, entry);
        } else {
          EXPECT_EQ(up.node, self.node);
          EXPECT_EQ(up.local_gpu, (self.local_gpu + 7) % 8);  // the previous GPU of the chain
        }
      }
      EXPECT_EQ(roots, 1);
    }
  const auto uniform = [&](int a, int b) {
    return plan.ranks[size_t(layout.members[size_t(a)])].node == plan.ranks[size_t(layout.members[size_t(b)])].node
               ? 1e-6
               : 1e-3;
  };
  EXPECT_NEAR(tree_critical_latency_s(layout, uniform), 2 * (7e-6 + tree_depth(4) * 1e-3), 1e-15);
  EXPECT_EQ(tree_depth(4), 2);
}

TEST(AllReduceChoice, TreeWhereRingLatenciesDominate) {
  const Workload w = load_workload("llama-3-8b", {});
  const double bytes = double(w.attention_parameters_per_layer()) * 4;
  // 4,096 GPUs over NDR: 8,190 ring latencies against 24 tree latencies.
  const Topology big = Topology::load("dgx-h100", 512);
  const Route& inter = big.route(0, 8);
  const Route& intra = big.route(0, 1);
  EXPECT_LT(tree_all_reduce_estimate_s(512, 8, 4, bytes, intra.latency_us * 1e-6, intra.bottleneck_GBps * 1e9,
                                       inter.latency_us * 1e-6, inter.bottleneck_GBps * 1e9),
            ring_all_reduce_estimate_s(4096, bytes, inter.latency_us * 1e-6, inter.bottleneck_GBps * 1e9));
  StrategyParams seq;
  seq.sequence_parallel = 4096;
  const Plan plan = make_plan(StrategyKind::Ring, seq, w, big, 4096);
  for (const CommGroup& g : plan.groups)
    EXPECT_EQ(g.all_reduce, g.kind == GroupKind::World ? AllReduceAlgorithm::Tree : AllReduceAlgorithm::Ring) << g.name;
  // One node of 8: the tree is a chain, as many latencies as the ring and more bytes: the ring
  // stays.
  const Topology node = Topology::load("dgx-h100", 1);
  seq.sequence_parallel = 8;
  for (const CommGroup& g : make_plan(StrategyKind::Ring, seq, w, node, 8).groups)
    EXPECT_EQ(g.all_reduce, AllReduceAlgorithm::Ring) << g.name;
}

TEST(AllReduceChoice, PermutingGpusInsideNodesKeepsTheChoiceAndTheSchedule) {
  // The search prices one schedule under several GPU orders inside nodes.
  const Topology topology = Topology::load("dgx-h100", 4);
  const Workload w = testing::small_workload(4096, 8, 8, true);
  StrategyParams seq;
  seq.sequence_parallel = 32;
  std::vector<int> reversed(32);
  for (int g = 0; g < 32; ++g)
    reversed[size_t(g)] = (g / 8) * 8 + 7 - g % 8;
  const Plan a = make_plan(StrategyKind::Ring, seq, w, topology, 32);
  const Plan b = make_plan(StrategyKind::Ring, seq, w, topology, 32, reversed);
  EXPECT_EQ(a.groups, b.groups);
  EXPECT_TRUE(std::any_of(a.groups.begin(), a.groups.end(),
                          [](const CommGroup& g) { return g.all_reduce == AllReduceAlgorithm::Tree; }));
  const Schedule sa = build_schedule(a), sb = build_schedule(b);
  ASSERT_EQ(sa.ranks.size(), sb.ranks.size());
  for (size_t r = 0; r < sa.ranks.size(); ++r) {
    ASSERT_EQ(sa.ranks[r].ops.size(), sb.ranks[r].ops.size());
    for (size_t i = 0; i < sa.ranks[r].ops.size(); ++i)
      EXPECT_EQ(sa.ranks[r].ops[i].bytes, sb.ranks[r].ops[i].bytes);
  }
}

TEST(AllReduceChoice, TreeOnAGroupWithoutAllReducesIsRejected) {
  const Topology topology = Topology::load("dgx-h100", 2);
  const Workload w = testing::small_workload(1024, 8, 8, true);
  StrategyParams seq;
  seq.sequence_parallel = 16;
  Plan plan = make_plan(StrategyKind::Ring, seq, w, topology, 16);
  for (CommGroup& g : plan.groups)
    if (g.kind == GroupKind::Ring) g.all_reduce = AllReduceAlgorithm::Tree;
  try {
    build_schedule(plan);
    FAIL() << "a tree on a ring group was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("runs no all-reduce"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace wallfacer
