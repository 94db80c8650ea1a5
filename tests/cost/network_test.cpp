// Contention: flows of one flow set (or groups of one kind running a collective) that share a
// resource divide its bandwidth. Hand-built plans and schedules on two 2-GPU nodes with one
// 100 Gb/s NIC each: every inter-node flow of a node crosses that NIC. Ring collectives across
// nodes with several NICs: one channel per NIC. Prices of large patterns kept across pricers.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/cost/network.hpp>
#include "common/multi_nic_topology.hpp"
#include "cost_test_util.hpp"

namespace wallfacer {
namespace {

constexpr double kNicBytesPerSecond = 100e9 / 8;  // 100 Gb/s
constexpr int64_t kBytes = int64_t(1) << 26;      // 64 MiB: bandwidth dominates latency

Plan four_rank_plan() {
  Plan plan;
  plan.workload = testing::mha_workload(1024);
  for (int r = 0; r < 4; ++r)
    plan.ranks.push_back(RankSlot{r, r, r / 2, r % 2, ""});
  return plan;
}

Schedule one_op_schedule(const Plan& plan, Op op, std::vector<FlowSet> flow_sets, CollectiveSpec spec = {}) {
  Schedule s;
  s.dims.seq = plan.workload.seq;
  s.dims.heads = s.dims.kv_heads = plan.workload.heads;
  s.dims.head_dim = plan.workload.head_dim;
  s.flow_sets = std::move(flow_sets);
  RankProgram program;
  program.rank = 0;
  if (is_collective(op.kind)) {
    program.collectives.push_back(spec);
    op.coll = 0;
  }
  program.add(op);
  s.ranks.push_back(std::move(program));
  return s;
}

Op send_to(int peer, int flow_set) {
  Op op;
  op.kind = OpKind::Send;
  op.stream = Stream::Send;
  op.peer = peer;
  op.tag = 0;
  op.flow_set = flow_set;
  op.bytes = kBytes;
  return op;
}

class Contention : public ::testing::Test {
 protected:
  Topology topology = testing::switch_nodes(2, 2);
  Plan plan = four_rank_plan();
  CostModel model{topology, Calibration::defaults()};
  double latency_s = topology.route(0, 2).latency_us * 1e-6;

  double send_ms(int flow_set, const std::vector<FlowSet>& sets) {
    return model.evaluate(plan, one_op_schedule(plan, send_to(2, flow_set), sets)).forward_ms;
  }
};

TEST_F(Contention, OneFlowGetsTheNic) {
  const double ms = send_ms(0, {{"one", {{0, 2}}}});
  EXPECT_NEAR(ms * 1e-3, latency_s + kBytes / kNicBytesPerSecond, 1e-12);
}

TEST_F(Contention, TwoFlowsThroughOneNicTakeTwiceAsLong) {
  const double one = send_ms(0, {{"one", {{0, 2}}}}) * 1e-3 - latency_s;
  const double two = send_ms(0, {{"two", {{0, 2}, {1, 3}}}}) * 1e-3 - latency_s;
  EXPECT_NEAR(two, 2 * one, 1e-12);
  EXPECT_NEAR(two, kBytes / (kNicBytesPerSecond / 2), 1e-12);
}

TEST_F(Contention, OppositeDirectionsOfAFullDuplexNicDoNotContend) {
  const double one = send_ms(0, {{"one", {{0, 2}}}});
  const double crossed = send_ms(0, {{"crossed", {{0, 2}, {3, 1}}}});
  EXPECT_NEAR(crossed, one, 1e-12);
}

TEST_F(Contention, AFlowOutsideAnySetIsPricedAlone) {
  const double lone = send_ms(-1, {});
  EXPECT_NEAR(lone * 1e-3, latency_s + kBytes / kNicBytesPerSecond, 1e-12);
}

TEST_F(Contention, GroupsOfOneKindShareTheNicDuringACollective) {
  Op op;
  op.kind = OpKind::AllGather;
  op.stream = Stream::Collective;
  op.bytes = kBytes;
  CollectiveSpec spec;
  spec.kind = OpKind::AllGather;
  spec.group = 0;
  // Two teams crossing the nodes: both rings leave node 0 through its one NIC.
  plan.groups = {{"team0", GroupKind::Team, {0, 2}}, {"team1", GroupKind::Team, {1, 3}}};
  const double shared = model.evaluate(plan, one_op_schedule(plan, op, {}, spec)).forward_ms * 1e-3;
  EXPECT_NEAR(shared, latency_s + kBytes / (kNicBytesPerSecond / 2), 1e-12);
  // A group of another kind does not run this collective at the same time.
  plan.groups[1].kind = GroupKind::Data;
  const double alone = model.evaluate(plan, one_op_schedule(plan, op, {}, spec)).forward_ms * 1e-3;
  EXPECT_NEAR(alone, latency_s + kBytes / kNicBytesPerSecond, 1e-12);
}

TEST_F(Contention, RingCollectiveTakesPMinusOneLatencies) {
  // Four members on one node's NVSwitch: 3 steps of latency, bytes over 450 GB/s.
  const Topology one_node = testing::switch_nodes(1, 4);
  CostModel local(one_node, Calibration::defaults());
  Plan p = four_rank_plan();
  for (auto& slot : p.ranks)
    slot.node = 0, slot.local_gpu = slot.gpu;
  p.groups = {{"team0", GroupKind::Team, {0, 1, 2, 3}}};
  for (OpKind kind : {OpKind::AllGather, OpKind::ReduceScatter, OpKind::AllReduce}) {
    Op op;
    op.kind = kind;
    op.stream = Stream::Collective;
    op.bytes = kBytes;
    CollectiveSpec spec;
    spec.kind = kind;
    spec.group = 0;
    const int steps = kind == OpKind::AllReduce ? 6 : 3;
    const double alpha = one_node.route(0, 1).latency_us * 1e-6;
    const double seconds = local.evaluate(p, one_op_schedule(p, op, {}, spec)).forward_ms * 1e-3;
    EXPECT_NEAR(seconds, steps * alpha + kBytes / 450e9, 1e-12) << to_string(kind);
  }
}

// Ring collectives over nodes with several NICs run on one channel per NIC (ring_channels.hpp),
// each with 1/8 of the bytes; with one NIC per node, or inside one node, on the one ring.
TEST(RingChannels, ACollectiveAcrossNodesGetsEveryNic) {
  const int64_t bytes = int64_t(30) << 24;
  for (int nics : {8, 1}) {
    test::MultiNicFigures f;
    f.nics = nics;
    const Topology topology = test::multi_nic_topology(f);
    const CostModel model(topology, Calibration::defaults());
    Plan plan;
    plan.workload = testing::mha_workload(1024);
    std::vector<int> all;
    for (int r = 0; r < 16; ++r) {
      plan.ranks.push_back(RankSlot{r, r, r / 8, r % 8, ""});
      all.push_back(r);
    }
    plan.groups = {{"world", GroupKind::World, all}};
    Op op;
    op.kind = OpKind::AllReduce;
    op.stream = Stream::Collective;
    op.bytes = bytes;
    CollectiveSpec spec;
    spec.kind = OpKind::AllReduce;
    spec.group = 0;
    spec.elements = bytes / 4;
    // 8 channels: a NIC's 25 GB/s each (below the NVSwitch port's 450 / 7); one NIC: the ring's.
    const double aggregate = nics == 8 ? 8 * f.nic_GBps() : f.nic_GBps();
    const double expected = 30 * f.route_between_nodes_s() + double(bytes) / (aggregate * 1e9);
    const double seconds = model.evaluate(plan, one_op_schedule(plan, op, {}, spec)).forward_ms * 1e-3;
    EXPECT_NEAR(seconds, expected, expected * 1e-12) << nics << " NICs";
    // The first node's 8 GPUs alone: one ring over the NVSwitch either way.
    plan.groups[0].ranks.resize(8);
    const double inside = model.evaluate(plan, one_op_schedule(plan, op, {}, spec)).forward_ms * 1e-3;
    const double expected_inside = 14 * f.route_inside_node_s() + double(bytes) / (f.nvswitch_GBps * 1e9);
    EXPECT_NEAR(inside, expected_inside, expected_inside * 1e-12) << nics << " NICs";
  }
}

// All-to-all: only intersecting slices travel, all peers' flows at once
// (docs/algorithms.md §10.1).
class AllToAll : public ::testing::Test {
 protected:
  Topology topology = testing::switch_nodes(1, 4);
  CostModel model{topology, Calibration::defaults()};
  Plan plan;
  Schedule schedule;
  static constexpr int64_t kTokens = 1 << 16;  // per member
  static constexpr int kHeads = 8;

  void SetUp() override {
    plan.workload = testing::mha_workload(4 * kTokens, kHeads, 64);
    for (int r = 0; r < 4; ++r)
      plan.ranks.push_back(RankSlot{r, r, 0, r, ""});
    plan.groups = {{"a2a0", GroupKind::AllToAll, {0, 1, 2, 3}}};
    schedule.dims.seq = plan.workload.seq;
    schedule.dims.heads = schedule.dims.kv_heads = kHeads;
    schedule.dims.head_dim = 64;
  }
  int32_t block(int i) { return schedule.tokens.intern({{i * kTokens, (i + 1) * kTokens}}); }

  double seconds(CollectiveSpec spec) {
    RankProgram program;
    program.rank = 0;
    program.buffers.push_back(BufferDecl{"in", field_bit(Field::Q), {0, kHeads}, 4 * kTokens, false});
    program.collectives.push_back(std::move(spec));
    Op op;
    op.kind = OpKind::AllToAll;
    op.stream = Stream::Collective;
    op.coll = 0;
    op.buf[0] = 0;
    program.add(op);
    schedule.ranks = {program};
    return model.evaluate(plan, schedule).forward_ms * 1e-3;
  }
};

TEST_F(AllToAll, HeadScatterSendsToEveryPeerAtOnce) {
  CollectiveSpec spec;
  spec.kind = OpKind::AllToAll;
  spec.group = 0;
  spec.fields = field_bit(Field::Q);
  const int32_t all = schedule.tokens.intern({{0, 4 * kTokens}});
  for (int i = 0; i < 4; ++i) {
    spec.in_tokens.push_back(block(i));
    spec.in_heads.push_back({0, kHeads});
    spec.out_tokens.push_back(all);
    spec.out_heads.push_back({2 * i, 2 * i + 2});
  }
  // Three peers; each GPU's NVSwitch port carries three flows, so each gets 450/3 GB/s.
  const double slice = double(kTokens) * 2 * 64 * 2;  // 2 heads x head_dim x bf16
  const double alpha = topology.route(0, 1).latency_us * 1e-6;
  EXPECT_NEAR(seconds(spec), 3 * alpha + slice / (450e9 / 3), 1e-12);
}

TEST_F(AllToAll, AShiftHasOnePeer) {
  CollectiveSpec spec;
  spec.kind = OpKind::AllToAll;
  spec.group = 0;
  spec.fields = field_bit(Field::Q);
  for (int i = 0; i < 4; ++i) {
    spec.in_tokens.push_back(block(i));
    spec.in_heads.push_back({0, kHeads});
    spec.out_tokens.push_back(block((i + 3) % 4));  // member j receives member j-1's block
    spec.out_heads.push_back({0, kHeads});
  }
  const double bytes = double(kTokens) * kHeads * 64 * 2;
  const double alpha = topology.route(0, 1).latency_us * 1e-6;
  EXPECT_NEAR(seconds(spec), alpha + bytes / 450e9, 1e-12);
}

}  // namespace
}  // namespace wallfacer

namespace wallfacer {
namespace {

// Groups of a collective pattern with more than kExactFlows flows are each priced against the
// flows near them (those with an end on the group's nodes), and the price is kept under those
// flows and the group's own (FlowPriceCache). Every pair of nodes holds two groups of one kind:
// A, GPU 0 of both nodes; B, GPUs 1 to 3 of the first and GPU 1 of the second. A and B count the
// same flows near them, so only their own flows tell their prices apart: at offset 2, A's members
// send to themselves (no flow, no price) while B's cross the NIC. 700 pairs make 4,200 flows at
// offset 1. Priced through one cache by two pricers, and over two placements, every group gets
// what a pricer without a cache gives it.
TEST(NearFlowPrices, PricesKeptByTheirFlowsEqualPricesComputedAfresh) {
  constexpr int kPairs = 700, kGpus = 4;
  const Topology topology = testing::switch_nodes(2 * kPairs, kGpus);
  detail::FlowPriceCache cache;
  for (bool shifted : {false, true}) {
    SCOPED_TRACE(shifted ? "GPUs shifted by one inside each node" : "rank r on GPU r");
    Plan plan;
    plan.workload = testing::mha_workload(1024);
    for (int r = 0; r < 2 * kPairs * kGpus; ++r) {
      const int node = r / kGpus, local = shifted ? (r + 1) % kGpus : r % kGpus;
      plan.ranks.push_back(RankSlot{r, node * kGpus + local, node, local, ""});
    }
    for (int q = 0; q < kPairs; ++q) {
      const int first = 2 * q * kGpus, second = first + kGpus;
      plan.groups.push_back(CommGroup{fmt::format("a{}", q), GroupKind::AllToAll, {first, second}});
      plan.groups.push_back(
          CommGroup{fmt::format("b{}", q), GroupKind::AllToAll, {first + 1, first + 2, first + 3, second + 1}});
    }
    const std::vector<FlowSet> no_sets;
    detail::NetworkPricer once(topology, plan, no_sets, nullptr, &cache),
        again(topology, plan, no_sets, nullptr, &cache);
    detail::NetworkPricer fresh(topology, plan, no_sets);
    int differ = 0;
    for (int offset : {1, 2, 3})
      for (int g = 0; g < 6; ++g) {  // the first three pairs' groups
        const std::vector<std::pair<int, int64_t>> slices = {{offset, int64_t(1) << 24}};
        const double expected = fresh.all_to_all_seconds(g, slices);
        EXPECT_EQ(once.all_to_all_seconds(g, slices), expected) << "group " << g << " offset " << offset;
        EXPECT_EQ(again.all_to_all_seconds(g, slices), expected) << "group " << g << " offset " << offset;
        if (g % 2 == 1 && expected != fresh.all_to_all_seconds(g - 1, slices)) ++differ;
      }
    EXPECT_GE(differ, 3);  // A and B of a pair are priced apart at some offset
  }
}

}  // namespace
}  // namespace wallfacer
