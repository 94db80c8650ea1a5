#include "train/train_fixtures.hpp"

#include <fmt/format.h>

#include <mutex>
#include <stdexcept>

#include <wallfacer/runtime/local_backend.hpp>
#include <wallfacer/schedule/strategy.hpp>

namespace wallfacer::test {

Workload tiny_decoder(int64_t seq, int batch, bool gated) {
  Workload w;
  w.model = "test-decoder";
  w.layers = 2;
  w.heads = 4;
  w.kv_heads = 2;
  w.head_dim = 8;
  w.hidden = 32;
  w.ffn = 64;
  w.vocab = 256;
  w.gated_ffn = gated;
  w.seq = seq;
  w.batch = batch;
  w.dtype = DType::FP32;
  w.causal = true;
  w.zero_stage = 0;
  w.checkpointing = Checkpointing::None;
  return w;
}

Plan tiny_plan(StrategyKind kind, const StrategyParams& params, const Workload& workload) {
  Plan plan;
  plan.topology_name = "none";
  plan.topology_nodes = 1;
  plan.workload = workload;
  plan.strategy = kind;
  plan.params = params;
  const int P = params.sequence_parallel * params.data_parallel;
  for (int r = 0; r < P; ++r)
    plan.ranks.push_back(RankSlot{r, r, 0, r, ""});
  plan.groups = make_groups(kind, params, P);
  return plan;
}

Plan first_feasible_plan(StrategyKind kind, int sequence_parallel, int data_parallel, const Workload& workload) {
  const int P = sequence_parallel * data_parallel;
  for (const StrategyParams& q : enumerate_params(kind, workload, P))
    if (q.sequence_parallel == sequence_parallel && q.data_parallel == data_parallel && q.tensor_parallel == 1 &&
        q.pipeline_parallel == 1 && check_feasible(kind, q, workload, P).ok)
      return tiny_plan(kind, q, workload);
  throw std::logic_error(
      fmt::format("{} S={} D={}: no feasible parameters", to_string(kind), sequence_parallel, data_parallel));
}

train::TrainingSample pseudo_text(int64_t seq, int64_t step, int sample) {
  static const char* words[] = {"the ",   "ring ", "passes ", "keys ",  "and ",     "values ", "around ",
                                "teams ", "of ",   "ranks ",  "while ", "queries ", "stay "};
  train::TrainingSample s;
  uint64_t state = uint64_t(step) * 7919 + uint64_t(sample) * 104729 + 1;
  while (int64_t(s.tokens.size()) < seq + 1) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    for (const char* c = words[(state >> 33) % 13]; *c && int64_t(s.tokens.size()) < seq + 1; ++c)
      s.tokens.push_back(int32_t(uint8_t(*c)));
  }
  s.loss_mask.assign(size_t(seq), 1);
  for (int64_t t = 0; t < seq; t += 7)
    s.loss_mask[size_t(t)] = 0;
  return s;
}

train::BatchSource pseudo_text_batches(int64_t seq) {
  return [seq](int64_t step, int sample) { return pseudo_text(seq, step, sample); };
}

template <typename T>
void on_every_rank(const Plan& plan, const train::TrainerOptions& options,
                   const std::function<void(train::Trainer<T>&, runtime::Backend&)>& body) {
  runtime::run_local_ranks(plan.num_ranks(), [&](runtime::Backend& backend) {
    train::Trainer<T> trainer(plan, backend, options);
    body(trainer, backend);
  });
}

template <typename T>
std::vector<double> train_losses(const Plan& plan, int steps, const train::TrainerOptions& options) {
  std::vector<double> losses;
  on_every_rank<T>(plan, options, [&](train::Trainer<T>& trainer, runtime::Backend& backend) {
    auto batches = pseudo_text_batches(plan.workload.seq);
    for (int s = 0; s < steps; ++s) {
      const double loss = trainer.step(s, batches).loss;
      if (backend.rank() == 0) losses.push_back(loss);
    }
  });
  return losses;
}

template void on_every_rank<float>(const Plan&, const train::TrainerOptions&,
                                   const std::function<void(train::Trainer<float>&, runtime::Backend&)>&);
template void on_every_rank<double>(const Plan&, const train::TrainerOptions&,
                                    const std::function<void(train::Trainer<double>&, runtime::Backend&)>&);
template std::vector<double> train_losses<float>(const Plan&, int, const train::TrainerOptions&);
template std::vector<double> train_losses<double>(const Plan&, int, const train::TrainerOptions&);

}  // namespace wallfacer::test
