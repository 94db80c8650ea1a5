// The distributed training step. Every rank of a plan executes its whole-step program (the
// plan's `--scope step` schedule, docs/step.md: the program the cost model prices and the
// simulator replays) op for op through a StepSession of the executor: the strategy's attention
// ops, sends, receives and collectives run as in `wallfacer run`; every Gemm and Pointwise op
// runs a StepKernels kernel (wallfacer/runtime/step_kernels.hpp) on the named weights and
// activations it stands for, on the tokens the rank's attention bindings give it (contiguous,
// zigzag, ... for the sequences of its data-parallel replica); recomputation runs where the program puts it; the
// gradient buckets' all-reduces (ZeRO 0) or reduce-scatters (ZeRO 1 and 2) carry the real
// gradients over the plan's groups (world, or LSS's sequence group then its data group: double
// gradient averaging) while the backward goes on; the Optimizer op clips and applies AdamW, and
// under ZeRO 1 and 2 the parameter gathers that follow it bring the updated weights back.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <wallfacer/plan/plan.hpp>
#include <wallfacer/runtime/backend.hpp>
#include <wallfacer/runtime/executor.hpp>
#include <wallfacer/runtime/step_kernels.hpp>
#include <wallfacer/schedule/schedule.hpp>
#include <wallfacer/schedule/step.hpp>
#include <wallfacer/train/model.hpp>
#include <wallfacer/train/optimizer.hpp>
#include <wallfacer/train/sample.hpp>

namespace wallfacer::train {

// Sequence `sample` (0 .. batch - 1, global over the replicas) of step `step`. Every rank asks for
// every sample of a step: the loss is normalised by the counted targets of the whole batch.
using BatchSource = std::function<TrainingSample(int64_t step, int sample)>;

struct TrainerOptions {
  Positions positions = Positions::Rotary;
  double rotary_base = kDefaultRotaryBase;  // ModelShape::rotary_base
  uint64_t seed = 1;                        // parameter initialisation
  OptimizerSettings optimizer;
  int64_t total_steps = 100;  // for the learning-rate schedule
  runtime::ExecutorOptions executor;
  // The kernels of the step's Gemm and Pointwise ops in fp32 and fp64 runs; empty: the CPU ones
  // (cpu_step_kernels.hpp).
  runtime::StepKernelsFactory<float> kernels_f32;
  runtime::StepKernelsFactory<double> kernels_f64;
  // false: the parameters are allocated but not initialised (their values are undefined), and the
  // host never holds their initial values: a run that only measures memory (train_memory.hpp).
  bool initialise = true;
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
// than one micro-batch, fp8 GEMMs.
void check_trainable(const Plan& plan);

// The attention program of every rank of a plan of either scope: a step-scope plan's attention
// is the same strategy over the same groups, built alone. The trainer does not need it (it builds
// its rank's whole-step program itself); kept for callers that pass one.
Schedule attention_schedule(const Plan& plan);

// Rank `rank`'s whole-step program of a plan of either scope (the plan as `--scope step` would
// build it), alone in its schedule; `origin` receives unroll()'s template op of every op.
struct RankStep {
  Schedule schedule;  // dims, flow sets, token sets and the one program
  StepTemplate step;
  std::vector<uint32_t> origin;
  const RankProgram& program() const { return schedule.ranks.front(); }
};
RankStep rank_step_program(const Plan& plan, int rank);

template <typename T>
class Trainer {
 public:
  // Builds this rank's whole-step program from the plan. Collective over the backend's ranks (sets
  // the plan's groups). Throws InputError for a plan the trainer cannot run (tensor or pipeline
  // parallel, a non-causal workload) and ScheduleError for a program it cannot bind.
  Trainer(const Plan& plan, runtime::Backend& backend, const TrainerOptions& options);
  // The same; `attention` (the plan's attention schedule) is not needed.
  Trainer(const Plan& plan, const Schedule& attention, runtime::Backend& backend, const TrainerOptions& options);
  ~Trainer();

  // Every op of step `step`'s program before its Optimizer op (forward, backward and gradient
  // synchronisation); returns the global mean loss. With ZeRO 0 gradient() is then the full
  // global gradient on every rank, else this rank's reduced shard (its part of every gradient
  // bucket, concatenated).
  double compute_gradients(int64_t step, const BatchSource& batch);
  // The whole program of step `step`: compute_gradients, then the Optimizer op (clipping and AdamW
  // on this rank's range) and, under ZeRO 1 and 2, the parameter gathers.
  StepResult step(int64_t step, const BatchSource& batch);

  const ParameterLayout& layout() const;
  // The trainer keeps its tensors in the backend's memory (device memory for a GPU backend).
  // These copy them to and from the host: parameters (every parameter, on every rank) and the
  // AdamW state of the rank's shard, for checkpoints.
  std::vector<T> parameters_to_host() const;
  void parameters_from_host(const std::vector<T>& values);
  AdamState<T> adam_to_host() const;
  void adam_from_host(const AdamState<T>& state);
  // Host views for tests: the parameters, and (mutable) a mirror that steps read before they run
  // and refresh after, so that writes through the reference reach the next step. Each step then
  // copies the parameters both ways; training loops use the copies above.
  const std::vector<T>& parameters() const;
  std::vector<T>& parameters();
  const std::vector<T>& gradient() const;  // see compute_gradients (a host copy)
  // ZeRO 0: [0, parameters). ZeRO 1 and 2: the offset of the shard's first piece, and that plus
  // the shard's length (its pieces of every bucket, padding included).
  int64_t shard_begin() const;
  int64_t shard_end() const;
  AdamState<T>& adam();  // of the shard (ZeRO 0: every parameter), in gradient() order; a mirror as above
  // This rank's whole-step program, and the ops the last step ran, in the order they started.
  const RankProgram& program() const;
  const std::vector<int32_t>& executed_ops() const;
  const OwnTokens& tokens() const;
  // Model FLOPs of one step over every rank (docs/step.md convention: 6 * tokens * W plus attention).
  double model_flops_per_step() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace wallfacer::train
