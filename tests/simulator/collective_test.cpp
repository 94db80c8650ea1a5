// Collectives in the simulator: the point-to-point expansion (ring steps, pairwise and direct
// all-to-all peers and their sizes) and the simulated times of each kind against the alpha-beta closed
// forms of docs/algorithms.md §10.1 on a contention-free star, and of ring collectives over nodes
// with several NICs on their channels (ring_channels.hpp), where the cost model must agree.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/schedule/all_reduce.hpp>
#include <wallfacer/simulator/simulator.hpp>
#include "collective_steps.hpp"
#include "common/multi_nic_topology.hpp"
#include "simulator/sim_test_util.hpp"

namespace wallfacer {
namespace {

constexpr double kRel = 1e-9;

// Members own consecutive token chunks of `chunk` tokens and all `heads` heads (a Ulysses-like
// all-to-all instead sends each peer the peer's head slice of the own chunk).
CollectiveSpec uniform_spec(TokenSetPool& pool, OpKind kind, int members, int64_t chunk, int heads) {
  CollectiveSpec spec;
  spec.kind = kind;
  spec.group = 0;
  spec.fields = field_bit(Field::K);
  int32_t everything = pool.intern({{0, chunk * members}});
  for (int m = 0; m < members; ++m) {
    int32_t own = pool.intern({{m * chunk, (m + 1) * chunk}});
    HeadRange all{0, heads}, slice{m * heads / members, (m + 1) * heads / members};
    bool a2a = kind == OpKind::AllToAll;
    spec.in_tokens.push_back(own);
    spec.in_heads.push_back(all);
    spec.out_tokens.push_back(a2a ? everything : own);
    spec.out_heads.push_back(a2a ? slice : all);
  }
  return spec;
}

TEST(CollectiveSteps, RingAllGatherForwardsEachMembersBlockInTurn) {
  TokenSetPool pool;
  CollectiveSpec spec;
  spec.kind = OpKind::AllGather;
  spec.group = 0;
  // Unequal contributions: member m holds (m + 1) x 10 tokens.
  int64_t begin = 0;
  for (int m = 0; m < 4; ++m) {
    spec.in_tokens.push_back(pool.intern({{begin, begin + (m + 1) * 10}}));
    spec.in_heads.push_back({0, 8});
    begin += (m + 1) * 10;
  }
  std::vector<int> group = {7, 3, 5, 1};  // ranks in ring order
  // Member at position 1 (rank 3) sends blocks of positions 1, 0, 3 (20, 10, 40 tokens): 70.
  sim::CollectiveSteps steps = sim::expand_collective(spec, 700.0, group, 3, pool);
  EXPECT_EQ(steps.order, sim::StepOrder::Ring);
  ASSERT_EQ(steps.sends.size(), 3u);
  ASSERT_EQ(steps.recvs.size(), 3u);
  const double expected[] = {200, 100, 400};
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(steps.sends[k].peer, 5);
    EXPECT_EQ(steps.recvs[k].peer, 7);
    EXPECT_DOUBLE_EQ(steps.sends[k].bytes, expected[k]);
  }
}

TEST(CollectiveSteps, ReduceScatterEndsWithTheSuccessorsOwnBlock) {
  TokenSetPool pool;
  CollectiveSpec spec = uniform_spec(pool, OpKind::ReduceScatter, 3, 10, 4);
  spec.out_tokens[2] = pool.intern({{20, 50}});  // member 2's block is 3x larger
  sim::CollectiveSteps steps = sim::expand_collective(spec, 500.0, {0, 1, 2}, 0, pool);
  ASSERT_EQ(steps.sends.size(), 2u);
  // Position 0 sends the partial of block 2 (30 tokens) first, then block 1 (10 tokens).
  EXPECT_DOUBLE_EQ(steps.sends[0].bytes, 375);
  EXPECT_DOUBLE_EQ(steps.sends[1].bytes, 125);
}

TEST(CollectiveSteps, AllReduceTakesTwiceTheRingSteps) {
  TokenSetPool pool;
  CollectiveSpec spec;
  spec.kind = OpKind::AllReduce;
  spec.group = 0;
  spec.elements = 1000;
  sim::CollectiveSteps steps = sim::expand_collective(spec, 600.0, {0, 1, 2, 3}, 2, pool);
  ASSERT_EQ(steps.sends.size(), 6u);
  for (const auto& s : steps.sends)
    EXPECT_DOUBLE_EQ(s.bytes, 100);
}

TEST(CollectiveSteps, AllToAllSkipsPeersWithoutData) {
  TokenSetPool pool;
  // A shift: member m sends its block only to member m + 1 (its out block is member m - 1's).
  CollectiveSpec spec;
  spec.kind = OpKind::AllToAll;
  spec.group = 0;
  for (int m = 0; m < 4; ++m) {
    spec.in_tokens.push_back(pool.intern({{m * 10, m * 10 + 10}}));
    spec.out_tokens.push_back(pool.intern({{((m + 3) % 4) * 10, ((m + 3) % 4) * 10 + 10}}));
    spec.in_heads.push_back({0, 2});
    spec.out_heads.push_back({0, 2});
  }
  sim::CollectiveSteps steps = sim::expand_collective(spec, 80.0, {0, 1, 2, 3}, 1, pool);
  EXPECT_EQ(steps.order, sim::StepOrder::Pairwise);
  ASSERT_EQ(steps.sends.size(), 1u);
  ASSERT_EQ(steps.recvs.size(), 1u);
  EXPECT_EQ(steps.sends[0].peer, 2);
  EXPECT_EQ(steps.recvs[0].peer, 0);
  EXPECT_DOUBLE_EQ(steps.sends[0].bytes, 80);
}

TEST(CollectiveSteps, PairwiseAllToAllSendsToPlusIAndReceivesFromMinusI) {
  TokenSetPool pool;
  CollectiveSpec spec = uniform_spec(pool, OpKind::AllToAll, 4, 16, 8);
  sim::CollectiveSteps steps = sim::expand_collective(spec, 300.0, {10, 11, 12, 13}, 11, pool);
  ASSERT_EQ(steps.sends.size(), 3u);
  ASSERT_EQ(steps.recvs.size(), 3u);
  const int to[] = {12, 13, 10}, from[] = {10, 13, 12};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(steps.sends[i].peer, to[i]);
    EXPECT_EQ(steps.recvs[i].peer, from[i]);
    EXPECT_DOUBLE_EQ(steps.sends[i].bytes, 100);
  }
  sim::ExpandOptions options;
  options.all_to_all = sim::AllToAllAlgorithm::Direct;
  sim::CollectiveSteps direct = sim::expand_collective(spec, 300.0, {10, 11, 12, 13}, 11, pool, options);
  EXPECT_EQ(direct.order, sim::StepOrder::Direct);
  EXPECT_EQ(direct.sends.size(), 3u);
}

TEST(CollectiveSteps, NonMemberIsAScheduleError) {
  TokenSetPool pool;
  CollectiveSpec spec = uniform_spec(pool, OpKind::AllGather, 2, 10, 2);
  EXPECT_THROW(sim::expand_collective(spec, 10, {0, 1}, 5, pool), ScheduleError);
}

// One collective on every rank of a star of `members` GPUs.
struct OneCollective {
  Topology topology;
  Plan plan;
  Schedule schedule;
};
// Every group in `groups` (rank r on GPU r) runs the collective once, each member sending
// `member_bytes`.
OneCollective collective_on(Topology topology, OpKind kind, const std::vector<std::vector<int>>& groups,
                            double member_bytes, int64_t chunk, int heads,
                            AllReduceAlgorithm algorithm = AllReduceAlgorithm::Ring) {
  std::vector<CommGroup> declared;
  int ranks = 0;
  for (const std::vector<int>& members : groups) {
    declared.push_back({"group" + std::to_string(declared.size()), GroupKind::World, members, algorithm});
    ranks += int(members.size());
  }
  Plan plan = test::placement_plan(topology, ranks, declared);
  Schedule schedule = test::empty_schedule(ranks);
  for (size_t g = 0; g < groups.size(); ++g) {
    CollectiveSpec spec = uniform_spec(schedule.tokens, kind, int(groups[g].size()), chunk, heads);
    spec.group = int(g);
    if (kind == OpKind::AllReduce) spec.elements = 1 << 20;
    spec.algorithm = algorithm;
    for (int rank : groups[g]) {
      RankProgram& p = schedule.ranks[size_t(rank)];
      p.collectives.push_back(spec);
      Op op;
      op.kind = kind;
      op.stream = Stream::Collective;
      op.coll = 0;
      op.bytes = int64_t(member_bytes);
      op.step = 0;
      p.add(op);
    }
  }
  return {std::move(topology), std::move(plan), std::move(schedule)};
}

OneCollective one_collective(OpKind kind, int members, double member_bytes, int64_t chunk, int heads,
                             double bandwidth_GBps, double latency_us,
                             AllReduceAlgorithm algorithm = AllReduceAlgorithm::Ring) {
  Topology topology = Topology::parse(test::star_topology_yaml(members, bandwidth_GBps, latency_us), "star.yaml");
  std::vector<int> all(static_cast<size_t>(members));
  std::iota(all.begin(), all.end(), 0);
  return collective_on(std::move(topology), kind, {all}, member_bytes, chunk, heads, algorithm);
}

SimResult simulate_one_collective(OpKind kind, int members, double member_bytes, int64_t chunk, int heads,
                                  double bandwidth_GBps, double latency_us, const SimOptions& options = {}) {
  OneCollective c = one_collective(kind, members, member_bytes, chunk, heads, bandwidth_GBps, latency_us);
  return simulate_schedule(c.plan, c.topology, c.schedule, options);
}

TEST(SimulatorCollectives, RingCollectivesMatchTheAlphaBetaClosedForm) {
  const int p = 4;
  const double bw = 50, lat_us = 1.5, block = 8 << 20;  // bytes of one member's block
  const double alpha = 2 * lat_us * 1e-6, beta = bw * 1e9;
  // All-gather and reduce-scatter: (p - 1)(alpha + M / (p beta)) with M = p x block.
  for (OpKind kind : {OpKind::AllGather, OpKind::ReduceScatter}) {
    SimResult r = simulate_one_collective(kind, p, (p - 1) * block, 1024, 8, bw, lat_us);
    EXPECT_NEAR(r.step_ms, (p - 1) * (alpha + block / beta) * 1e3, r.step_ms * kRel) << to_string(kind);
  }
  // All-reduce: 2(p - 1)(alpha + M / (p beta)); each member sends 2(p - 1) blocks.
  SimResult ar = simulate_one_collective(OpKind::AllReduce, p, 2 * (p - 1) * block, 1024, 8, bw, lat_us);
  EXPECT_NEAR(ar.step_ms, 2 * (p - 1) * (alpha + block / beta) * 1e3, ar.step_ms * kRel);
  EXPECT_EQ(ar.activities, int64_t(p) * 2 * (p - 1));
  EXPECT_EQ(ar.transfers, ar.activities);
}

TEST(SimulatorCollectives, TreeAllReduceMatchesItsClosedFormAndTheCostModel) {
  // One node (a star without NICs, so one channel): each tree is a chain of the p GPUs. Every
  // round's transfers use distinct links, so each takes alpha + (M/2) / beta; the member with the
  // most transfers (Delta) has one in every round, after the pipeline's fill of 2 (p - 1) alpha
  // less its first transfer's own latency.
  const double bw = 50, lat_us = 1.5, alpha = 2 * lat_us * 1e-6, half = double(1 << 20) * 4 / 2;
  for (int p : {8, 13}) {
    OneCollective c = one_collective(OpKind::AllReduce, p, 2.0 * (p - 1) / p * 4 * (1 << 20), 1024, 8, bw, lat_us,
                                     AllReduceAlgorithm::Tree);
    const SimResult r = simulate_schedule(c.plan, c.topology, c.schedule, {});
    int busiest = 0;
    std::vector<int> sends(size_t(p), 0), recvs(size_t(p), 0);
    for (const TreeTransfer& t : tree_transfers(tree_layout(c.plan, 0, c.topology)))
      busiest = std::max({busiest, ++sends[size_t(t.from)], ++recvs[size_t(t.to)]});
    EXPECT_EQ(busiest, 4);  // inner in both chains: one send up and one down in each
    const double expected = (2 * (p - 1) - 1) * alpha + busiest * (alpha + half / (bw * 1e9));
    EXPECT_NEAR(r.step_ms, expected * 1e3, expected * 1e3 * kRel) << p << " members";
    EXPECT_EQ(r.transfers, 4 * (p - 1));       // both trees, up and down
    EXPECT_EQ(r.activities, r.transfers + p);  // and each member's fill delay
    const CostModel model(c.topology, Calibration::defaults());
    EXPECT_NEAR(model.evaluate_times(c.plan, c.schedule).step_ms, r.step_ms, r.step_ms * kRel) << p << " members";
  }
}

TEST(SimulatorCollectives, MergedRingStepsKeepTheUncontendedTime) {
  const int p = 4;
  const double bw = 50, lat_us = 1.5, block = 8 << 20;
  const double expected = 2 * (p - 1) * (2 * lat_us * 1e-6 + block / (bw * 1e9)) * 1e3;
  // 6 all-reduce steps as 2 merged steps of 3, and as 4 merged steps of 1, 2, 1, 2.
  for (int merged : {2, 4}) {
    SimOptions options;
    options.max_ring_steps = merged;
    SimResult r = simulate_one_collective(OpKind::AllReduce, p, 2 * (p - 1) * block, 1024, 8, bw, lat_us, options);
    EXPECT_NEAR(r.step_ms, expected, expected * kRel) << merged << " merged steps";
    // Each rank sends `merged` transfers; the two that stand for more than one step wait on a
    // latency timer first (3 + 3, or 1 + 2 + 1 + 2).
    EXPECT_EQ(r.activities, int64_t(p) * (merged + 2));
    EXPECT_EQ(r.transfers, int64_t(p) * merged);
  }
}

TEST(CollectiveSteps, MergingKeepsEveryByteAndStep) {
  TokenSetPool pool;
  CollectiveSpec spec;
  spec.kind = OpKind::AllReduce;
  spec.group = 0;
  std::vector<int> group(10);
  for (int i = 0; i < 10; ++i)
    group[size_t(i)] = i;
  sim::ExpandOptions options;
  options.max_ring_steps = 4;
  sim::CollectiveSteps steps = sim::expand_collective(spec, 1800.0, group, 3, pool, options);
  ASSERT_EQ(steps.sends.size(), 4u);  // 18 steps as 4, 5, 4, 5
  const int merged[] = {4, 5, 4, 5};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(steps.sends[i].merged, merged[i]);
    EXPECT_EQ(steps.recvs[i].merged, merged[i]);
    EXPECT_DOUBLE_EQ(steps.sends[i].bytes, 100.0 * merged[i]);
  }
}

TEST(SimulatorCollectives, PairwiseAllToAllMatchesTheAlphaBetaClosedForm) {
  const int p = 4;
  const double bw = 50, lat_us = 1.5, piece = 4 << 20;  // bytes to each peer
  // p - 1 exchange steps, each a permutation (no link carries two pieces): (p - 1)·alpha +
  // (p - 1)/p·M/beta with M = p x piece.
  SimResult r = simulate_one_collective(OpKind::AllToAll, p, (p - 1) * piece, 1024, 8, bw, lat_us);
  EXPECT_NEAR(r.step_ms, (p - 1) * (2 * lat_us * 1e-6 + piece / (bw * 1e9)) * 1e3, r.step_ms * kRel);
  EXPECT_EQ(r.activities, int64_t(p) * (p - 1));
}

TEST(SimulatorCollectives, DirectAllToAllSharesEachGpusLinkAmongItsPeers) {
  const double bw = 50, lat_us = 1.5, piece = 4 << 20;
  // All p - 1 pieces leave at once through the GPU's one uplink (and arrive through each
  // downlink p - 1 at a time): alpha + (p - 1) x piece / beta. With 12 members a rank has 11
  // receives in flight, more than its activity set keeps buffers for inline.
  for (int p : {4, 12}) {
    SimOptions options;
    options.all_to_all = "direct";
    SimResult r = simulate_one_collective(OpKind::AllToAll, p, (p - 1) * piece, 1024, 2 * p, bw, lat_us, options);
    EXPECT_NEAR(r.step_ms, (2 * lat_us * 1e-6 + (p - 1) * piece / (bw * 1e9)) * 1e3, r.step_ms * kRel) << p;
    EXPECT_EQ(r.activities, int64_t(p) * (p - 1)) << p;
  }
}

std::vector<int> ranks_from(int first, int count) {
  std::vector<int> ranks(static_cast<size_t>(count));
  std::iota(ranks.begin(), ranks.end(), first);
  return ranks;
}

// Simulated and priced seconds of the collective, which must agree with `expected` to 1e-9.
void expect_collective_takes(const OneCollective& c, double expected_s, int64_t transfers, const std::string& what) {
  const SimResult r = simulate_schedule(c.plan, c.topology, c.schedule, {});
  EXPECT_NEAR(r.step_ms, expected_s * 1e3, expected_s * 1e3 * kRel) << what;
  EXPECT_EQ(r.transfers, transfers) << what;
  const CostModel model(c.topology, Calibration::defaults());
  EXPECT_NEAR(model.evaluate_times(c.plan, c.schedule).step_ms, expected_s * 1e3, expected_s * 1e3 * kRel) << what;
}

TEST(SimulatorCollectives, RingChannelsCrossNodesOnEveryNic) {
  // p = 16 on 2 nodes of 8 GPUs and 8 NICs: 8 channels, each leaving every node through its own
  // NIC and carrying 1/8 of every step. A GPU sends 7 channels over its NVSwitch port and, where
  // it leaves its node, one through its PCIe switch and NIC. A step lasts its slowest edge: an
  // edge between nodes, alpha_net + b / min(PCIe, NIC), or one inside, alpha_nvs + b / (NVSwitch
  // / 7), with b = block / 8. NIC-bound, that is steps x alpha_net + bytes / (8 x NIC).
  const int p = 16;
  const double block = 8 << 20;
  for (double nic_Gbps : {200.0, 800.0}) {  // NIC-bound, then bound by the NVSwitch port
    test::MultiNicFigures f;
    f.nic_Gbps = nic_Gbps;
    f.pcie_GBps = 128;
    const double b = block / 8;
    const double step = std::max(f.route_between_nodes_s() + b / (std::min(f.pcie_GBps, f.nic_GBps()) * 1e9),
                                 f.route_inside_node_s() + b / (f.nvswitch_GBps / 7 * 1e9));
    if (nic_Gbps == 200.0) {
      ASSERT_NEAR(step, f.route_between_nodes_s() + b / (f.nic_GBps() * 1e9), 1e-18);
    }
    for (OpKind kind : {OpKind::AllGather, OpKind::ReduceScatter, OpKind::AllReduce}) {
      const int steps = kind == OpKind::AllReduce ? 2 * (p - 1) : p - 1;
      const double bytes = steps * block;
      const OneCollective c = collective_on(test::multi_nic_topology(f), kind, {ranks_from(0, p)}, bytes, 1024, 8);
      ASSERT_NEAR(c.topology.route(7, 8).latency_us * 1e-6, f.route_between_nodes_s(), 1e-15);
      const double expected = steps * step;
      expect_collective_takes(c, expected, int64_t(p) * steps * 8,
                              fmt::format("{} at {} Gb/s per NIC", to_string(kind), nic_Gbps));
    }
  }
}

TEST(SimulatorCollectives, RingChannelsFollowTheNicsAndLeaveOneNodeRingsAlone) {
  const int steps = 2 * 15;
  const double bytes = steps * double(8 << 20);
  test::MultiNicFigures f;
  // One NIC per node: one ring in group order, whose two edges between nodes each get the NIC.
  f.nics = 1;
  expect_collective_takes(
      collective_on(test::multi_nic_topology(f), OpKind::AllReduce, {ranks_from(0, 16)}, bytes, 1024, 8),
      steps * f.route_between_nodes_s() + bytes / (f.nic_GBps() * 1e9), 16 * steps, "one NIC");
  // Three nodes, 8 NICs: the same 8 channels (on one switch the edge that closes each ring is as
  // fast as the others).
  f.nics = 8;
  f.nodes = 3;
  const int steps3 = 2 * 23;
  const double bytes3 = steps3 * double(8 << 20);
  expect_collective_takes(
      collective_on(test::multi_nic_topology(f), OpKind::AllReduce, {ranks_from(0, 24)}, bytes3, 1024, 8),
      steps3 * f.route_between_nodes_s() + bytes3 / (8 * f.nic_GBps() * 1e9), 24 * steps3 * 8, "three nodes");
  // Two groups of 4 + 4 GPUs over the same two nodes: 4 channels each, on disjoint NICs.
  f.nodes = 2;
  const std::vector<int> low = {0, 1, 2, 3, 8, 9, 10, 11}, high = {4, 5, 6, 7, 12, 13, 14, 15};
  const int steps8 = 2 * 7;
  const double bytes8 = steps8 * double(8 << 20);
  expect_collective_takes(collective_on(test::multi_nic_topology(f), OpKind::AllReduce, {low, high}, bytes8, 1024, 8),
                          steps8 * f.route_between_nodes_s() + bytes8 / (4 * f.nic_GBps() * 1e9), 16 * steps8 * 4,
                          "two groups");
  // A ring inside one node: one channel over the NVSwitch, as on a node without NICs.
  f.nodes = 1;
  const int steps1 = 2 * 7;
  const double bytes1 = steps1 * double(8 << 20);
  expect_collective_takes(
      collective_on(test::multi_nic_topology(f), OpKind::AllReduce, {ranks_from(0, 8)}, bytes1, 1024, 8),
      steps1 * f.route_inside_node_s() + bytes1 / (f.nvswitch_GBps * 1e9), 8 * steps1, "one node");
}

TEST(CollectiveSteps, RingChannelsSplitEveryStepAndForwardTheirOwnRingsBlocks) {
  // Two channels over 4 members, rings [0 1 2 3] and [1 0 3 2]; member m holds (m + 1) x 10
  // tokens. Each channel carries half of member 0's bytes, split by the blocks it forwards in
  // that channel's ring.
  TokenSetPool pool;
  CollectiveSpec spec;
  spec.kind = OpKind::AllGather;
  spec.group = 0;
  int64_t begin = 0;
  for (int m = 0; m < 4; ++m) {
    spec.in_tokens.push_back(pool.intern({{begin, begin + (m + 1) * 10}}));
    spec.in_heads.push_back({0, 8});
    begin += (m + 1) * 10;
  }
  RingChannels rings;
  rings.rings = {{0, 1, 2, 3}, {1, 0, 3, 2}};
  rings.at = {{0, 1, 2, 3}, {1, 0, 3, 2}};
  const std::vector<int> group = {10, 11, 12, 13};
  const sim::CollectiveSteps steps = sim::expand_collective(spec, 1200.0, group, 10, pool, {}, nullptr, &rings);
  EXPECT_EQ(steps.width, 2);
  ASSERT_EQ(steps.sends.size(), 6u);
  ASSERT_EQ(steps.recvs.size(), 6u);
  // Channel 0 forwards the blocks of members 0, 3, 2 (10, 40, 30 tokens); channel 1, whose ring
  // holds member 0 at position 1, those of positions 1, 0, 3: members 0, 1, 2 (10, 20, 30).
  const double channel0[] = {600 * 10.0 / 80, 600 * 40.0 / 80, 600 * 30.0 / 80};
  const double channel1[] = {600 * 10.0 / 60, 600 * 20.0 / 60, 600 * 30.0 / 60};
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(steps.sends[2 * k].peer, 11);
    EXPECT_EQ(steps.recvs[2 * k].peer, 13);
    EXPECT_EQ(steps.sends[2 * k + 1].peer, 13);
    EXPECT_EQ(steps.recvs[2 * k + 1].peer, 11);
    EXPECT_EQ(steps.sends[2 * k + 1].lane, 1);
    EXPECT_DOUBLE_EQ(steps.sends[2 * k].bytes, channel0[k]);
    EXPECT_DOUBLE_EQ(steps.sends[2 * k + 1].bytes, channel1[k]);
  }
}

}  // namespace
}  // namespace wallfacer
