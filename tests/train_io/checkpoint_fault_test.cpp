// Interrupted checkpoint writes leave the previous checkpoint intact and `latest` naming it:
// a write stopped by an exception at many byte counts, and a child process killed (SIGKILL) in
// the middle of writing its file, which leaves a stray temporary file behind that nothing reads.
// The WALLFACER_CHECKPOINT_FAULT variable arms the same fault for runs of the executable.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/train/checkpoint.hpp>

#include "train_io/temp_dir.hpp"

namespace wallfacer::train {
namespace {

using testing::read_bytes;
using testing::TempDir;

CheckpointState state_of(int64_t step, int rank, int world_size) {
  CheckpointState s;
  s.step = step;
  s.rank = rank;
  s.world_size = world_size;
  s.plan_hash = "plan-a";
  s.rng_state = {static_cast<uint64_t>(step), 99};
  s.data_state = "step=" + std::to_string(step);
  s.tensors = {{"w", std::vector<float>(5000, 0.25f * static_cast<float>(step))}, {"b", {1, 2, 3}}};
  return s;
}

// Step 10 written and committed by two ranks.
void write_committed_step_10(const std::string& dir) {
  for (int rank = 0; rank < 2; ++rank)
    write_checkpoint(dir, state_of(10, rank, 2));
  commit_checkpoint(dir, 10, 2);
}

void expect_step_10_intact(const std::string& dir) {
  EXPECT_EQ(latest_checkpoint(dir), 10);
  for (int rank = 0; rank < 2; ++rank) {
    const CheckpointState s = read_checkpoint(dir, 10, rank, 2);
    EXPECT_EQ(s.data_state, "step=10");
    ASSERT_EQ(s.tensors.size(), 2u);
    EXPECT_EQ(s.tensors[0].values, std::vector<float>(5000, 2.5f));
  }
}

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> names;
  if (!std::filesystem::exists(dir)) return names;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    names.push_back(e.path().filename().string());
  return names;
}

class CheckpointFaults : public ::testing::Test {
 protected:
  void TearDown() override {
    clear_checkpoint_fault();
    ::unsetenv("WALLFACER_CHECKPOINT_FAULT");
  }
};

TEST_F(CheckpointFaults, AnExceptionMidWriteLeavesThePreviousCheckpoint) {
  TempDir dir;
  write_committed_step_10(dir.str());
  const auto file_size = static_cast<int64_t>(read_bytes(checkpoint_file(dir.str(), 10, 0)).size());
  for (const int64_t after :
       {int64_t{0}, int64_t{1}, int64_t{47}, int64_t{48}, int64_t{100}, file_size / 2, file_size - 1}) {
    SCOPED_TRACE(after);
    set_checkpoint_fault({.after_bytes = after, .mode = CheckpointFault::Mode::Throw});
    EXPECT_THROW(write_checkpoint(dir.str(), state_of(20, 0, 2)), std::runtime_error);
    clear_checkpoint_fault();
    expect_step_10_intact(dir.str());
    EXPECT_FALSE(std::filesystem::exists(checkpoint_file(dir.str(), 20, 0)));
    EXPECT_TRUE(files_in(checkpoint_step_dir(dir.str(), 20)).empty()) << "the temporary file was left behind";
  }
  // The fault restricted to step 30 does not touch step 20.
  set_checkpoint_fault({.after_bytes = 0, .mode = CheckpointFault::Mode::Throw, .only_step = 30});
  for (int rank = 0; rank < 2; ++rank)
    write_checkpoint(dir.str(), state_of(20, rank, 2));
  commit_checkpoint(dir.str(), 20, 2);
  EXPECT_EQ(latest_checkpoint(dir.str()), 20);
}

// The child writes step 20 and is killed after `after` bytes; the parent then finds step 10 as it was.
void kill_mid_write(const std::string& dir, int64_t after) {
  EXPECT_EXIT(
      {
        set_checkpoint_fault({.after_bytes = after, .mode = CheckpointFault::Mode::Kill, .only_rank = 1});
        write_checkpoint(dir, state_of(20, 0, 2));  // rank 0 completes
        write_checkpoint(dir, state_of(20, 1, 2));  // rank 1 dies midway
        commit_checkpoint(dir, 20, 2);
        std::exit(0);
      },
      ::testing::KilledBySignal(SIGKILL), "");
}

TEST_F(CheckpointFaults, AKillMidWriteLeavesThePreviousCheckpoint) {
  // "fast": the child is a fork of this process, so it writes into this test's directory.
  GTEST_FLAG_SET(death_test_style, "fast");
  TempDir dir;
  write_committed_step_10(dir.str());
  kill_mid_write(dir.str(), 3000);
  expect_step_10_intact(dir.str());
  // Rank 0's file is complete, rank 1's exists only as a partial temporary file.
  const std::vector<std::string> left = files_in(checkpoint_step_dir(dir.str(), 20));
  ASSERT_EQ(left.size(), 2u);
  EXPECT_TRUE(std::filesystem::exists(checkpoint_file(dir.str(), 20, 0)));
  EXPECT_FALSE(std::filesystem::exists(checkpoint_file(dir.str(), 20, 1)));
  EXPECT_THROW(commit_checkpoint(dir.str(), 20, 2), CheckpointError);
  EXPECT_EQ(latest_checkpoint(dir.str()), 10);
  // A resumed run writes step 20 again over the debris and commits it; the commit clears the debris.
  write_checkpoint(dir.str(), state_of(20, 1, 2));
  EXPECT_EQ(files_in(checkpoint_step_dir(dir.str(), 20)).size(), 3u);
  commit_checkpoint(dir.str(), 20, 2);
  EXPECT_EQ(latest_checkpoint(dir.str()), 20);
  std::vector<std::string> committed = files_in(checkpoint_step_dir(dir.str(), 20));
  std::sort(committed.begin(), committed.end());
  EXPECT_EQ(committed, (std::vector<std::string>{"rank-0.ckpt", "rank-1.ckpt"}));
  EXPECT_EQ(read_checkpoint(dir.str(), 20, 1, 2).data_state, "step=20");
}

TEST_F(CheckpointFaults, TheEnvironmentVariableArmsTheFault) {
  TempDir dir;
  ::setenv("WALLFACER_CHECKPOINT_FAULT", "after-bytes=60,mode=throw,step=20,rank=1", 1);
  write_checkpoint(dir.str(), state_of(10, 1, 2));  // another step
  write_checkpoint(dir.str(), state_of(20, 0, 2));  // another rank
  EXPECT_THROW(write_checkpoint(dir.str(), state_of(20, 1, 2)), std::runtime_error);
  EXPECT_FALSE(std::filesystem::exists(checkpoint_file(dir.str(), 20, 1)));
  for (const char* bad : {"after-bytes=x", "mode=throw", "after-bytes=5,colour=red", "after-bytes=5,mode=maybe"}) {
    ::setenv("WALLFACER_CHECKPOINT_FAULT", bad, 1);
    try {
      write_checkpoint(dir.str(), state_of(30, 0, 1));
      ADD_FAILURE() << "accepted WALLFACER_CHECKPOINT_FAULT=" << bad;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("WALLFACER_CHECKPOINT_FAULT"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace wallfacer::train
