// The simulator's exact shortcuts (SimOptions::shortcuts): merged link chains and compute ops run
// as timers must give the literal platform's answer. The platform test derives the merged routes
// by hand on a small topology; the replay tests run real strategies both ways.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>

#include <wallfacer/simulator/simulator.hpp>
#include <wallfacer/topology/topology.hpp>
#include "isolated_run.hpp"
#include "platform.hpp"
#include "simgrid_adapter.hpp"
#include "simulator/sim_test_util.hpp"

namespace wallfacer {
namespace {

// Routes GPU 0 -> 2 and GPU 1 -> 2 of the shared-NIC topology (n0/gpu0, n0/gpu1 -> n1/gpu0), as
// "links latency_s" lines after declaring exactly those two pairs with `detail`.
std::string declared_routes(sim::LinkDetail detail) {
  return sim::run_in_child_process([detail] {
    const test::SharedNicFigures figures;
    Topology topology = Topology::parse(test::shared_nic_topology_yaml(figures), "nic.yaml");
    sim::SimEngine engine(sim::EngineConfig{});
    sim::PlatformLayout layout = sim::declare_hosts(engine, topology, {1e12});
    sim::NetworkDeclared declared = sim::declare_network(engine, topology, layout, {{0, 2}, {1, 2}, {0, 2}}, detail);
    engine.seal();
    std::string text = fmt::format("{} routes {} links\n", declared.routes, declared.links);
    for (int src : {0, 1}) {
      double latency = 0;
      auto names = engine.resolved_route(layout.host_of_gpu[size_t(src)], layout.host_of_gpu[2], &latency);
      text += fmt::format("{} {:.17g}\n", names.size(), latency);
    }
    return text;
  });
}

TEST(SimulatorShortcuts, LinkChainsCarryingTheSameRoutesMerge) {
  const double latency = test::SharedNicFigures{}.route_latency_s();
  // Physical: each route crosses gpu-pcie, pcie-nic, nic-tor, tor-nic, nic-pcie, pcie-gpu, and
  // the two routes share the last five: 2 + 5 resources.
  EXPECT_EQ(declared_routes(sim::LinkDetail::Physical),
            fmt::format("2 routes 7 links\n6 {0:.17g}\n6 {0:.17g}\n", latency));
  // Merged: each GPU's own uplink, then one link for the five shared resources; the latency of
  // every route is kept.
  EXPECT_EQ(declared_routes(sim::LinkDetail::MergedChains),
            fmt::format("2 routes 3 links\n2 {0:.17g}\n2 {0:.17g}\n", latency));
}

void expect_same_result(const SimResult& fast, const SimResult& literal) {
  // SimGrid dates events to 1 ns (precision/timing); allow a few of those.
  const double tolerance_ms = 1e-5;
  EXPECT_NEAR(fast.step_ms, literal.step_ms, tolerance_ms);
  EXPECT_NEAR(fast.forward_ms, literal.forward_ms, tolerance_ms);
  EXPECT_NEAR(fast.backward_ms, literal.backward_ms, tolerance_ms);
  EXPECT_EQ(fast.activities, literal.activities);
  ASSERT_EQ(fast.ranks.size(), literal.ranks.size());
  for (size_t r = 0; r < fast.ranks.size(); ++r) {
    EXPECT_NEAR(fast.ranks[r].compute_ms, literal.ranks[r].compute_ms, tolerance_ms) << "rank " << r;
    EXPECT_NEAR(fast.ranks[r].comm_ms, literal.ranks[r].comm_ms, tolerance_ms) << "rank " << r;
  }
  ASSERT_EQ(fast.link_classes.size(), literal.link_classes.size());
  for (size_t i = 0; i < fast.link_classes.size(); ++i)
    EXPECT_DOUBLE_EQ(fast.link_classes[i].bytes, literal.link_classes[i].bytes);
}

SimResult run(const Plan& plan, const Topology& topology, bool shortcuts, const Calibration& calibration) {
  SimOptions options;
  options.calibration = calibration;
  options.shortcuts = shortcuts;
  return simulate(plan, topology, options);
}

TEST(SimulatorShortcuts, EveryStrategyOnTwoDgxH100NodesGivesTheLiteralResult) {
  Topology topology = Topology::load("dgx-h100", 2);
  Workload workload = test::test_workload(16 * 4096, true);
  for (StrategyKind kind :
       {StrategyKind::Ring, StrategyKind::Zigzag, StrategyKind::Ulysses, StrategyKind::Usp, StrategyKind::DoubleRing,
        StrategyKind::AllGather, StrategyKind::WallFacer, StrategyKind::Lss}) {
    SCOPED_TRACE(to_string(kind));
    Plan plan = test::plan_for(kind, workload, topology, 16);
    const Calibration calibration = Calibration::defaults();
    SimResult fast = run(plan, topology, true, calibration);
    SimResult literal = run(plan, topology, false, calibration);
    EXPECT_GT(fast.step_ms, 0);
    expect_same_result(fast, literal);
  }
}

TEST(SimulatorShortcuts, ContendedNicGivesTheLiteralResult) {
  // A ring over two GPUs per NIC: the inter-node hops of ranks 0 and 1 share their NIC.
  Topology topology = Topology::parse(test::shared_nic_topology_yaml(), "nic.yaml");
  Workload workload = test::test_workload(4 * 4096, false);
  Plan plan = test::plan_for(StrategyKind::Ring, workload, topology, 4);
  const Calibration calibration = test::flat_calibration(0.5);
  SimResult fast = run(plan, topology, true, calibration);
  SimResult literal = run(plan, topology, false, calibration);
  expect_same_result(fast, literal);
}

// One actor with a 1 s timer (tag 1), a 3 s timer (tag 3) and a 2 s transfer (tag 2) to a second
// host, over a 1 GB/s link without latency. Each line: tag, finish time, and the clock when
// wait_any handed it out. `wake_for_first` says whether the actor must be woken for timer 1.
std::string timer_handouts(bool wake_for_first) {
  return sim::run_in_child_process([wake_for_first] {
    sim::SimEngine engine(sim::EngineConfig{});
    int a = engine.add_host({"a", {1e12}}), b = engine.add_host({"b", {1e12}});
    int link = engine.add_link({"a-b", 1e9, 0, true});
    engine.add_route(a, b, {{link, true}});
    engine.seal();
    int channel = engine.add_channel("a>b");
    std::string text;
    engine.spawn("sender", a, [&] {
      sim::ActivitySet set;
      set.set_wake_policy([](const void* wake, uint64_t tag) { return tag != 1 || *static_cast<const bool*>(wake); },
                          &wake_for_first);
      static int payload = 0;
      set.timer(1.0, 1);
      set.send(channel, 2e9, &payload, 2);
      set.timer(3.0, 3);
      while (!set.empty()) {
        sim::Completion done = set.wait_any();
        text += fmt::format("{} {:.9f} {:.9f}\n", done.tag, done.finish, sim::SimEngine::now());
      }
    });
    engine.spawn("receiver", b, [&] {
      sim::ActivitySet set;
      set.recv(channel, 0);
      set.wait_any();
    });
    engine.run();
    return text;
  });
}

TEST(SimulatorShortcuts, TimersNobodyWaitsForComeOutLateInFinishOrder) {
  // Woken for every timer: each completion is handed out when it happens.
  EXPECT_EQ(timer_handouts(true),
            "1 1.000000000 1.000000000\n"
            "2 2.000000000 2.000000000\n"
            "3 3.000000000 3.000000000\n");
  // Not woken for timer 1: it comes out at the transfer's end, first and with its own time.
  EXPECT_EQ(timer_handouts(false),
            "1 1.000000000 2.000000000\n"
            "2 2.000000000 2.000000000\n"
            "3 3.000000000 3.000000000\n");
}

}  // namespace
}  // namespace wallfacer
