// Tensor parallelism around every strategy: the checker proves the lifted attention schedule and
// the whole step (each tensor slice computes its own heads, every pair once per head), and the
// step's products still add up to 6 x tokens x weights with every matrix split T ways.
#include <gtest/gtest.h>

#include <wallfacer/check/checker.hpp>
#include <wallfacer/schedule/step.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include "schedule/test_plans.hpp"
#include "step_workloads.hpp"
#include "tensor_parallel.hpp"

namespace wallfacer {
namespace {

Workload tp_workload() {
  return testing::small_step_workload();
}

TEST(TensorParallel, EveryStrategyIsProvenAndCountsItsWork) {
  const Workload w = tp_workload();
  const int T = 2, ranks = 8;
  int tried = 0;
  for (StrategyKind kind : all_strategies()) {
    for (StrategyParams params : enumerate_params(kind, detail::slice_workload(w, T), ranks / T)) {
      params.tensor_parallel = T;
      if (!check_feasible(kind, params, w, ranks).ok) continue;
      ++tried;
      const Plan plan = testing::hand_plan(kind, params, w);
      SCOPED_TRACE(std::string(to_string(kind)) + " " + plan.groups.front().name);
      const CheckReport attention = check_schedule(plan, build_schedule(plan));
      EXPECT_TRUE(attention.ok) << (attention.errors.empty() ? "" : attention.errors.front());
      const Schedule step = StepBuilder(plan).build();
      const CheckReport whole = check_schedule(plan, step);
      EXPECT_TRUE(whole.ok) << (whole.errors.empty() ? "" : whole.errors.front());
      double gemm = 0;
      int tensor_collectives = 0;
      for (const RankProgram& p : step.ranks)
        for (const Op& op : p.ops) {
          if (op.kind == OpKind::Gemm) gemm += op.flops;
          if (op.label == StepOp::TensorGather || op.label == StepOp::TensorScatter) ++tensor_collectives;
        }
      const double tokens = double(w.seq) * w.batch;
      const double weights =
          w.layers * (double(w.attention_parameters_per_layer()) + 3.0 * w.hidden * w.ffn) + double(w.vocab) * w.hidden;
      EXPECT_NEAR(gemm, 6.0 * tokens * weights, 1e-9 * gemm);
      // Per rank: 4 per layer forward, 4 per layer backward (selective), 2 at the head.
      EXPECT_EQ(tensor_collectives, ranks * (8 * w.layers + 2));
    }
  }
  EXPECT_GE(tried, 8);
}

TEST(TensorParallel, InfeasibleDegreesSayWhy) {
  Workload w = tp_workload();
  StrategyParams params{.sequence_parallel = 2, .data_parallel = 1, .knobs = NoKnobs{}, .tensor_parallel = 3};
  const Feasibility f = check_feasible(StrategyKind::Ring, params, w, 6);
  EXPECT_FALSE(f.ok);
  EXPECT_NE(f.reason.find("heads (8) not divisible by tensor parallel degree 3"), std::string::npos) << f.reason;
}

}  // namespace
}  // namespace wallfacer
