// Interleaved 1F1B in the simulator (docs/step.md "Interleaved 1F1B"): the replay of a pipelined
// step with virtual stages finishes, agrees with the cost model as the plain pipeline does, and
// is shorter than the plain 1F1B replay of the same plan.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include <wallfacer/simulator/simulator.hpp>

namespace wallfacer {
namespace {

TEST(SimulatorInterleaved, ReplayAgreesWithTheCostModelAndShrinksTheBubble) {
  const Topology topology = Topology::load("dgx-h100", 1);
  WorkloadOverrides overrides;
  overrides.seq = 4096;
  overrides.batch = 4;
  overrides.layers = 8;
  overrides.microbatches = 4;
  const Workload w = load_workload("llama-3-8b", overrides);
  const CostModel model(topology, Calibration::defaults());
  double simulated[2] = {0, 0};
  for (int v : {1, 2}) {
    Plan plan = make_plan(StrategyKind::Ulysses, {.sequence_parallel = 2, .pipeline_parallel = 4, .virtual_stages = v},
                          w, topology, 8);
    plan.scope = Scope::Step;
    const SimResult sim = simulate(plan, topology);
    const double analytic = model.evaluate_step(plan).step_ms;
    fmt::print("v = {}: simulated {:.3f} ms, cost model {:.3f} ms\n", v, sim.step_ms, analytic);
    EXPECT_NEAR(analytic, sim.step_ms, 0.05 * sim.step_ms) << "v = " << v;
    simulated[v - 1] = sim.step_ms;
  }
  EXPECT_LT(simulated[1], simulated[0]);
}

}  // namespace
}  // namespace wallfacer
