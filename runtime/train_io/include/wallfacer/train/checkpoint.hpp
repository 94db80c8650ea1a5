// Training checkpoints: every rank writes its own file dir/step-<N>/rank-<r>.ckpt (model
// parameters, optimizer moments, random and data state), rank 0 then points dir/latest at the step
// once all ranks wrote. Each file goes to a temporary name, is fsynced and renamed; `latest` moves
// the same way, so a run killed at any moment leaves the previous checkpoint intact and `latest`
// naming it. Files carry a versioned header and a CRC-32 per section; every way a file can be
// wrong (not a checkpoint, another version, truncated, corrupt, another rank or world size, another
// plan) is a CheckpointError naming the file and the problem. Layout: docs/training-data.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <wallfacer/core/errors.hpp>

namespace wallfacer::train {

inline constexpr uint32_t kCheckpointVersion = 1;

enum class CheckpointProblem {
  Missing,        // the file, the directory or `latest` is not there
  BadMagic,       // not a wallfacer checkpoint
  Version,        // written by another format version
  Truncated,      // ends inside a header or a section
  Checksum,       // a header or a section does not match its CRC-32
  Malformed,      // checksums match but the content breaks the format (duplicate or unknown section)
  RankMismatch,   // the file holds another rank than the one asked for
  WorldMismatch,  // written by a run with another number of ranks
  PlanMismatch,   // written for another plan
};

// Bad or unusable checkpoint: what() reads "FILE: error: checkpoint: ...".
class CheckpointError : public InputError {
 public:
  CheckpointError(const std::string& file, CheckpointProblem problem, const std::string& message);
  CheckpointProblem problem() const { return problem_; }

 private:
  CheckpointProblem problem_;
};

struct NamedTensor {
  std::string name;
  std::vector<float> values;
};

struct CheckpointState {
  int64_t step = 0;  // steps completed: a resumed run continues with step `step`
  int rank = 0;
  int world_size = 1;
  std::string plan_hash;             // refuse resuming with another plan
  std::vector<NamedTensor> tensors;  // parameters, optimizer moments, ... (names unique)
  std::vector<uint64_t> rng_state;   // opaque
  std::string data_state;            // opaque (e.g. "step=..")
  std::string meta_json;             // free-form
};

// dir/step-<N>/rank-<r>.ckpt (directories created as needed), through a temporary file, fsync and
// rename. Does not touch `latest`: rank 0 calls commit_checkpoint once every rank has written.
// InputError when the file cannot be written; std::invalid_argument for duplicate tensor names or
// a rank outside [0, world_size).
void write_checkpoint(const std::string& dir, const CheckpointState& state);
// Rank 0, after all ranks wrote (the caller barriers): checks that every rank's file exists and has
// a valid header for this step and world size, removes temporary files that killed writers left in
// the step directory, fsyncs it, then replaces dir/latest.
// CheckpointError when a rank's file is missing or wrong.
void commit_checkpoint(const std::string& dir, int64_t step, int world_size);
// The step dir/latest names; nullopt when dir or dir/latest does not exist. CheckpointError when
// `latest` is unreadable or malformed.
std::optional<int64_t> latest_checkpoint(const std::string& dir);
// Reads and verifies dir/step-<N>/rank-<r>.ckpt. CheckpointError naming the file and what is wrong.
CheckpointState read_checkpoint(const std::string& dir, int64_t step, int rank);
// The same, also refusing a file written by a run of another world size.
CheckpointState read_checkpoint(const std::string& dir, int64_t step, int rank, int world_size);
// CheckpointError (PlanMismatch / WorldMismatch) unless `state` was written for this plan and world size.
void check_resumable(const CheckpointState& state, const std::string& checkpoint_file, const std::string& plan_hash,
                     int world_size);

std::string checkpoint_step_dir(const std::string& dir, int64_t step);
std::string checkpoint_file(const std::string& dir, int64_t step, int rank);

// Steps that have a directory (step-<N>), committed or not, ascending. remove_checkpoint_step
// deletes one (never the step `latest` names: std::invalid_argument); only rank 0 should, after a
// later step was committed.
std::vector<int64_t> checkpoint_steps(const std::string& dir);
void remove_checkpoint_step(const std::string& dir, int64_t step);

// Fault injection for tests of interrupted writes. When armed, write_checkpoint stops after writing
// `after_bytes` bytes of a rank's file (before the fsync and the rename): with Kill it sends itself
// SIGKILL (a crash), with Throw it throws std::runtime_error (the temporary file is then removed).
// The environment variable WALLFACER_CHECKPOINT_FAULT="after-bytes=N[,mode=kill|throw][,step=S][,rank=R]"
// arms it too (for tests that run the executable); step and rank restrict it to one file.
struct CheckpointFault {
  enum class Mode { Kill, Throw };
  int64_t after_bytes = -1;  // < 0: disarmed
  Mode mode = Mode::Kill;
  int64_t only_step = -1;  // < 0: any
  int only_rank = -1;      // < 0: any
};
void set_checkpoint_fault(const CheckpointFault& fault);
void clear_checkpoint_fault();

}  // namespace wallfacer::train
