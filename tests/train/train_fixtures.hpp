// Shared by the trainer's tests: a tiny decoder workload, plans of every strategy for it, a
// deterministic batch of pseudo-text, and training on P threads (local backend).
#pragma once

#include <functional>
#include <vector>

#include <wallfacer/plan/plan.hpp>
#include <wallfacer/train/trainer.hpp>

namespace wallfacer::test {

// layers 2, hidden 32 (4 heads x 8, 2 kv heads), MLP 64, bytes (vocab 256), seq tokens, batch.
Workload tiny_decoder(int64_t seq, int batch, bool gated);

// Rank r on GPU r, the strategy's canonical groups; T = 1, Pp = 1.
Plan tiny_plan(StrategyKind kind, const StrategyParams& params, const Workload& workload);

// The strategy's first feasible parameters (its knobs included) with S = sequence_parallel,
// D = data_parallel, T = Pp = 1, as tiny_plan's plan; std::logic_error when there are none.
Plan first_feasible_plan(StrategyKind kind, int sequence_parallel, int data_parallel, const Workload& workload);

// Deterministic pseudo-text (bytes with repeated words), every target counted except a few.
train::TrainingSample pseudo_text(int64_t seq, int64_t step, int sample);
train::BatchSource pseudo_text_batches(int64_t seq);

// Runs body(trainer, backend) on every rank of the plan (threads); the callback decides what to
// record (rank 0's results, typically).
template <typename T>
void on_every_rank(const Plan& plan, const train::TrainerOptions& options,
                   const std::function<void(train::Trainer<T>&, runtime::Backend&)>& body);

// Losses of `steps` training steps, rank 0's view.
template <typename T>
std::vector<double> train_losses(const Plan& plan, int steps, const train::TrainerOptions& options = {});

}  // namespace wallfacer::test
