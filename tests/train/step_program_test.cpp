// The trainer's matrix products are the step program's: one training step on one rank runs
// exactly the {m, n, k} of every Gemm op of the plan's whole-step program (forward, data and
// weight gradients of every layer and the LM head), for the GELU and SwiGLU MLPs, with no
// recomputation and with selective recomputation (which repeats no product).
#include <gtest/gtest.h>

#include <algorithm>

#include <wallfacer/schedule/step.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include <wallfacer/train/layers.hpp>
#include "train/train_fixtures.hpp"

namespace wallfacer::test {
namespace {

using Shape = std::array<int64_t, 3>;

std::vector<Shape> program_gemms(const Plan& attention_plan) {
  Plan plan = attention_plan;
  plan.scope = Scope::Step;
  const Schedule step = StepBuilder(plan).build({0});
  std::vector<Shape> shapes;
  for (const Op& op : step.ranks.at(0).ops)
    if (op.kind == OpKind::Gemm) shapes.push_back({op.gemm[0], op.gemm[1], op.gemm[2]});
  return shapes;
}

std::vector<Shape> trainer_gemms(const Plan& plan) {
  std::vector<Shape> shapes;
  on_every_rank<float>(plan, {}, [&](train::Trainer<float>& trainer, runtime::Backend&) {
    train::GemmTrace trace;
    trainer.compute_gradients(0, pseudo_text_batches(plan.workload.seq));
    shapes = trace.calls();
  });
  return shapes;
}

TEST(StepProgram, TheTrainerRunsTheProgramsMatrixProducts) {
  for (bool gated : {false, true})
    for (Checkpointing mode : {Checkpointing::None, Checkpointing::Selective}) {
      SCOPED_TRACE(std::string(gated ? "swiglu " : "gelu ") + to_string(mode));
      Workload w = tiny_decoder(32, 2, gated);
      w.checkpointing = mode;
      const Plan plan = tiny_plan(StrategyKind::Ring, {}, w);
      std::vector<Shape> want = program_gemms(plan), got = trainer_gemms(plan);
      ASSERT_FALSE(want.empty());
      std::sort(want.begin(), want.end());
      std::sort(got.begin(), got.end());
      EXPECT_EQ(got, want);
    }
}

}  // namespace
}  // namespace wallfacer::test
