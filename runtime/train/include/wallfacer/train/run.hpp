// A training run on one rank (SPMD: every rank of the plan calls train_run with its backend): the
// steps of the Trainer, per-step figures (tokens/s, MFU, time left), periodic checkpoints that
// every rank writes and rank 0 commits, and resuming from the latest committed checkpoint so that
// the resumed run reproduces the uninterrupted run's losses bit for bit. The driver behind
// `wallfacer train` (docs/training.md) and the trainer's resume tests.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <wallfacer/plan/plan.hpp>
#include <wallfacer/runtime/backend.hpp>
#include <wallfacer/train/checkpoint.hpp>
#include <wallfacer/train/progress.hpp>
#include <wallfacer/train/trainer.hpp>

namespace wallfacer::train {

struct RunSettings {
  int64_t steps = 100;  // total steps of the run (a resumed run continues to the same total)
  bool fp64 = false;
  TrainerOptions trainer;
  std::string checkpoint_dir;    // empty: no checkpoints
  int64_t checkpoint_every = 0;  // steps between checkpoints (0: only after the last step)
  bool resume = false;           // continue from checkpoint_dir's latest checkpoint, when there is one
  // Dense fp32 (fp64 with fp64) FLOP/s one rank can reach, the MFU's denominator; <= 0: measured
  // at start (measure_peak_flops, or measure_kernel_flops when the trainer has its own kernels).
  double peak_flops_per_rank = 0;
  // Extra text kept in each checkpoint's metadata (the data source, the task).
  std::string data_description;
  // The seed the caller's batches use: kept in each checkpoint (its data position) and checked
  // on resume, so that a resumed run cannot silently continue on other data.
  uint64_t data_seed = 1;
  // With `resume`: the states read_resume_state gave, by rank (a process that checked its input
  // before any communication, as `wallfacer train` does, so that a bad checkpoint exits with
  // status 2 on every rank). Null: train_run reads them itself.
  const std::vector<std::optional<CheckpointState>>* resume_states = nullptr;
};

struct RunReport {
  int64_t first_step = 0;          // 0, or the step a resume continued from
  std::vector<double> losses;      // of the steps this run made
  std::vector<double> accuracies;  // of the same steps (share of counted targets predicted)
  double seconds = 0;              // of those steps, slowest rank
  double tokens_per_s = 0;         // mean over the run's steps
  double mfu = 0;                  // mean, fraction of peak
  double peak_flops_per_rank = 0;
  double model_flops_per_step = 0;
  int64_t checkpoints_written = 0;
};

// Rank `rank`'s state in the latest checkpoint of `dir`, checked against the plan, the world
// size and the data seed; nullopt when `dir` has no committed checkpoint. Throws CheckpointError.
std::optional<CheckpointState> read_resume_state(const std::string& dir, const Plan& plan, int rank, int world_size,
                                                 uint64_t data_seed);

// A fingerprint of the plan (its whole YAML): a checkpoint is resumable only with the same plan.
std::string plan_fingerprint(const Plan& plan);

// Dense GEMM FLOP/s of one core in the training precision (a few 256 x 256 x 256 products):
// the peak the MFU is relative to on CPUs.
double measure_peak_flops(bool fp64);
// The same through `factory`'s kernels on `backend`'s memory (n x n GEMMs, timed after the
// backend has finished them): the MFU's denominator when the trainer runs other kernels (a GPU's).
template <typename T>
double measure_kernel_flops(runtime::Backend& backend, const runtime::StepKernelsFactory<T>& factory, int64_t n,
                            int repeats);

// The checkpoint of a trainer after `steps_done` steps, and its restoration (the plan and world
// size are checked by check_resumable before). Throws CheckpointError when a tensor is missing or
// has another size.
template <typename T>
CheckpointState capture_state(Trainer<T>& trainer, int64_t steps_done, int rank, int world_size,
                              const std::string& plan_hash, uint64_t data_seed, const std::string& meta_json);
// Also throws CheckpointError when the checkpoint's data seed is not `data_seed`.
template <typename T>
void restore_state(Trainer<T>& trainer, const CheckpointState& state, const std::string& file, uint64_t data_seed);

// Collective over the plan's ranks. on_step (every rank; print on rank 0) gets each step's record.
// Throws InputError / CheckpointError for unusable input or checkpoints, before the first step.
RunReport train_run(runtime::Backend& backend, const Plan& plan, const Schedule& attention, const BatchSource& batches,
                    const RunSettings& settings, const std::function<void(const StepRecord&)>& on_step);

}  // namespace wallfacer::train
