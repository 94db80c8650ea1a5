// SimOptions::cancel: a set flag abandons the simulation (SimulationCancelled) and leaves no
// child process behind; a flag that stays false changes nothing in the result.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <atomic>
#include <cerrno>

#include <wallfacer/schedule/strategy.hpp>
#include <wallfacer/simulator/simulator.hpp>
#include "simulator/sim_test_util.hpp"

namespace wallfacer {
namespace {

// True when this process has no child, running or unreaped.
bool no_child_left() {
  return ::waitpid(-1, nullptr, WNOHANG) < 0 && errno == ECHILD;
}

TEST(SimulatorCancel, ASetFlagAbandonsTheSimulationAndKillsItsProcess) {
  const Topology topology = Topology::load("dgx-h100", 2);
  const Plan plan = test::plan_for(StrategyKind::Ring, test::test_workload(16 * 4096, true), topology, 16);
  std::atomic<bool> cancel{true};
  SimOptions options;
  options.cancel = &cancel;
  EXPECT_THROW(simulate(plan, topology, options), SimulationCancelled);
  EXPECT_TRUE(no_child_left());
  EXPECT_THROW(simulate_many({plan, plan, plan}, topology, options, 2), SimulationCancelled);
  EXPECT_TRUE(no_child_left());
}

TEST(SimulatorCancel, AFlagThatStaysFalseChangesNothing) {
  const Topology topology = Topology::load("dgx-h100", 2);
  const Plan plan = test::plan_for(StrategyKind::Ulysses, test::test_workload(16 * 4096, true), topology, 16);
  std::atomic<bool> cancel{false};
  SimOptions watched;
  watched.cancel = &cancel;
  SimResult with_flag = simulate(plan, topology, watched);
  SimResult without = simulate(plan, topology, {});
  with_flag.wall_seconds = without.wall_seconds = 0;
  EXPECT_EQ(to_json(with_flag), to_json(without));
  EXPECT_TRUE(no_child_left());
}

}  // namespace
}  // namespace wallfacer
