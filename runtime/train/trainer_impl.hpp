// Internal to the trainer: its per-rank state. trainer.cpp builds it and runs a step's program
// through a StepSession; trainer_ops.cpp runs the program's Gemm and Pointwise ops on the model's
// tensors (StepKernels) and binds the attention's inputs and outputs; trainer_sync.cpp binds the
// gradient buckets, the Optimizer op and the ZeRO parameter gathers. Every tensor lives in the
// backend's memory (BackendArray): the host holds only index arrays, scalars and the mirrors
// that the public accessors hand out.
#pragma once

#include <memory>
#include <vector>

#include <wallfacer/runtime/step_session.hpp>
#include <wallfacer/train/trainer.hpp>
#include "backend_array.hpp"
#include "step_roles.hpp"

namespace wallfacer::train {

// A layer's activations, as its forward leaves them for its backward (what stays depends on the
// plan's activation checkpointing; the program's recomputation ops rebuild the rest).
template <typename T>
struct LayerActs {
  explicit LayerActs(runtime::Backend& b)
      : x(b),
        a(b),
        rstd1(b),
        q(b),
        k(b),
        v(b),
        q_pre(b),
        k_pre(b),
        o(b),
        proj(b),
        x1(b),
        c(b),
        rstd2(b),
        gate(b),
        up(b),
        act(b),
        mlp(b) {}
  // Releases every tensor but those in `keep`.
  void clear_except(const BackendArray<T>* keep = nullptr) {
    for (BackendArray<T>* t :
         {&x, &a, &rstd1, &q, &k, &v, &q_pre, &k_pre, &o, &proj, &x1, &c, &rstd2, &gate, &up, &act, &mlp})
      if (t != keep) t->clear();
  }
  BackendArray<T> x, a, rstd1, q, k, v, q_pre, k_pre, o, proj, x1, c, rstd2, gate, up, act, mlp;
};

// ZeRO 1 and 2: this rank's part of one gradient bucket (reduce-scatter over every gradient group).
struct ShardPiece {
  int64_t padded = 0;  // the bucket's elements, padded to a multiple of every group's size
  int64_t length = 0;  // padded / (product of the group sizes): every rank's part
  int64_t at = 0;      // where the part sits in the rank's shard vector
};

template <typename T>
struct Trainer<T>::Impl {
  Impl(const Plan& plan, runtime::Backend& backend, const TrainerOptions& options);

  // ---- the step (trainer.cpp) ----
  void prepare_batch(int64_t step, const BatchSource& batch);
  void run_program(int64_t op_limit);
  void started(int32_t op);

  // ---- compute ops and the attention's bindings (trainer_ops.cpp) ----
  void compute(int32_t op);
  void layer_forward(Role role, int l, bool recompute);
  void layer_backward(Role role, int l);
  void head(Role role);
  void drop_after_forward(LayerActs<T>& acts) const;
  void bind_attention(int l, Field field, BackendArray<T>& values);
  void collect_attention(int l, FieldMask fields);
  void restart_accumulators(int32_t op);
  void gemm(const BackendArray<T>& a, bool ta, const T* b, bool tb, BackendArray<T>& c, int64_t m, int64_t n, int64_t k,
            bool accumulate);
  void gemm_into(const BackendArray<T>& a, bool ta, const BackendArray<T>& b, T* c, int64_t m, int64_t n, int64_t k);

  // ---- gradient buckets, the Optimizer op and the parameter gathers (trainer_sync.cpp) ----
  void setup_shards();
  runtime::FlatCall flat(int32_t op);
  runtime::FlatCall grad_sync(const OpRole& role);
  runtime::FlatCall param_gather(const OpRole& role);
  void flat_finished(int32_t op);
  void optimizer();
  void all_reduce_scalars(std::vector<double>& values);
  std::vector<double> step_scalars(bool with_norm);

  // ---- the host's view of the state (trainer.cpp) ----
  // A caller holding the mutable parameters() or adam() reference writes the host mirror: the
  // program reads it back before each run and refreshes it after.
  void host_to_backend();
  void backend_to_host();

  const Plan& plan;
  runtime::Backend& backend;
  const TrainerOptions options;
  const ModelShape shape;
  const ParameterLayout layout;
  const std::vector<int> groups;  // gradient_groups
  const RankStep step;
  const OwnTokens own;
  const StepRoles roles;
  std::unique_ptr<runtime::StepKernels<T>> kernels;
  std::vector<std::vector<int32_t>> layer_inputs, layer_outputs, layer_buffers;  // by layer
  BackendArray<T> params, grads, adam_m, adam_v;
  AdamState<T> adam;  // steps; m and v: the host mirror of adam_m and adam_v
  mutable std::vector<T> host_params, host_grad;
  bool params_on_host = false, adam_on_host = false;  // a caller holds the mutable mirror

  // ZeRO 1 and 2 (sharded): every rank's part of every bucket, and the gathers' order of ranks.
  bool sharded = false;
  std::vector<ShardPiece> pieces;                 // by bucket, identical shape on every rank
  std::vector<std::vector<int64_t>> piece_start;  // by rank, by bucket: offset of its part in the bucket
  std::vector<int> gather_order;                  // ranks, in the order the last gather delivers
  std::vector<int64_t> group_sizes;               // by gradient group
  int64_t shard_size = 0;
  BackendArray<T> shard_grad, shard_params;
  std::vector<std::vector<BackendArray<T>>> scratch;  // by bucket (or gather bucket), by level

  // The step under way.
  runtime::StepSession* session = nullptr;
  std::vector<int32_t> trace;
  int64_t step_index = 0;
  std::vector<int32_t> inputs, targets;
  std::vector<uint8_t> mask;
  int64_t counted = 0;  // the whole batch's counted targets
  double loss_sum = 0;  // this rank's, before the division by `counted`
  int64_t correct = 0;
  StepResult result;
  std::vector<LayerActs<T>> acts;
  std::vector<char> restarted;  // by buffer: a recomputation wrote its O and Lse again
  BackendArray<T> x, dx, f, rstd_f, logits, dlogits, df;
  BackendArray<T> d_act, d_gate, d_up, dc, dn, d_o, dq, dk, dv, da;
};

}  // namespace wallfacer::train
