// Internal to the trainer: its per-rank state (trainer.cpp runs the layers, trainer_sync.cpp the
// gradient collectives and the sharded update).
#pragma once

#include <memory>
#include <vector>

#include <wallfacer/train/trainer.hpp>

namespace wallfacer::train {

// What a layer's forward leaves for its backward. Which fields stay depends on the plan's
// activation checkpointing; the backward recomputes the missing ones (never the attention,
// whose O and lse stay in the session).
template <typename T>
struct LayerCache {
  std::vector<T> x, a, rstd1, o, x1, c, rstd2, gate, up, act;
  std::unique_ptr<runtime::RankSession> session;
};

template <typename T>
struct Trainer<T>::Impl {
  Impl(const Plan& plan, const Schedule& schedule, runtime::Backend& backend, const TrainerOptions& options);

  // ---- the model (trainer.cpp) ----
  void embed(const std::vector<int32_t>& inputs, std::vector<T>& x) const;
  void embed_backward(const std::vector<int32_t>& inputs, const std::vector<T>& dx);
  void layer_forward(int l, std::vector<T>& x, LayerCache<T>& cache);
  void recompute(int l, LayerCache<T>& cache) const;
  void layer_backward(int l, std::vector<T>& dx, LayerCache<T>& cache);
  void attention(const std::vector<T>& q, const std::vector<T>& k, const std::vector<T>& v, LayerCache<T>& cache);
  void attention_backward(LayerCache<T>& cache, const std::vector<T>& d_o, std::vector<T>& dq, std::vector<T>& dk,
                          std::vector<T>& dv);
  // Returns the batch's summed loss over this rank's counted targets.
  double head(const std::vector<T>& x, const std::vector<int32_t>& targets, const std::vector<uint8_t>& mask,
              double scale, std::vector<T>& dx, int64_t& correct);
  double local_gradients(int64_t step, const BatchSource& batch);
  double local_accuracy = 0;  // this rank's correct answers over the batch's counted targets

  // ---- gradient synchronisation and the update (trainer_sync.cpp) ----
  void setup_shards();
  // Sums `extra` scalars along with the gradient; ZeRO 0: gradient complete on every rank, else
  // this rank's shard in shard_grad.
  void synchronise(std::vector<double>& extra);
  void all_reduce_scalars(std::vector<double>& values);
  void gather_parameters();
  double grad_norm_squared_local() const;

  const Plan& plan;
  const Schedule& schedule;
  const RankProgram& program;
  runtime::Backend& backend;
  const TrainerOptions options;
  const ModelShape shape;
  const ParameterLayout layout;
  const OwnTokens own;
  const std::vector<int> groups;  // gradient_groups
  std::vector<T> params, grads;
  std::vector<uint8_t> decay;
  // ZeRO: this rank's range of the padded flat array, and its reduced gradient.
  int64_t padded = 0, shard_lo = 0, shard_hi = 0;
  std::vector<T> shard_grad;
  std::vector<std::pair<int64_t, int64_t>> shard_path;  // the range before each group's scatter
  AdamState<T> adam;
};

}  // namespace wallfacer::train
