// Training over the NCCL transport's host logic without NCCL: the step's device plan
// (step_device_plan.hpp) passes the independent verifier for every strategy, ZeRO stage and
// checkpointing mode, and the trainer, every post held until the plan releases its call and the
// plan started over at every step (sequenced_backend.hpp), trains bit for bit as on the threads
// backend, every call of every step released. Without the scalar all-reduces written in, the
// trainer's Optimizer op posts a collective the plan does not hold, and that is caught.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <optional>
#include <vector>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/runtime/device_plan.hpp>
#include <wallfacer/runtime/local_backend.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include <wallfacer/train/step_device_plan.hpp>
#include "device_plan/sequenced_backend.hpp"
#include "train/train_fixtures.hpp"

namespace wallfacer::test {
namespace {

using train::StepDevicePlan;
using train::Trainer;

struct Case {
  const char* name;
  StrategyKind kind;
  int sequence_parallel, data_parallel, zero_stage;
  Checkpointing checkpointing;
};

Plan case_plan(const Case& c) {
  Workload w = tiny_decoder(32, 2, true);
  w.zero_stage = c.zero_stage;
  w.checkpointing = c.checkpointing;
  return first_feasible_plan(c.kind, c.sequence_parallel, c.data_parallel, w);
}

// Rank 0's losses and every rank's parameters after `steps` steps; `device` given: every rank
// on a SequencedBackend over its plan, which must have released every call after each step.
struct Outcome {
  std::vector<double> losses;
  std::vector<std::vector<float>> params;
  std::vector<int> programs;  // by rank: programs the sequenced backend saw start
};

Outcome train_steps(const Plan& plan, const runtime::DevicePlan* device, int steps) {
  Outcome out;
  out.params.resize(size_t(plan.num_ranks()));
  out.programs.assign(size_t(plan.num_ranks()), 0);
  runtime::run_local_ranks(plan.num_ranks(), [&](runtime::Backend& inner) {
    const size_t r = size_t(inner.rank());
    std::optional<testing::SequencedBackend> sequenced;
    if (device) sequenced.emplace(inner, device->ranks[r]);
    runtime::Backend& backend = sequenced ? static_cast<runtime::Backend&>(*sequenced) : inner;
    Trainer<float> trainer(plan, backend, {});
    const train::BatchSource batches = pseudo_text_batches(plan.workload.seq);
    for (int s = 0; s < steps; ++s) {
      const double loss = trainer.step(s, batches).loss;
      if (r == 0) out.losses.push_back(loss);
      if (sequenced) {
        EXPECT_TRUE(sequenced->all_released()) << "rank " << r << " step " << s;
      }
    }
    out.params[r] = trainer.parameters_to_host();
    if (sequenced) out.programs[r] = sequenced->programs();
  });
  return out;
}

class StepDevicePlanCases : public ::testing::TestWithParam<Case> {};

TEST_P(StepDevicePlanCases, VerifiesAndTrainsInPlanOrderBitForBit) {
  const Plan plan = case_plan(GetParam());
  const StepDevicePlan step = train::step_device_plan(plan);
  EXPECT_EQ(runtime::verify_device_plan(step.device, step.schedule, plan), std::vector<std::string>{});
  for (int r = 0; r < plan.num_ranks(); ++r) {
    // One scalar all-reduce per gradient group, each a call of its own.
    const std::vector<int> groups = train::gradient_groups(plan, r);
    int scalar_calls = 0;
    for (const runtime::NcclCall& call : step.device.ranks[size_t(r)].calls)
      if (call.kind == runtime::CallKind::Collective &&
          step.schedule.ranks[size_t(r)]
                  .collectives[size_t(step.schedule.ranks[size_t(r)].ops[size_t(call.op)].coll)]
                  .elements == train::kStepScalars)
        ++scalar_calls;
    EXPECT_EQ(scalar_calls, int(groups.size())) << "rank " << r;
  }
  constexpr int kSteps = 3;
  const Outcome threads = train_steps(plan, nullptr, kSteps);
  const Outcome sequenced = train_steps(plan, &step.device, kSteps);
  ASSERT_EQ(threads.losses.size(), size_t(kSteps));
  EXPECT_NE(threads.losses.front(), threads.losses.back());  // the steps changed the weights
  EXPECT_EQ(sequenced.losses, threads.losses);
  EXPECT_EQ(sequenced.params, threads.params);
  for (int programs : sequenced.programs)
    EXPECT_EQ(programs, kSteps);
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, StepDevicePlanCases,
    ::testing::Values(Case{"ring4_zero0", StrategyKind::Ring, 4, 1, 0, Checkpointing::None},
                      Case{"zigzag2x2_zero1_full", StrategyKind::Zigzag, 2, 2, 1, Checkpointing::Full},
                      Case{"ulysses2x2_zero2_selective", StrategyKind::Ulysses, 2, 2, 2, Checkpointing::Selective},
                      Case{"usp4_zero1", StrategyKind::Usp, 4, 1, 1, Checkpointing::None},
                      Case{"wallfacer4_zero0_full", StrategyKind::WallFacer, 4, 1, 0, Checkpointing::Full},
                      Case{"lss2x2_zero2", StrategyKind::Lss, 2, 2, 2, Checkpointing::None},
                      Case{"lss2x2_zero0_selective", StrategyKind::Lss, 2, 2, 0, Checkpointing::Selective}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(StepDevicePlan, ScalarAllReducesSitInFrontOfTheOptimizer) {
  const Plan plan = case_plan({"lss", StrategyKind::Lss, 2, 2, 1, Checkpointing::None});
  const train::RankStep step = train::rank_step_program(plan, 3);
  const std::vector<int> groups = train::gradient_groups(plan, 3);
  ASSERT_EQ(groups.size(), 2u);  // LSS: the sequence group, then the data group
  const RankProgram& before = step.program();
  const RankProgram after = train::with_scalar_all_reduces(before, groups);
  ASSERT_EQ(after.ops.size(), before.ops.size() + 2);
  int32_t optimizer = -1;
  for (size_t i = 0; i < after.ops.size(); ++i)
    if (after.ops[i].label == StepOp::Optimizer) optimizer = int32_t(i);
  ASSERT_GE(optimizer, 2);
  for (int k = 0; k < 2; ++k) {
    const Op& reduce = after.ops[size_t(optimizer - 2 + k)];
    EXPECT_EQ(reduce.kind, OpKind::AllReduce);
    EXPECT_EQ(reduce.stream, Stream::Collective);
    EXPECT_EQ(after.collectives[size_t(reduce.coll)].group, groups[size_t(k)]);
  }
  // The second waits for the first, the optimizer for the second; every other op is unchanged
  // but for its shifted index.
  const Op& second = after.ops[size_t(optimizer - 1)];
  EXPECT_EQ(std::vector<int32_t>(after.deps_begin(second), after.deps_end(second)),
            std::vector<int32_t>{optimizer - 2});
  const Op& opt = after.ops[size_t(optimizer)];
  EXPECT_EQ(*(after.deps_end(opt) - 1), optimizer - 1);
  for (size_t i = 0, j = 0; i < before.ops.size(); ++i, ++j) {
    if (j == size_t(optimizer - 2)) j += 2;
    EXPECT_EQ(after.ops[j].kind, before.ops[i].kind);
    EXPECT_EQ(after.ops[j].label, before.ops[i].label);
    EXPECT_EQ(after.ops[j].peer, before.ops[i].peer);
  }
  RankProgram no_optimizer = before;
  for (Op& op : no_optimizer.ops)
    if (op.label == StepOp::Optimizer) op.label = StepOp::None;
  EXPECT_THROW(train::with_scalar_all_reduces(no_optimizer, groups), ScheduleError);
}

// The plan of the bare step programs lacks the trainer's scalar all-reduces: the first step
// fails on the collective it does not hold, instead of issuing calls out of plan order.
TEST(StepDevicePlan, APlanWithoutTheScalarAllReducesIsCaught) {
  const Plan plan = case_plan({"zigzag", StrategyKind::Zigzag, 2, 1, 0, Checkpointing::None});
  Schedule bare;
  for (int r = 0; r < plan.num_ranks(); ++r)
    bare.ranks.push_back(train::rank_step_program(plan, r).program());
  const runtime::DevicePlan device = runtime::make_device_plan(bare, plan);
  EXPECT_THROW(
      {
        try {
          train_steps(plan, &device, 1);
        } catch (const ScheduleError& e) {
          EXPECT_NE(std::string(e.what()).find("is not in the device plan"), std::string::npos) << e.what();
          throw;
        }
      },
      ScheduleError);
}

}  // namespace
}  // namespace wallfacer::test
