// The ring channels of a group's ring collectives (ring_channels.hpp), checked by brute force on
// the presets: every channel is a ring over all members that visits each node's members
// together, the channels leave and enter every node through distinct NICs, edges between nodes
// stay on one rail where the node count allows, and a group that gains nothing from channels
// keeps its one ring in group order. Against the tree all-reduce's channels: both use the same
// NICs of a node.
#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <set>

#include <wallfacer/schedule/all_reduce.hpp>
#include <wallfacer/schedule/ring_channels.hpp>
#include <wallfacer/topology/topology.hpp>

namespace wallfacer {
namespace {

// A plan whose rank r sits on GPU gpus[r], with one group over all ranks in rank order.
Plan group_plan(const Topology& topology, const std::vector<int>& gpus) {
  Plan plan;
  std::vector<int> ranks;
  for (int r = 0; r < int(gpus.size()); ++r) {
    const int gpu = gpus[size_t(r)];
    plan.ranks.push_back({r, gpu, topology.node_of_gpu(gpu), topology.local_gpu(gpu), ""});
    ranks.push_back(r);
  }
  plan.groups.push_back({"world", GroupKind::World, ranks});
  return plan;
}

std::vector<int> first_gpus(int n) {
  std::vector<int> gpus(static_cast<size_t>(n));
  std::iota(gpus.begin(), gpus.end(), 0);
  return gpus;
}

// NIC local index (the rail) of a member's GPU.
int rail(const Plan& plan, const Topology& topology, int member) {
  return topology.devices()[size_t(topology.nic_of_gpu(plan.ranks[size_t(member)].gpu))].local_index;
}

// The checks every multi-channel layout must pass; returns the edges between nodes, per channel,
// as (from member, to member).
std::vector<std::vector<std::pair<int, int>>> check_channels(const Plan& plan, const Topology& topology,
                                                             const RingChannels& channels, int expected) {
  const int n = int(plan.groups[0].ranks.size());
  EXPECT_EQ(channels.count(), expected);
  EXPECT_EQ(channels.at.size(), channels.rings.size());
  std::vector<std::vector<std::pair<int, int>>> crossing(channels.rings.size());
  std::map<int, std::multiset<int>> leave, enter;  // node -> NICs its channels leave (enter) through
  for (size_t c = 0; c < channels.rings.size(); ++c) {
    const std::vector<int32_t>& ring = channels.rings[c];
    if (int(ring.size()) != n) {
      ADD_FAILURE() << "channel " << c << " has " << ring.size() << " members, not " << n;
      return crossing;
    }
    EXPECT_EQ(std::set<int32_t>(ring.begin(), ring.end()).size(), size_t(n)) << "channel " << c;
    for (int i = 0; i < n; ++i)
      EXPECT_EQ(channels.at[c][size_t(ring[size_t(i)])], i);
    std::set<int> nodes_seen;
    for (int i = 0; i < n; ++i) {
      const int a = ring[size_t(i)], b = ring[size_t((i + 1) % n)];
      const int na = plan.ranks[size_t(a)].node, nb = plan.ranks[size_t(b)].node;
      if (na == nb) continue;
      crossing[c].emplace_back(a, b);
      EXPECT_TRUE(nodes_seen.insert(nb).second) << "channel " << c << " enters node " << nb << " twice";
      leave[na].insert(rail(plan, topology, a));
      enter[nb].insert(rail(plan, topology, b));
    }
  }
  for (auto* side : {&leave, &enter})
    for (const auto& [node, nics] : *side)
      EXPECT_EQ(std::set<int>(nics.begin(), nics.end()).size(), nics.size()) << "node " << node;
  return crossing;
}

TEST(RingChannels, OneRingInGroupOrderWhereChannelsAddNothing) {
  // One node; one member per node; one NIC per node (GCP a2-megagpu-16g).
  struct Case {
    const char* topology;
    int nodes;
    std::vector<int> gpus;
  };
  for (const Case& c : {Case{"dgx-h100", 1, {3, 0, 7, 1}}, Case{"dgx-h100", 4, {0, 8, 16, 24}},
                        Case{"a2-megagpu-16g", 2, first_gpus(32)}}) {
    SCOPED_TRACE(c.topology);
    const Topology topology = Topology::load(c.topology, c.nodes);
    const Plan plan = group_plan(topology, c.gpus);
    const RingChannels channels = ring_channels(plan, 0, topology);
    ASSERT_EQ(channels.count(), 1);
    std::vector<int32_t> identity(c.gpus.size());
    std::iota(identity.begin(), identity.end(), 0);
    EXPECT_EQ(channels.rings[0], identity);
    EXPECT_EQ(channels.at[0], identity);
  }
}

TEST(RingChannels, EveryNicOfADgxNodeCarriesOneChannelAndEdgesStayOnTheirRail) {
  for (const char* name : {"dgx-h100", "dgx-a100"}) {
    SCOPED_TRACE(name);
    const Topology topology = Topology::load(name, 4);
    const Plan plan = group_plan(topology, first_gpus(32));
    const RingChannels channels = ring_channels(plan, 0, topology);
    const auto crossing = check_channels(plan, topology, channels, 8);
    std::set<int> rails;
    for (size_t c = 0; c < crossing.size(); ++c) {
      EXPECT_EQ(crossing[c].size(), 4u);  // each channel crosses each node boundary once
      for (const auto& [a, b] : crossing[c]) {
        EXPECT_EQ(plan.ranks[size_t(a)].local_gpu, plan.ranks[size_t(b)].local_gpu) << "channel " << c;
        rails.insert(rail(plan, topology, a));
      }
    }
    EXPECT_EQ(rails.size(), 8u);
    // Channel 0 on the first node is the group order; on the second it runs backwards.
    EXPECT_EQ(std::vector<int32_t>(channels.rings[0].begin(), channels.rings[0].begin() + 10),
              (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 15, 14}));
  }
}

TEST(RingChannels, AnOddNodeCountCrossesRailsOnlyWhereTheRingCloses) {
  const Topology topology = Topology::load("dgx-h100", 3);
  const Plan plan = group_plan(topology, first_gpus(24));
  const auto crossing = check_channels(plan, topology, ring_channels(plan, 0, topology), 8);
  for (size_t c = 0; c < crossing.size(); ++c) {
    int off_rail = 0;
    for (const auto& [a, b] : crossing[c])
      if (plan.ranks[size_t(a)].local_gpu != plan.ranks[size_t(b)].local_gpu) {
        ++off_rail;
        EXPECT_EQ(plan.ranks[size_t(a)].node, 2);
        EXPECT_EQ(plan.ranks[size_t(b)].node, 0);
      }
    EXPECT_EQ(off_rail, 1) << "channel " << c;
  }
}

TEST(RingChannels, ChannelsFollowTheNicsTheMembersReach) {
  // DGX-1V: two GPUs per NIC, so a whole node gives four channels; two members per node on
  // distinct NICs give two; two on one NIC give one. Members in any order inside a node and
  // nodes interleaved in the group still give a ring that visits each node once.
  const Topology topology = Topology::load("dgx-1v", 2);
  check_channels(group_plan(topology, first_gpus(16)), topology,
                 ring_channels(group_plan(topology, first_gpus(16)), 0, topology), 4);
  const Plan two = group_plan(topology, {0, 8, 2, 10});
  check_channels(two, topology, ring_channels(two, 0, topology), 2);
  EXPECT_EQ(ring_channels(group_plan(topology, {0, 1, 8, 9}), 0, topology).count(), 1);
  const Plan shuffled = group_plan(topology, {5, 12, 0, 9, 3, 14, 6, 8});
  check_channels(shuffled, topology, ring_channels(shuffled, 0, topology), 3);
}

TEST(RingChannels, UseTheSameNicsAsTheTreeAllReduce) {
  // NCCL runs its trees on the ring's channels (init.cc: nChannels = min(tree, ring)); here the
  // tree has one channel per two NICs whose two trees join the nodes through different NICs, so
  // both algorithms spread a whole-node group's bytes over every NIC of a node.
  for (const char* name : {"dgx-h100", "dgx-a100", "dgx-1v"}) {
    SCOPED_TRACE(name);
    const Topology topology = Topology::load(name, 4);
    const int per_node = topology.gpus_per_node();
    const Plan plan = group_plan(topology, first_gpus(4 * per_node));
    std::set<int> ring_nics, tree_nics;
    for (const auto& edges :
         check_channels(plan, topology, ring_channels(plan, 0, topology), std::string(name) == "dgx-1v" ? 4 : 8))
      for (const auto& [a, b] : edges)
        ring_nics.insert(rail(plan, topology, a));
    const TreeLayout layout = tree_layout(plan, 0, topology);
    for (const TreeTransfer& t : tree_transfers(layout)) {
      const int from = layout.members[size_t(t.from)], to = layout.members[size_t(t.to)];
      if (plan.ranks[size_t(from)].node != plan.ranks[size_t(to)].node) tree_nics.insert(rail(plan, topology, from));
    }
    EXPECT_EQ(ring_nics, tree_nics);
    EXPECT_EQ(int(ring_nics.size()), 2 * tree_channels(topology));
  }
}

}  // namespace
}  // namespace wallfacer
