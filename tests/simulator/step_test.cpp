// The whole training step in the simulator (docs/step.md): every strategy's step plan replays to
// completion, agrees with the cost model's whole-step time, and spends on each rank exactly the
// compute time ComputeTimer gives its compute ops; flat collectives expand by bytes; fewer layers
// replay on request; traces name the step's ops by their labels.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <set>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/cost/compute_time.hpp>
#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/schedule/step.hpp>
#include <wallfacer/simulator/simulator.hpp>
#include "collective_steps.hpp"
#include "simulator/sim_test_util.hpp"

namespace wallfacer {
namespace {

// The cost model and the replay agree on the whole step within this (the attention-scope
// agreement tests' tolerance, SimulatorStrategies.CostModelAgreesOnForwardAndWholeStep).
constexpr double kStepTolerance = 0.05;

// Llama-3-8B cut to `layers` layers, 8 x 4,096 tokens of one sequence.
Workload step_workload(int layers) {
  WorkloadOverrides overrides;
  overrides.seq = 8 * 4096;
  overrides.batch = 1;
  overrides.causal = true;
  overrides.layers = layers;
  return load_workload("llama-3-8b", overrides);
}

Plan step_plan(StrategyKind kind, const Topology& topology, int layers = 2) {
  Plan plan = test::plan_for(kind, step_workload(layers), topology, 8);
  plan.scope = Scope::Step;
  return plan;
}

bool is_compute_op(OpKind kind) {
  return kind == OpKind::AttnFwd || kind == OpKind::AttnBwd || kind == OpKind::BwdPrep || kind == OpKind::Copy ||
         is_step_compute(kind);
}

// Seconds of a rank's compute ops by ComputeTimer, as the cost model prices them.
double compute_seconds(const Plan& plan, const Topology& topology, const Schedule& schedule, int rank) {
  const Calibration calibration = Calibration::defaults();
  ComputeTimer timer(topology.gpu(), calibration, plan.workload);
  double total = 0;
  for (const Op& op : schedule.ranks[size_t(rank)].ops)
    if (is_compute_op(op.kind)) total += timer.seconds(op, schedule.tokens);
  return total;
}

TEST(SimulatorStep, EveryStrategysStepFinishesAgreesAndComputesWhatTheTimerSays) {
  const Topology topology = Topology::load("dgx-h100", 1);
  // Compute at full speed, so that each rank computes exactly what the timer says (the slowdown
  // beside communication: SimulatorStep.ComputeSlowedByCommunicationAgreesWithTheReplay).
  SimOptions options;
  options.comm_slowdown = false;
  CostOptions cost_options;
  cost_options.comm_slowdown = false;
  for (StrategyKind kind : all_strategies()) {
    SCOPED_TRACE(to_string(kind));
    const Plan plan = step_plan(kind, topology);
    const SimResult simulated = simulate(plan, topology, options);
    EXPECT_EQ(simulated.layers, 2);
    ASSERT_EQ(simulated.ranks.size(), 8u);
    const CostBreakdown analytic = CostModel(topology, Calibration::defaults(), cost_options).evaluate_step(plan);
    fmt::print("{:<11} simulated {:9.4f} ms, cost model {:9.4f} ms ({:+.3f} %)\n", to_string(kind), simulated.step_ms,
               analytic.step_ms, 100 * (analytic.step_ms / simulated.step_ms - 1));
    EXPECT_GT(simulated.step_ms, 0);
    EXPECT_NEAR(analytic.step_ms, simulated.step_ms, kStepTolerance * simulated.step_ms);
    const Schedule schedule = StepBuilder(plan).build();
    for (int rank = 0; rank < 8; ++rank) {
      const double expected_ms = compute_seconds(plan, topology, schedule, rank) * 1e3;
      EXPECT_NEAR(simulated.ranks[size_t(rank)].compute_ms, expected_ms, 1e-9 * expected_ms) << "rank " << rank;
    }
  }
}

// Gradients in bf16: the replay and the cost model still agree on the step (where the
// fp32 agreement test holds, one node), and neither makes it slower than with fp32 gradients.
TEST(SimulatorStep, Bf16GradientsAgreeWithTheCostModelAndHalveTheSyncBytes) {
  const Topology topology = Topology::load("dgx-h100", 1);
  for (StrategyKind kind : {StrategyKind::Ulysses, StrategyKind::Zigzag}) {
    SCOPED_TRACE(to_string(kind));
    Workload w = step_workload(2);
    w.zero_stage = 0;
    Plan plan = test::plan_for(kind, w, topology, 8);
    plan.scope = Scope::Step;
    const CostModel model(topology, Calibration::defaults());
    const SimResult fp32 = simulate(plan, topology);
    const double fp32_ms = model.evaluate_step(plan).step_ms;
    plan.workload.grad_comm_dtype = DType::BF16;
    const SimResult bf16 = simulate(plan, topology);
    const double bf16_ms = model.evaluate_step(plan).step_ms;
    EXPECT_NEAR(bf16_ms, bf16.step_ms, kStepTolerance * bf16.step_ms);
    EXPECT_LE(bf16.step_ms, fp32.step_ms);
    EXPECT_LE(bf16_ms, fp32_ms);
  }
  // A tree all-reduce's transfers carry half the bytes with 2-byte gradients.
  CollectiveSpec spec;
  spec.kind = OpKind::AllReduce;
  spec.group = 0;
  spec.fields = field_bit(Field::WeightGrad);
  spec.elements = 1 << 20;
  spec.algorithm = AllReduceAlgorithm::Tree;
  TokenSetPool pool;
  sim::ExpandOptions options;
  const std::vector<int> group = {0, 1, 2, 3};
  const double four = sim::expand_collective(spec, 0, group, 1, pool, options).sends.at(0).bytes;
  options.grad_elem_bytes = 2;
  EXPECT_DOUBLE_EQ(sim::expand_collective(spec, 0, group, 1, pool, options).sends.at(0).bytes, four / 2);
}

// Compute slowed while communication kernels hold SMs, as the cost model (CostOptions::comm_slowdown)
// and the replay (SimOptions::comm_slowdown) apply it by default (the calibration's
// compute_slowdown_under_comm, 1 / 1.189), on one node, where their steps agree at full speed:
// the steps still agree, and so does what the slowdown adds (docs/cost-model.md "Compute slowed by
// communication": the ring strategies' steps grow by 8 to 9 ms of about 60 to 70, Ulysses', the
// all-gather's and LSS's by 1 to 2 ms).
TEST(SimulatorStep, ComputeSlowedByCommunicationAgreesWithTheReplay) {
  const Topology topology = Topology::load("dgx-h100", 1);
  CostOptions full_speed;
  full_speed.comm_slowdown = false;
  const CostModel plain_model(topology, Calibration::defaults(), full_speed);
  const CostModel slowed_model(topology, Calibration::defaults());
  for (StrategyKind kind : all_strategies()) {
    SCOPED_TRACE(to_string(kind));
    Plan plan = step_plan(kind, topology);
    SimOptions options;
    const SimResult replayed = simulate(plan, topology, options);
    options.comm_slowdown = false;
    const SimResult plain = simulate(plan, topology, options);
    const double plain_ms = plain_model.evaluate_step(plan).step_ms;
    const CostBreakdown analytic = slowed_model.evaluate_step(plan);
    fmt::print("{:<11} simulated {:8.3f} -> {:8.3f} ms, cost model {:8.3f} -> {:8.3f} ms\n", to_string(kind),
               plain.step_ms, replayed.step_ms, plain_ms, analytic.step_ms);
    EXPECT_NEAR(analytic.step_ms, replayed.step_ms, kStepTolerance * replayed.step_ms);
    const double simulated_gain = replayed.step_ms - plain.step_ms, analytic_gain = analytic.step_ms - plain_ms;
    EXPECT_GT(simulated_gain, 0);
    EXPECT_NEAR(analytic_gain, simulated_gain, 0.1 * simulated_gain + 0.005 * replayed.step_ms);
    EXPECT_NEAR(analytic.parts.sum_ms(), analytic.step_ms, 1e-9 * analytic.step_ms);
    EXPECT_GT(analytic.parts.slowdown_ms, 0);
  }
}

TEST(SimulatorStep, FewerLayersReplayOnRequestAndAttentionScopeReportsNone) {
  const Topology topology = Topology::load("dgx-h100", 1);
  const Plan plan = step_plan(StrategyKind::Ulysses, topology, 3);
  SimOptions options;
  options.step_layers = 1;
  const SimResult one = simulate(plan, topology, options);
  EXPECT_EQ(one.layers, 1);
  const SimResult all = simulate(plan, topology);
  EXPECT_EQ(all.layers, 3);
  EXPECT_LT(one.step_ms, all.step_ms);
  options.step_layers = 4;
  EXPECT_THROW(simulate(plan, topology, options), InputError);
  Plan attention = plan;
  attention.scope = Scope::Attention;
  EXPECT_EQ(simulate(attention, topology).layers, 0);
}

TEST(SimulatorStep, FlatCollectivesExpandIntoEvenRingStepsByBytes) {
  TokenSetPool pool;
  const std::vector<int> group = {4, 0, 6, 2};
  for (OpKind kind : {OpKind::AllGather, OpKind::ReduceScatter, OpKind::AllReduce}) {
    SCOPED_TRACE(to_string(kind));
    CollectiveSpec spec;
    spec.kind = kind;
    spec.group = 0;
    spec.fields = field_bit(kind == OpKind::AllGather ? Field::Weight : Field::WeightGrad);
    spec.elements = 1 << 20;
    // A tree is an all-reduce's only: a flat all-gather or reduce-scatter still runs as a ring.
    if (kind != OpKind::AllReduce) spec.algorithm = AllReduceAlgorithm::Tree;
    ASSERT_TRUE(is_flat_collective(spec));
    const sim::CollectiveSteps steps = sim::expand_collective(spec, 3000.0, group, 0, pool);
    const size_t count = kind == OpKind::AllReduce ? 6 : 3;
    ASSERT_EQ(steps.sends.size(), count);
    ASSERT_EQ(steps.recvs.size(), count);
    for (size_t k = 0; k < count; ++k) {
      EXPECT_EQ(steps.sends[k].peer, 6);
      EXPECT_EQ(steps.recvs[k].peer, 4);
      EXPECT_DOUBLE_EQ(steps.sends[k].bytes, 3000.0 / double(count));
    }
  }
}

TEST(SimulatorStep, TraceNamesTheStepsOpsByTheirLabels) {
  const Topology topology = Topology::load("dgx-h100", 1);
  const Plan plan = step_plan(StrategyKind::WallFacer, topology);
  SimOptions options;
  options.trace_path = test::temp_path("step-trace.json");
  options.trace_ranks = {0};
  simulate(plan, topology, options);
  const nlohmann::json trace = nlohmann::json::parse(test::read_file(options.trace_path));
  std::filesystem::remove(options.trace_path);
  std::set<std::string> names;
  for (const auto& event : trace.at("traceEvents"))
    if (event.at("ph") == "X") names.insert(event.at("name").get<std::string>());
  for (const char* name : {"q_proj fwd", "mlp_down wgrad", "loss", "optimizer", "norm"})
    EXPECT_TRUE(names.count(name)) << name;
  EXPECT_TRUE(
      std::any_of(names.begin(), names.end(), [](const std::string& n) { return n.starts_with("grad_sync "); }));
  EXPECT_TRUE(std::any_of(names.begin(), names.end(), [](const std::string& n) { return n.starts_with("AttnFwd"); }));
}

}  // namespace
}  // namespace wallfacer
