// The distributed training step. Every rank of a plan runs the same decoder (model.hpp) on the
// tokens its attention program binds (its own tokens: contiguous, zigzag, ... as the strategy's
// Bindings say, for the sequences of its data-parallel replica); every attention layer runs the
// plan's attention program through the executor's rank-local sessions (RankSession), which keep
// O and lse from the forward for the backward. Gradients of the replicated weights are summed
// over the plan's replicas in the fewest collectives: one fused all-reduce over `world`, or for
// LSS one over its sequence group and one over its data group (double gradient averaging);
// ZeRO 1 and 2 reduce-scatter instead, update their shard with AdamW and all-gather the weights.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <wallfacer/plan/plan.hpp>
#include <wallfacer/runtime/backend.hpp>
#include <wallfacer/runtime/executor.hpp>
#include <wallfacer/schedule/schedule.hpp>
#include <wallfacer/train/model.hpp>
#include <wallfacer/train/optimizer.hpp>
#include <wallfacer/train/sample.hpp>

namespace wallfacer::train {

// Sequence `sample` (0 .. batch - 1, global over the replicas) of step `step`. Every rank asks for
// every sample of a step: the loss is normalised by the counted targets of the whole batch.
using BatchSource = std::function<TrainingSample(int64_t step, int sample)>;

struct TrainerOptions {
  Positions positions = Positions::Rotary;
  uint64_t seed = 1;  // parameter initialisation
  OptimizerSettings optimizer;
  int64_t total_steps = 100;  // for the learning-rate schedule
  runtime::ExecutorOptions executor;
};

struct StepResult {
  double loss = 0;       // mean over the batch's counted targets, before the update
  double accuracy = 0;   // share of the counted targets whose most likely token is the target
  double grad_norm = 0;  // global, before clipping
  double lr = 0;
  double seconds = 0;  // slowest rank
  int64_t tokens = 0;  // batch * seq
};

// The tokens one rank holds: its attention program's Q bindings, in binding order.
struct OwnTokens {
  std::vector<int64_t> positions;  // global positions, row order
  std::vector<int32_t> row_of;     // per global position: its row, or -1
  int batch_begin = 0, batch_end = 1;
  int64_t rows() const { return int64_t(positions.size()) * (batch_end - batch_begin); }
  // Row of (global sequence b, global position t) in the rank's [sequence][own token] arrays.
  int64_t row(int b, int64_t t) const {
    return int64_t(b - batch_begin) * int64_t(positions.size()) + row_of[size_t(t)];
  }
};
// Throws ScheduleError when the program's bindings do not all cover the same tokens.
OwnTokens own_tokens(const Schedule& schedule, const RankProgram& program);

// The groups whose sums make a gradient global, in order: world, or LSS's sequence group then
// its data group; empty on one rank. Throws ScheduleError when the plan lacks them.
std::vector<int> gradient_groups(const Plan& plan, int rank);

// Throws InputError for a plan the trainer cannot run: tensor or pipeline parallel, ZeRO 3, more
// than one micro-batch.
void check_trainable(const Plan& plan);

// The attention program of every rank of a plan of either scope: a step-scope plan's attention
// is the same strategy over the same groups, built alone (docs/training.md, "One program").
Schedule attention_schedule(const Plan& plan);

template <typename T>
class Trainer {
 public:
  // `schedule` is the plan's attention schedule (every rank, or at least this one). Collective over
  // the backend's ranks (sets the plan's groups). Throws InputError for a plan the trainer
  // cannot run (tensor or pipeline parallel, a non-causal workload) and ScheduleError for a
  // schedule it cannot bind.
  Trainer(const Plan& plan, const Schedule& schedule, runtime::Backend& backend, const TrainerOptions& options);
  ~Trainer();

  // Forward, backward and gradient synchronisation of step `step`; returns the global mean loss.
  // With ZeRO 0 gradient() is then the full global gradient on every rank, else this rank's
  // reduced shard [shard_begin, shard_end).
  double compute_gradients(int64_t step, const BatchSource& batch);
  // compute_gradients, clipping, the AdamW update of this rank's range and the weights' all-gather.
  StepResult step(int64_t step, const BatchSource& batch);

  const ParameterLayout& layout() const;
  const std::vector<T>& parameters() const;  // every parameter, on every rank
  std::vector<T>& parameters();
  const std::vector<T>& gradient() const;  // see compute_gradients
  int64_t shard_begin() const;
  int64_t shard_end() const;
  AdamState<T>& adam();  // of [shard_begin, shard_end)
  const OwnTokens& tokens() const;
  // Model FLOPs of one step over every rank (docs/step.md convention: 6 * tokens * W plus attention).
  double model_flops_per_step() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace wallfacer::train
