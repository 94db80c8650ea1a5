// Simulated times of hand-built schedules against closed forms derived from the link and GPU
// figures: uncontended rings, a NIC shared by two flows, ring and direct collectives, compute
// overlapped with communication, and the compute slowdown under communication.
#include <gtest/gtest.h>

#include <cmath>

#include <wallfacer/simulator/simulator.hpp>
#include "simulator/sim_test_util.hpp"

namespace wallfacer {
namespace {

using test::compute_op;
using test::recv_op;
using test::send_op;

constexpr double kRel = 1e-9;

void expect_rel(double actual, double expected, double rel = kRel) {
  EXPECT_NEAR(actual, expected, std::abs(expected) * rel) << "expected " << expected;
}

// Pass-KV ring by hand: at step t every rank forwards the block it received at step t-1 to its
// successor; the block of step t is computed once it arrived (step 0 computes its own).
Schedule hand_ring(int ranks, int64_t bytes, double flops_per_block) {
  Schedule schedule = test::empty_schedule(ranks);
  for (int r = 0; r < ranks; ++r) {
    RankProgram& p = schedule.ranks[size_t(r)];
    int next = (r + 1) % ranks, prev = (r + ranks - 1) % ranks;
    int32_t last_recv = -1;
    for (int t = 0; t < ranks; ++t) {
      std::vector<int32_t> arrived = last_recv < 0 ? std::vector<int32_t>{} : std::vector<int32_t>{last_recv};
      if (flops_per_block > 0) p.add(compute_op(schedule, flops_per_block, t), arrived);
      if (t + 1 < ranks) {
        p.add(send_op(next, t, bytes, t), arrived);
        last_recv = p.add(recv_op(prev, t, bytes, t));
      }
    }
  }
  return schedule;
}

struct RingCase {
  int ranks = 4;
  double bandwidth_GBps = 100, latency_us = 2;
  int64_t bytes = 64 << 20;
  double hop_seconds() const { return 2 * latency_us * 1e-6 + double(bytes) / (bandwidth_GBps * 1e9); }
};

TEST(SimulatorClosedForm, UncontendedRingIsLatencyPlusBytesOverBandwidthPerStep) {
  for (int ranks : {2, 4, 8}) {
    RingCase c;
    c.ranks = ranks;
    Topology topology = Topology::parse(test::star_topology_yaml(ranks, c.bandwidth_GBps, c.latency_us), "star.yaml");
    Plan plan = test::placement_plan(topology, ranks);
    SimResult result = simulate_schedule(plan, topology, hand_ring(ranks, c.bytes, 0));
    double expected = (ranks - 1) * c.hop_seconds();
    expect_rel(result.step_ms, expected * 1e3);
    expect_rel(result.forward_ms, expected * 1e3);
    EXPECT_EQ(result.backward_ms, 0);
    EXPECT_EQ(result.activities, int64_t(ranks) * (ranks - 1));  // sends only: no compute
    ASSERT_EQ(result.ranks.size(), size_t(ranks));
    for (const RankStats& r : result.ranks) {
      EXPECT_EQ(r.compute_ms, 0);
      expect_rel(r.comm_ms, expected * 1e3);  // a transfer in flight at every instant
      EXPECT_NEAR(r.idle_ms, 0, 1e-12);
    }
  }
}

TEST(SimulatorClosedForm, RingOverlapsComputeWithTransfers) {
  RingCase c;
  Topology topology = Topology::parse(test::star_topology_yaml(c.ranks, c.bandwidth_GBps, c.latency_us), "star.yaml");
  Plan plan = test::placement_plan(topology, c.ranks);
  SimOptions options;
  options.calibration = test::flat_calibration(0.5);
  const double rate = 0.5 * 100e12;  // fallback efficiency x peak
  const double hop = c.hop_seconds();
  // Compute block t needs the block received at step t-1 (ready at t x hop); the compute stream
  // runs blocks back to back: the last one ends at max over t of t x hop + (P - t) x block.
  for (double block : {0.3 * hop, 2.5 * hop}) {
    SimResult result = simulate_schedule(plan, topology, hand_ring(c.ranks, c.bytes, block * rate), options);
    double expected = std::max(c.ranks * block, (c.ranks - 1) * hop + block);
    expect_rel(result.step_ms, expected * 1e3);
    for (const RankStats& r : result.ranks)
      expect_rel(r.compute_ms, c.ranks * block * 1e3);
    EXPECT_EQ(result.activities, int64_t(c.ranks) * (2 * c.ranks - 1));
    EXPECT_EQ(result.transfers, int64_t(c.ranks) * (c.ranks - 1));  // the P compute blocks are not
  }
}

TEST(SimulatorClosedForm, TwoFlowsThroughOneNicTakeTwiceAsLong) {
  test::SharedNicFigures f;
  Topology topology = Topology::parse(test::shared_nic_topology_yaml(f), "shared-nic.yaml");
  ASSERT_EQ(topology.num_gpus(), 4);
  const int64_t bytes = 256 << 20;
  Plan plan = test::placement_plan(topology, 4);
  // Rank r on GPU r: ranks 0, 1 on node 0 and ranks 2, 3 on node 1.
  auto flows = [&](int count) {
    Schedule s = test::empty_schedule(4);
    for (int i = 0; i < count; ++i) {
      s.ranks[size_t(i)].add(send_op(2 + i, 0, bytes, 0));
      s.ranks[size_t(2 + i)].add(recv_op(i, 0, bytes, 0));
    }
    return s;
  };
  SimResult one = simulate_schedule(plan, topology, flows(1));
  SimResult two = simulate_schedule(plan, topology, flows(2));
  const double lat = f.route_latency_s(), per_flow = double(bytes) / (f.net_GBps * 1e9);
  expect_rel(one.step_ms, (lat + per_flow) * 1e3);
  expect_rel(two.step_ms, (lat + 2 * per_flow) * 1e3);
  expect_rel(two.step_ms - lat * 1e3, 2 * (one.step_ms - lat * 1e3));

  // The two network hops each carried both flows; the busiest links are those two directions.
  ASSERT_GE(two.busiest_links.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(two.busiest_links[size_t(i)].kind, LinkKind::Network);
    expect_rel(two.busiest_links[size_t(i)].bytes, 2.0 * bytes);
    expect_rel(two.busiest_links[size_t(i)].utilization, 2.0 * bytes / (f.net_GBps * 1e9 * two.step_ms / 1e3));
  }
  EXPECT_EQ(two.busiest_links[0].name, "n0/nic0->tor");
  EXPECT_EQ(two.busiest_links[1].name, "tor->n1/nic0");
  for (const LinkClassStats& c : two.link_classes) {
    if (c.kind == LinkKind::Network) {
      EXPECT_EQ(c.links, 4);  // two full-duplex cables
      expect_rel(c.bytes, 4.0 * bytes);
    }
    if (c.kind == LinkKind::Pcie) expect_rel(c.bytes, 8.0 * bytes);  // 4 PCIe hops x 2 flows
  }
}

TEST(SimulatorClosedForm, HalfDuplexLinkSharesOneResourceBetweenDirections) {
  std::string yaml = test::star_topology_yaml(2, 100, 1);
  // Make the links half duplex: opposite flows then halve each other's bandwidth.
  size_t at = 0;
  while ((at = yaml.find("latency_us: 1}", at)) != std::string::npos) {
    yaml.replace(at, 14, "latency_us: 1, full_duplex: false}");
    at += 10;
  }
  Topology topology = Topology::parse(yaml, "half.yaml");
  Plan plan = test::placement_plan(topology, 2);
  const int64_t bytes = 100 << 20;
  Schedule s = test::empty_schedule(2);
  for (int r = 0; r < 2; ++r) {
    s.ranks[size_t(r)].add(send_op(1 - r, 0, bytes, 0));
    s.ranks[size_t(r)].add(recv_op(1 - r, 0, bytes, 0));
  }
  SimResult result = simulate_schedule(plan, topology, s);
  expect_rel(result.step_ms, (2e-6 + 2.0 * double(bytes) / 100e9) * 1e3);
}

}  // namespace
}  // namespace wallfacer
