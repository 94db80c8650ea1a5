// AdamW with decoupled weight decay, global-norm gradient clipping and a linear-warmup, cosine
// decay learning rate, over contiguous ranges of the flat parameter array (a tensor, or a
// tensor's part of this rank's ZeRO shard). Moments are kept in the training precision.
#pragma once

#include <cstdint>
#include <vector>

#include <wallfacer/runtime/step_kernels.hpp>

namespace wallfacer::train {

struct OptimizerSettings {
  double lr = 3e-3;      // peak learning rate
  double min_lr = 3e-4;  // end of the cosine decay
  int64_t warmup = 10;   // steps of linear warmup from lr / warmup
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.1;
  double clip = 1.0;  // largest global gradient norm; 0: no clipping
};

// Learning rate of step `step` (0-based) of `total`.
double learning_rate(const OptimizerSettings& s, int64_t step, int64_t total);

// Scale that brings a gradient of global norm `norm` to at most s.clip (1 when within).
double clip_scale(const OptimizerSettings& s, double norm);

template <typename T>
struct AdamState {
  std::vector<T> m, v;  // first and second moments of the owned range
  int64_t steps = 0;    // updates applied (bias correction)
};

// One AdamW update of params[0, count) from grads (times step.grad_scale) with the moments m and
// v of the same range, weight decay where `decay`: the CPU kernels' Optimizer op
// (cpu_step_kernels.hpp), in double arithmetic with T storage.
template <typename T>
void adamw_range(const runtime::AdamWStep& step, bool decay, T* params, const T* grads, T* m, T* v, int64_t count);

}  // namespace wallfacer::train
