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
void adamw_range(const runtime::AdamWStep& s, bool decay, T* params, const T* grads, T* m, T* v, int64_t count) {
  const double c1 = 1.0 - std::pow(s.beta1, double(s.count));
  const double c2 = 1.0 - std::pow(s.beta2, double(s.count));
  for (int64_t i = 0; i < count; ++i) {
    const T g = T(double(grads[i]) * s.grad_scale);
    m[i] = T(s.beta1) * m[i] + T(1 - s.beta1) * g;
    v[i] = T(s.beta2) * v[i] + T(1 - s.beta2) * g * g;
    const double update = (double(m[i]) / c1) / (std::sqrt(double(v[i]) / c2) + s.eps);
    const double decayed = decay ? s.weight_decay * double(params[i]) : 0.0;
    params[i] = T(double(params[i]) - s.lr * (update + decayed));
  }
}

template void adamw_range<float>(const runtime::AdamWStep&, bool, float*, const float*, float*, float*, int64_t);
template void adamw_range<double>(const runtime::AdamWStep&, bool, double*, const double*, double*, double*, int64_t);

}  // namespace wallfacer::train
