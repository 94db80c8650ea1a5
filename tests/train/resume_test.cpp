// Checkpoints: a run interrupted after a checkpoint and resumed reproduces the uninterrupted
// run's losses bit for bit (fp32 and fp64, with and without ZeRO, on several ranks); an
// interrupted checkpoint write leaves the previous checkpoint intact and resumable; a corrupt or
// truncated checkpoint, or one of another plan, is a clear CheckpointError before any step.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <wallfacer/runtime/local_backend.hpp>
#include <wallfacer/train/run.hpp>
#include "train/train_fixtures.hpp"

namespace wallfacer::test {
namespace {

namespace fs = std::filesystem;
using train::RunSettings;

std::string fresh_dir(const std::string& name) {
  const fs::path dir = fs::path(WALLFACER_BINARY_DIR) / "train_test" / name;
  fs::remove_all(dir);
  return dir.string();
}

std::vector<double> run(const Plan& plan, const RunSettings& settings) {
  const Schedule schedule = train::attention_schedule(plan);
  std::vector<double> losses;
  runtime::run_local_ranks(plan.num_ranks(), [&](runtime::Backend& backend) {
    train::RunReport r =
        train::train_run(backend, plan, schedule, pseudo_text_batches(plan.workload.seq), settings, nullptr);
    if (backend.rank() == 0) losses = r.losses;
  });
  return losses;
}

RunSettings settings_for(int64_t steps, const std::string& dir, bool fp64) {
  RunSettings s;
  s.steps = steps;
  s.fp64 = fp64;
  s.trainer.total_steps = steps;
  s.checkpoint_dir = dir;
  s.checkpoint_every = 3;
  s.peak_flops_per_rank = 1e9;
  return s;
}

struct ResumeCase {
  const char* name;
  StrategyKind kind;
  int sequence_parallel, data_parallel, zero_stage;
  bool fp64;
};

class Resume : public ::testing::TestWithParam<ResumeCase> {};

TEST_P(Resume, ReproducesTheUninterruptedLossesBitForBit) {
  const ResumeCase c = GetParam();
  Workload w = tiny_decoder(32, 2, true);
  w.zero_stage = c.zero_stage;
  StrategyParams p;
  p.sequence_parallel = c.sequence_parallel;
  p.data_parallel = c.data_parallel;
  const Plan plan = tiny_plan(c.kind, p, w);
  const std::vector<double> whole = run(plan, settings_for(10, fresh_dir(std::string(c.name) + "_whole"), c.fp64));
  ASSERT_EQ(whole.size(), 10u);

  const std::string dir = fresh_dir(std::string(c.name) + "_split");
  RunSettings first = settings_for(10, dir, c.fp64);
  first.steps = 6;  // stops after the checkpoint of step 6, as a killed run would have left it
  const std::vector<double> before = run(plan, first);
  RunSettings second = settings_for(10, dir, c.fp64);
  second.resume = true;
  const std::vector<double> after = run(plan, second);
  ASSERT_EQ(before.size(), 6u);
  ASSERT_EQ(after.size(), 4u);
  for (size_t i = 0; i < 10; ++i)
    EXPECT_EQ(i < 6 ? before[i] : after[i - 6], whole[i]) << "step " << i;
}

INSTANTIATE_TEST_SUITE_P(Cases, Resume,
                         ::testing::Values(ResumeCase{"ring1_fp32", StrategyKind::Ring, 1, 1, 0, false},
                                           ResumeCase{"zigzag2x2_zero1", StrategyKind::Zigzag, 2, 2, 1, false},
                                           ResumeCase{"lss2x2_zero2_fp64", StrategyKind::Lss, 2, 2, 2, true}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Checkpoint, InterruptedWriteLeavesThePreviousOneIntact) {
  const Plan plan = tiny_plan(StrategyKind::Ring, {}, tiny_decoder(32, 1, false));
  const std::string dir = fresh_dir("interrupted");
  train::CheckpointFault fault;
  fault.after_bytes = 100;
  fault.mode = train::CheckpointFault::Mode::Throw;
  fault.only_step = 6;
  train::set_checkpoint_fault(fault);
  EXPECT_THROW(run(plan, settings_for(10, dir, false)), std::runtime_error);
  train::clear_checkpoint_fault();
  ASSERT_EQ(train::latest_checkpoint(dir), std::optional<int64_t>(3));
  EXPECT_NO_THROW(train::read_checkpoint(dir, 3, 0, 1));
  // Resuming continues from step 3 and reaches the uninterrupted losses.
  const std::vector<double> whole = run(plan, settings_for(10, fresh_dir("interrupted_whole"), false));
  RunSettings resume = settings_for(10, dir, false);
  resume.resume = true;
  const std::vector<double> after = run(plan, resume);
  ASSERT_EQ(after.size(), 7u);
  for (size_t i = 0; i < after.size(); ++i)
    EXPECT_EQ(after[i], whole[i + 3]);
}

TEST(Checkpoint, CorruptTruncatedOrForeignCheckpointsAreClearErrors) {
  const Plan plan = tiny_plan(StrategyKind::Ring, {}, tiny_decoder(32, 1, false));
  const std::string dir = fresh_dir("corrupt");
  run(plan, settings_for(3, dir, false));
  const std::string file = train::checkpoint_file(dir, 3, 0);
  const auto size = fs::file_size(file);
  RunSettings resume = settings_for(6, dir, false);
  resume.resume = true;
  {  // flip one byte in the middle
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::streamoff(size / 2));
    char c = 0;
    f.read(&c, 1);
    f.seekp(std::streamoff(size / 2));
    c = char(c ^ 0x5a);
    f.write(&c, 1);
  }
  try {
    run(plan, resume);
    ADD_FAILURE() << "a corrupt checkpoint was accepted";
  } catch (const train::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
  }
  fs::resize_file(file, size / 3);
  EXPECT_THROW(run(plan, resume), train::CheckpointError);
  // Another plan (another strategy's checkpoint directory) is refused too.
  const std::string other = fresh_dir("foreign");
  run(plan, settings_for(3, other, false));
  Plan changed = plan;
  changed.workload.checkpointing = Checkpointing::Full;
  RunSettings foreign = settings_for(6, other, false);
  foreign.resume = true;
  const Schedule schedule = train::attention_schedule(changed);
  EXPECT_THROW(runtime::run_local_ranks(1,
                                        [&](runtime::Backend& backend) {
                                          train::train_run(backend, changed, schedule, pseudo_text_batches(32), foreign,
                                                           nullptr);
                                        }),
               train::CheckpointError);
}

}  // namespace
}  // namespace wallfacer::test
