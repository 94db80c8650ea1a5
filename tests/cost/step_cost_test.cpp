// The whole-step cost: evaluate_step times the fully unrolled step of its timed ranks, for every
// strategy; throughput and MFU follow their definitions; depth adds time.
#include <gtest/gtest.h>

#include <wallfacer/cost/compute_time.hpp>
#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/schedule/step.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include "cost_test_util.hpp"

namespace wallfacer {
namespace {

Workload step_workload(int layers) {
  Workload w = testing::mha_workload(2048, 8, 64, /*causal=*/true);
  w.layers = layers;
  w.kv_heads = 4;
  w.ffn = 1536;
  w.vocab = 4096;
  w.batch = 2;
  return w;
}

TEST(StepCost, EqualsTheFullUnrollForEveryStrategy) {
  const Topology topology = testing::switch_nodes(2, 4);
  const Workload w = step_workload(7);
  const CostModel model(topology, Calibration::defaults());
  int checked = 0;
  for (StrategyKind kind : all_strategies()) {
    for (const StrategyParams& params : enumerate_params(kind, w, 8)) {
      if (!check_feasible(kind, params, w, 8).ok) continue;
      Plan plan = make_plan(kind, params, w, topology, 8);
      plan.scope = Scope::Step;
      const CostBreakdown step = model.evaluate_step(plan);
      // Every rank, every layer.
      const Schedule full = StepBuilder(plan).build();
      const CostBreakdown times = model.evaluate_times(plan, full);
      SCOPED_TRACE(std::string(to_string(kind)) + " " + plan.groups.front().name);
      EXPECT_EQ(step.layers_timed, w.layers);
      EXPECT_NEAR(step.step_ms, times.step_ms, 1e-6 * times.step_ms);
      EXPECT_NEAR(step.forward_ms, times.forward_ms, 1e-6 * times.step_ms);
      const CommVolume v = comm_volume(full);
      EXPECT_EQ(step.volume.p2p_backward, v.p2p_backward);
      EXPECT_EQ(step.volume.collective_backward, v.collective_backward);
      EXPECT_NEAR(step.tokens_per_s, double(w.seq) * w.batch / (step.step_ms * 1e-3), 1e-9 * step.tokens_per_s);
      const double peak = kernel_peak_tflops(topology.gpu(), w.dtype) * 1e12;
      EXPECT_NEAR(step.mfu, step_model_flops(w) / (step.step_ms * 1e-3 * 8 * peak), 1e-12);
      EXPECT_GT(step.step_ms, step.attention_ms);  // the rest of the layer costs something
      ++checked;
    }
  }
  EXPECT_GT(checked, 8);
}

// Deeper models take longer.
TEST(StepCost, StepGrowsWithLayers) {
  const Topology topology = testing::switch_nodes(1, 8);
  const CostModel model(topology, Calibration::defaults());
  std::vector<double> steps;
  for (int layers : {8, 9, 10}) {
    Workload w = step_workload(layers);
    Plan plan = make_plan(StrategyKind::Ulysses, {.sequence_parallel = 8, .data_parallel = 1}, w, topology, 8);
    plan.scope = Scope::Step;
    steps.push_back(model.evaluate_step(plan).step_ms);
  }
  EXPECT_GT(steps[1], steps[0]);
  EXPECT_GT(steps[2], steps[1]);
}

}  // namespace
}  // namespace wallfacer

namespace wallfacer {
namespace {

// A GEMM lasts its FLOPs over the calibrated share of the peak, in bf16 and in fp8; the LM head
// stays in the dtype.
TEST(ComputeTimerGemm, TimeIsFlopsOverTheCalibratedThroughput) {
  const Topology topology = Topology::load("dgx-h100", 1);
  const Calibration calibration = Calibration::defaults();
  Workload w = step_workload(2);
  Op gemm;
  gemm.kind = OpKind::Gemm;
  gemm.label = StepOp::MlpUp;
  gemm.gemm[0] = 8192, gemm.gemm[1] = 14336, gemm.gemm[2] = 4096;
  gemm.flops = 2.0 * 8192 * 14336 * 4096;
  TokenSetPool pool;
  const double bf16 = ComputeTimer(topology.gpu(), calibration, w).seconds(gemm, pool);
  const double efficiency = calibration.gemm_efficiency("H100-SXM5-80GB", 8192, 14336, 4096);
  EXPECT_NEAR(efficiency, 0.80, 1e-12);  // large and aligned: the ceiling
  EXPECT_NEAR(bf16, gemm.flops / (0.80 * 989.4e12), 1e-15);
  w.fp8_linear = true;
  ComputeTimer fp8(topology.gpu(), calibration, w);
  EXPECT_NEAR(fp8.seconds(gemm, pool), gemm.flops / (0.71 * 1979e12), 1e-15);
  gemm.label = StepOp::LmHead;
  EXPECT_NEAR(fp8.seconds(gemm, pool), bf16, 1e-15);
  // Small products run below the ceiling, misaligned ones lower still.
  EXPECT_LT(calibration.gemm_efficiency("H100", 1024, 1024, 1024), 0.2);
  EXPECT_NEAR(calibration.gemm_efficiency("H100", 8192, 10922, 4096) / efficiency, 272.7 / 398.4, 1e-12);
}

}  // namespace
}  // namespace wallfacer
