#include <wallfacer/runtime/tensor.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <stdexcept>

#include <wallfacer/core/hash_mix.hpp>

namespace wallfacer::runtime {

int64_t shape_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw std::invalid_argument(fmt::format("negative dimension in shape {}", shape_to_string(shape)));
    n *= d;
  }
  return n;
}

std::string shape_to_string(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

template <typename T>
Tensor<T>::Tensor(std::vector<int64_t> dims, T fill) : shape(std::move(dims)) {
  data.assign(size_t(shape_numel(shape)), fill);
}

template <typename T>
int64_t Tensor<T>::offset(const std::vector<int64_t>& index) const {
  if (index.size() != shape.size()) throw std::invalid_argument("tensor index rank differs from the tensor's");
  int64_t flat = 0;
  for (size_t i = 0; i < index.size(); ++i) {
    if (index[i] < 0 || index[i] >= shape[i]) throw std::out_of_range("tensor index out of range");
    flat = flat * shape[i] + index[i];
  }
  return flat;
}

namespace {
// SplitMix64's step: a bijective 64-bit mix with good avalanche, enough for test inputs.
uint64_t mix64(uint64_t x) {
  return splitmix64_mix(x + kSplitmix64Golden);
}
}  // namespace

double seeded_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  uint64_t bits = mix64(mix64(seed ^ mix64(stream)) ^ index);
  double unit = double(bits >> 11) * 0x1.0p-53;  // [0, 1)
  return 2.0 * unit - 1.0;
}

Tensor<double> seeded_tensor(const std::vector<int64_t>& shape, uint64_t seed, uint64_t stream, bool round_to_float) {
  Tensor<double> t(shape);
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = seeded_uniform(seed, stream, uint64_t(i));
    t[i] = round_to_float ? double(float(v)) : v;
  }
  return t;
}

template <typename T>
ErrorStats compare_to_reference(const std::vector<T>& result, const std::vector<double>& reference) {
  if (result.size() != reference.size())
    throw std::invalid_argument(
        fmt::format("compare: result has {} values, reference {}", result.size(), reference.size()));
  ErrorStats s;
  bool reference_nan = false;
  for (size_t i = 0; i < result.size(); ++i) {
    double a = double(result[i]);
    double ref = reference[i];
    if (std::isfinite(ref)) s.max_ref = std::max(s.max_ref, std::abs(ref));
    reference_nan = reference_nan || std::isnan(ref);
    if (!std::isfinite(a)) {
      // Matching infinities (lse of a fully masked row) are equal; anything else is an error.
      if (a == ref) continue;
      s.finite = false;
      if (s.worst_index < 0) s.worst_index = int64_t(i);
      continue;
    }
    double diff = std::isfinite(ref) ? std::abs(a - ref) : INFINITY;
    if (diff > s.max_abs) {
      s.max_abs = diff;
      s.worst_index = int64_t(i);
    }
  }
  if (!s.finite) s.max_abs = INFINITY;
  // A reference that is itself NaN has no magnitude to report: NaN, never a misleading 0.
  if (reference_nan) {
    s.finite = false;
    s.max_ref = NAN;
  }
  s.relative = s.max_ref > 0 ? s.max_abs / s.max_ref : s.max_abs;
  return s;
}

template struct Tensor<float>;
template struct Tensor<double>;
template ErrorStats compare_to_reference(const std::vector<float>&, const std::vector<double>&);
template ErrorStats compare_to_reference(const std::vector<double>&, const std::vector<double>&);

}  // namespace wallfacer::runtime
