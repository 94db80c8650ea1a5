// Checkpoints: bit-exact round trips (NaN payloads, -0, denormals, empty tensors, binary strings),
// `latest` moving only on commit, a commit refused while a rank's file is missing, and every kind
// of damage detected with its message: bad magic, another version, each truncation length, each
// flipped byte, trailing bytes, another rank, world size, step or plan.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include <wallfacer/train/checkpoint.hpp>

#include "train_io/temp_dir.hpp"

namespace wallfacer::train {
namespace {

using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

float bits_to_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

CheckpointState sample_state(int64_t step, int rank, int world_size, size_t big = 1000) {
  CheckpointState s;
  s.step = step;
  s.rank = rank;
  s.world_size = world_size;
  s.plan_hash = "sha256:0123abcd";
  s.rng_state = {0, 1, 0xffffffffffffffffULL, 0x8000000000000000ULL, static_cast<uint64_t>(step * 31 + rank)};
  s.data_state = std::string("step=") + std::to_string(step) + std::string("\0\x01\xff", 3);
  s.meta_json = R"({"lr": 0.0003, "note": "résumé"})";
  NamedTensor special{"special",
                      {0.0f, -0.0f, 1.0f, -1.5e-42f /* denormal */, std::numeric_limits<float>::infinity(),
                       -std::numeric_limits<float>::infinity(), bits_to_float(0x7fc00001) /* NaN payload */,
                       bits_to_float(0xffbfffff) /* signalling-looking NaN */, 3.4028235e38f}};
  NamedTensor weights{"layers.0.attention.wq", std::vector<float>(big)};
  for (size_t i = 0; i < big; ++i)
    weights.values[i] = std::sin(0.001f * i + rank) * (1 + step);
  s.tensors = {special, weights, NamedTensor{"empty", {}}, NamedTensor{"adam.m.layers.0.attention.wq", weights.values}};
  return s;
}

void expect_bit_equal(const CheckpointState& a, const CheckpointState& b) {
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.rank, b.rank);
  EXPECT_EQ(a.world_size, b.world_size);
  EXPECT_EQ(a.plan_hash, b.plan_hash);
  EXPECT_EQ(a.rng_state, b.rng_state);
  EXPECT_EQ(a.data_state, b.data_state);
  EXPECT_EQ(a.meta_json, b.meta_json);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    EXPECT_EQ(a.tensors[i].name, b.tensors[i].name);
    ASSERT_EQ(a.tensors[i].values.size(), b.tensors[i].values.size()) << a.tensors[i].name;
    if (a.tensors[i].values.empty()) continue;
    EXPECT_EQ(0, std::memcmp(a.tensors[i].values.data(), b.tensors[i].values.data(), 4 * a.tensors[i].values.size()))
        << a.tensors[i].name << " differs in its bits";
  }
}

TEST(Checkpoint, RoundTripIsBitExact) {
  TempDir dir;
  for (int rank = 0; rank < 3; ++rank)
    write_checkpoint(dir.str(), sample_state(40, rank, 3, 1 << 18));
  for (int rank = 0; rank < 3; ++rank) {
    expect_bit_equal(read_checkpoint(dir.str(), 40, rank), sample_state(40, rank, 3, 1 << 18));
    expect_bit_equal(read_checkpoint(dir.str(), 40, rank, 3), sample_state(40, rank, 3, 1 << 18));
  }
  EXPECT_TRUE(std::filesystem::exists(dir.file("step-40/rank-2.ckpt")));
  CheckpointState bare;  // defaults: no tensors, empty strings
  write_checkpoint(dir.str(), bare);
  expect_bit_equal(read_checkpoint(dir.str(), 0, 0), bare);
}

TEST(Checkpoint, LatestMovesOnlyOnCommit) {
  TempDir dir;
  EXPECT_EQ(latest_checkpoint(dir.str()), std::nullopt);
  EXPECT_EQ(latest_checkpoint(dir.file("not-there")), std::nullopt);
  for (int rank = 0; rank < 2; ++rank)
    write_checkpoint(dir.str(), sample_state(10, rank, 2));
  EXPECT_EQ(latest_checkpoint(dir.str()), std::nullopt);
  commit_checkpoint(dir.str(), 10, 2);
  EXPECT_EQ(latest_checkpoint(dir.str()), 10);
  EXPECT_EQ(read_bytes(dir.file("latest")), "10\n");

  write_checkpoint(dir.str(), sample_state(20, 0, 2));  // rank 1 has not written step 20
  try {
    commit_checkpoint(dir.str(), 20, 2);
    FAIL() << "committed a step whose rank 1 file is missing";
  } catch (const CheckpointError& e) {
    EXPECT_EQ(e.problem(), CheckpointProblem::Missing);
    EXPECT_EQ(e.file(), checkpoint_file(dir.str(), 20, 1));
  }
  EXPECT_EQ(latest_checkpoint(dir.str()), 10);
  write_checkpoint(dir.str(), sample_state(20, 1, 2));
  commit_checkpoint(dir.str(), 20, 2);
  EXPECT_EQ(latest_checkpoint(dir.str()), 20);
  EXPECT_EQ(checkpoint_steps(dir.str()), (std::vector<int64_t>{10, 20}));
  EXPECT_THROW(remove_checkpoint_step(dir.str(), 20), std::invalid_argument);  // the latest stays
  remove_checkpoint_step(dir.str(), 10);
  EXPECT_EQ(checkpoint_steps(dir.str()), (std::vector<int64_t>{20}));
  expect_bit_equal(read_checkpoint(dir.str(), 20, 1, 2), sample_state(20, 1, 2));
}

TEST(Checkpoint, WriterRefusesInconsistentStates) {
  TempDir dir;
  CheckpointState twice = sample_state(1, 0, 1);
  twice.tensors.push_back(twice.tensors[0]);
  EXPECT_THROW(write_checkpoint(dir.str(), twice), std::invalid_argument);
  EXPECT_THROW(write_checkpoint(dir.str(), sample_state(1, 2, 2)), std::invalid_argument);
  EXPECT_THROW(write_checkpoint(dir.str(), sample_state(-1, 0, 1)), std::invalid_argument);
}

// Reads a damaged file and checks the problem and a piece of the message; the file is named.
void expect_problem(const std::string& dir, int64_t step, int rank, int world, CheckpointProblem problem,
                    const std::string& text) {
  try {
    read_checkpoint(dir, step, rank, world);
    ADD_FAILURE() << "read a damaged checkpoint; expected '" << text << "'";
  } catch (const CheckpointError& e) {
    EXPECT_EQ(e.problem(), problem) << e.what();
    EXPECT_EQ(e.file(), checkpoint_file(dir, step, rank));
    EXPECT_NE(std::string(e.what()).find(": error: checkpoint: "), std::string::npos) << e.what();
    EXPECT_NE(e.message().find(text), std::string::npos) << e.what();
  }
}

class DamagedCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    write_checkpoint(dir.str(), sample_state(7, 0, 2, 40));
    write_checkpoint(dir.str(), sample_state(7, 1, 2, 40));
    path = checkpoint_file(dir.str(), 7, 0);
    good = read_bytes(path);
  }
  void damage(const std::string& bytes) { write_bytes(path, bytes); }
  void expect(CheckpointProblem problem, const std::string& text) { expect_problem(dir.str(), 7, 0, 2, problem, text); }

  TempDir dir;
  std::string path, good;
};

TEST_F(DamagedCheckpoint, BadMagicVersionAndHeaderChecksum) {
  std::string bytes = good;
  bytes[0] = 'X';
  damage(bytes);
  expect(CheckpointProblem::BadMagic, "bad magic");
  damage("hello world, not a checkpoint at all, but long enough to have a header");
  expect(CheckpointProblem::BadMagic, "not a wallfacer checkpoint");

  bytes = good;
  bytes[8] = 2;  // version 2
  damage(bytes);
  expect(CheckpointProblem::Version, "format version 2 is not supported");

  bytes = good;
  bytes[16] ^= 1;  // the step, under the header's CRC
  damage(bytes);
  expect(CheckpointProblem::Checksum, "checksum mismatch in the file header");
}

TEST_F(DamagedCheckpoint, EveryTruncationIsDetected) {
  for (size_t length = 0; length < good.size(); ++length) {
    SCOPED_TRACE(length);
    damage(good.substr(0, length));
    try {
      read_checkpoint(dir.str(), 7, 0, 2);
      ADD_FAILURE() << "read a checkpoint cut to " << length << " of " << good.size() << " bytes";
    } catch (const CheckpointError& e) {
      if (length < 8) {
        EXPECT_EQ(e.problem(), CheckpointProblem::BadMagic) << e.what();
      } else {
        EXPECT_EQ(e.problem(), CheckpointProblem::Truncated) << e.what();
        EXPECT_NE(e.message().find("truncated"), std::string::npos) << e.what();
      }
    }
  }
  damage(good.substr(0, good.size() - 5));
  expect(CheckpointProblem::Truncated, "section 8 of 8 (TNSR at byte");
}

TEST_F(DamagedCheckpoint, EveryFlippedByteIsDetected) {
  for (size_t at = 0; at < good.size(); ++at) {
    std::string bytes = good;
    bytes[at] ^= 0x10;
    damage(bytes);
    try {
      read_checkpoint(dir.str(), 7, 0, 2);
      ADD_FAILURE() << "read a checkpoint with byte " << at << " of " << good.size() << " flipped";
    } catch (const CheckpointError& e) {
      // Header bytes give magic, version or header-checksum errors; all later bytes (section
      // headers, payloads) checksum errors, or a truncation when a section's length grew.
      if (at >= 48) {
        EXPECT_TRUE(e.problem() == CheckpointProblem::Checksum || e.problem() == CheckpointProblem::Truncated)
            << at << ": " << e.what();
      }
    }
  }
  std::string bytes = good;
  bytes[bytes.size() - 3] ^= 0x01;  // inside the last tensor's values
  damage(bytes);
  expect(CheckpointProblem::Checksum, "checksum mismatch in section 8 of 8 (TNSR at byte");
}

TEST_F(DamagedCheckpoint, TrailingBytesAreRefused) {
  damage(good + "x");
  expect(CheckpointProblem::Malformed, "1 byte follows the last of its 8 sections");
}

TEST_F(DamagedCheckpoint, AnotherRankStepWorldOrPlanIsRefused) {
  write_bytes(path, read_bytes(checkpoint_file(dir.str(), 7, 1)));
  expect(CheckpointProblem::RankMismatch, "holds rank 1, expected rank 0");

  write_bytes(path, good);
  expect_problem(dir.str(), 7, 0, 4, CheckpointProblem::WorldMismatch, "written by a run of 2 ranks, this run has 4");

  std::filesystem::create_directories(checkpoint_step_dir(dir.str(), 8));
  write_bytes(checkpoint_file(dir.str(), 8, 0), good);
  expect_problem(dir.str(), 8, 0, 2, CheckpointProblem::Malformed, "holds step 7, expected step 8");

  const CheckpointState state = read_checkpoint(dir.str(), 7, 0, 2);
  EXPECT_NO_THROW(check_resumable(state, path, "sha256:0123abcd", 2));
  try {
    check_resumable(state, path, "sha256:ffff", 2);
    FAIL() << "resumed with another plan";
  } catch (const CheckpointError& e) {
    EXPECT_EQ(e.problem(), CheckpointProblem::PlanMismatch);
    EXPECT_NE(e.message().find("written for plan sha256:0123abcd, this run's plan is sha256:ffff"), std::string::npos)
        << e.what();
  }
  try {
    check_resumable(state, path, "sha256:0123abcd", 8);
    FAIL() << "resumed with another world size";
  } catch (const CheckpointError& e) {
    EXPECT_EQ(e.problem(), CheckpointProblem::WorldMismatch);
  }
}

TEST(Checkpoint, MissingFilesAndMalformedLatestAreClear) {
  TempDir dir;
  expect_problem(dir.str(), 3, 0, 1, CheckpointProblem::Missing, "No such file");
  write_bytes(dir.file("latest"), "step five\n");
  try {
    latest_checkpoint(dir.str());
    FAIL() << "read a malformed 'latest'";
  } catch (const CheckpointError& e) {
    EXPECT_EQ(e.problem(), CheckpointProblem::Malformed);
    EXPECT_EQ(e.file(), dir.file("latest"));
    EXPECT_NE(e.message().find("found 'step five"), std::string::npos) << e.what();
  }
  write_bytes(dir.file("latest"), "");
  EXPECT_THROW(latest_checkpoint(dir.str()), CheckpointError);
}

}  // namespace
}  // namespace wallfacer::train
