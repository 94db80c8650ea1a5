// AdamW with decoupled weight decay, global-norm gradient clipping and a linear-warmup, cosine
// decay learning rate, over a contiguous range of the flat parameter array (all of it, or this
// rank's ZeRO shard). Moments are kept in the training precision.
#pragma once

#include <cstdint>
#include <vector>

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

// One AdamW update of params[begin, begin + count) with grads (same range, already averaged and
// clipped by `grad_scale`). decay[i] says whether element begin + i takes weight decay.
template <typename T>
void adamw_update(const OptimizerSettings& s, double lr, double grad_scale, T* params, const T* grads,
                  const std::vector<uint8_t>& decay, int64_t begin, int64_t count, AdamState<T>& state);

}  // namespace wallfacer::train
