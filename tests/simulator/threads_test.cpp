// Rank actors on several threads (SimOptions::threads): every strategy gives the same result and
// the same trace, byte for byte, as on one thread; errors name the same rank; the automatic count
// follows the rank count; bad counts are input errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include <wallfacer/simulator/simulator.hpp>
#include "simulator/sim_test_util.hpp"

namespace wallfacer {
namespace {

using test::recv_op;
using test::send_op;

struct Replayed {
  std::string json, trace;
};

// The result as JSON without the host time it took, and the trace file's bytes.
Replayed simulate_on(int threads, const Plan& plan, const Topology& topology, const std::string& name,
                     bool shortcuts = true) {
  SimOptions options;
  options.threads = threads;
  options.shortcuts = shortcuts;
  options.trace_path = test::temp_path("threads-" + name + ".json");
  SimResult result = simulate(plan, topology, options);
  result.wall_seconds = 0;
  Replayed replayed{to_json(result), test::read_file(options.trace_path)};
  std::filesystem::remove(options.trace_path);
  return replayed;
}

// Two DGX H100 nodes: NVSwitch inside, rails through NICs between them, so flows contend and
// collectives (all-to-all, tree and ring all-reduce) run next to point-to-point rings.
TEST(SimulatorThreads, EveryStrategyGivesTheSameResultAndTraceOnTwoAndFourThreads) {
  const Topology topology = Topology::load("dgx-h100", 2);
  const Workload workload = test::test_workload(16 * 4096, true);
  for (StrategyKind kind :
       {StrategyKind::Ring, StrategyKind::Zigzag, StrategyKind::Ulysses, StrategyKind::Usp, StrategyKind::DoubleRing,
        StrategyKind::AllGather, StrategyKind::WallFacer, StrategyKind::Lss}) {
    const std::string name = to_string(kind);
    const Plan plan = test::plan_for(kind, workload, topology, 16);
    const Replayed alone = simulate_on(1, plan, topology, name + "-1");
    ASSERT_FALSE(alone.trace.empty()) << name;
    for (int threads : {2, 4}) {
      const Replayed threaded = simulate_on(threads, plan, topology, name + "-" + std::to_string(threads));
      EXPECT_EQ(alone.json, threaded.json) << name << " on " << threads << " threads";
      EXPECT_TRUE(alone.trace == threaded.trace) << name << " on " << threads << " threads: traces differ";
    }
  }
}

// Without the shortcuts every compute op is a SimGrid exec, which actors on several threads
// create at once (ActivitySet::exec).
TEST(SimulatorThreads, ComputeAsSimGridExecsGivesTheSameResultOnFourThreads) {
  const Topology topology = Topology::load("dgx-h100", 2);
  const Workload workload = test::test_workload(16 * 4096, true);
  for (StrategyKind kind : {StrategyKind::Usp, StrategyKind::WallFacer}) {
    const std::string name = to_string(kind);
    const Plan plan = test::plan_for(kind, workload, topology, 16);
    const Replayed alone = simulate_on(1, plan, topology, name + "-exec-1", false);
    const Replayed threaded = simulate_on(4, plan, topology, name + "-exec-4", false);
    EXPECT_EQ(alone.json, threaded.json) << name;
    EXPECT_TRUE(alone.trace == threaded.trace) << name << ": traces differ";
  }
}

// Ranks 1 and 3 both receive their peer's messages in the wrong order at the same instant; the
// report names the lower rank whichever thread ran first.
TEST(SimulatorThreads, SimultaneousErrorsReportTheLowestRank) {
  const Topology topology = Topology::parse(test::star_topology_yaml(4, 100, 1), "star.yaml");
  const Plan plan = test::placement_plan(topology, 4);
  Schedule s = test::empty_schedule(4);
  for (int sender : {0, 2}) {
    s.ranks[size_t(sender)].add(send_op(sender + 1, 1, 1024, 0));
    s.ranks[size_t(sender)].add(send_op(sender + 1, 2, 1024, 1));
    s.ranks[size_t(sender + 1)].add(recv_op(sender, 2, 1024, 1));
    s.ranks[size_t(sender + 1)].add(recv_op(sender, 1, 1024, 0));
  }
  for (int threads : {1, 2}) {
    SimOptions options;
    options.threads = threads;
    try {
      simulate_schedule(plan, topology, s, options);
      ADD_FAILURE() << threads << " threads: expected a ScheduleError";
    } catch (const ScheduleError& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind("rank 1: ", 0), 0u) << threads << " threads: " << what;
      EXPECT_NE(what.find("different orders"), std::string::npos) << what;
    }
  }
}

TEST(SimulatorThreads, AutomaticCountIsTwoFromTheThresholdWhereTwoCpusAreUsable) {
  SimOptions automatic;
  EXPECT_EQ(simulation_threads(automatic, 8), 1);
  EXPECT_EQ(simulation_threads(automatic, kParallelFromRanks - 1), 1);
  EXPECT_EQ(simulation_threads(automatic, kParallelFromRanks), std::min(2, usable_cpus()));
  EXPECT_EQ(simulation_threads(automatic, 16384), std::min(2, usable_cpus()));
  SimOptions three;
  three.threads = 3;
  EXPECT_EQ(simulation_threads(three, 8), 3);
  EXPECT_EQ(simulation_threads(three, 16384), 3);
  EXPECT_GE(usable_cpus(), 1);
}

TEST(SimulatorThreads, CountsOutsideZeroTo64AreInputErrors) {
  const Topology topology = Topology::parse(test::star_topology_yaml(2, 100, 1), "star.yaml");
  const Plan plan = test::placement_plan(topology, 2);
  Schedule s = test::empty_schedule(2);
  s.ranks[0].add(send_op(1, 1, 1024, 0));
  s.ranks[1].add(recv_op(0, 1, 1024, 0));
  for (int threads : {-1, 65}) {
    SimOptions options;
    options.threads = threads;
    try {
      simulate_schedule(plan, topology, s, options);
      ADD_FAILURE() << threads << ": expected an InputError";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("--sim-threads"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace wallfacer
