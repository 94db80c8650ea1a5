#include <wallfacer/train/optimizer.hpp>

#include <algorithm>
#include <cmath>

namespace wallfacer::train {

double learning_rate(const OptimizerSettings& s, int64_t step, int64_t total) {
  if (s.warmup > 0 && step < s.warmup) return s.lr * double(step + 1) / double(s.warmup);
  const int64_t decay_steps = std::max<int64_t>(1, total - s.warmup);
  const double progress = std::clamp(double(step - s.warmup) / double(decay_steps), 0.0, 1.0);
  return s.min_lr + 0.5 * (s.lr - s.min_lr) * (1.0 + std::cos(M_PI * progress));
}

double clip_scale(const OptimizerSettings& s, double norm) {
  if (s.clip <= 0 || !(norm > s.clip)) return 1.0;
  return s.clip / (norm + 1e-6);
}

template <typename T>
void adamw_update(const OptimizerSettings& s, double lr, double grad_scale, T* params, const T* grads,
                  const std::vector<uint8_t>& decay, int64_t begin, int64_t count, AdamState<T>& state) {
  if (int64_t(state.m.size()) != count) {
    state.m.assign(size_t(count), T(0));
    state.v.assign(size_t(count), T(0));
  }
  ++state.steps;
  const double c1 = 1.0 - std::pow(s.beta1, double(state.steps));
  const double c2 = 1.0 - std::pow(s.beta2, double(state.steps));
  for (int64_t i = 0; i < count; ++i) {
    const T g = T(double(grads[i]) * grad_scale);
    T& m = state.m[size_t(i)];
    T& v = state.v[size_t(i)];
    m = T(s.beta1) * m + T(1 - s.beta1) * g;
    v = T(s.beta2) * v + T(1 - s.beta2) * g * g;
    const double update = (double(m) / c1) / (std::sqrt(double(v) / c2) + s.eps);
    T& p = params[begin + i];
    const double decayed = decay[size_t(begin + i)] ? s.weight_decay * double(p) : 0.0;
    p = T(double(p) - lr * (update + decayed));
  }
}

template void adamw_update<float>(const OptimizerSettings&, double, double, float*, const float*,
                                  const std::vector<uint8_t>&, int64_t, int64_t, AdamState<float>&);
template void adamw_update<double>(const OptimizerSettings&, double, double, double*, const double*,
                                   const std::vector<uint8_t>&, int64_t, int64_t, AdamState<double>&);

}  // namespace wallfacer::train
