// Host tensors: a shape and contiguous row-major values, the seeded inputs `wallfacer run` and the
// tests feed the executor (deterministic from a seed and independent of the rank count), and the
// error statistics used to compare a result with the fp64 reference.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace wallfacer::runtime {

template <typename T>
struct Tensor {
  std::vector<int64_t> shape;
  std::vector<T> data;

  Tensor() = default;
  explicit Tensor(std::vector<int64_t> dims, T fill = T(0));

  int64_t numel() const { return int64_t(data.size()); }
  int rank() const { return int(shape.size()); }
  // Flat index of a full multi-index (row-major).
  int64_t offset(const std::vector<int64_t>& index) const;
  T& operator[](int64_t i) { return data[size_t(i)]; }
  const T& operator[](int64_t i) const { return data[size_t(i)]; }
};

// Product of the dimensions; throws std::invalid_argument on a negative dimension.
int64_t shape_numel(const std::vector<int64_t>& shape);
// "[2, 64, 4, 16]"
std::string shape_to_string(const std::vector<int64_t>& shape);

template <typename To, typename From>
Tensor<To> convert(const Tensor<From>& in) {
  Tensor<To> out;
  out.shape = in.shape;
  out.data.assign(in.data.begin(), in.data.end());
  return out;
}

// Counter-based uniform value in [-1, 1) for (seed, stream, index): any rank can produce any
// element without generating the ones before it, so inputs do not depend on the rank count.
double seeded_uniform(uint64_t seed, uint64_t stream, uint64_t index);
// A tensor of seeded_uniform values; when `round_to_float` the values are rounded to fp32 so that
// an fp32 run and the fp64 reference see identical inputs.
Tensor<double> seeded_tensor(const std::vector<int64_t>& shape, uint64_t seed, uint64_t stream, bool round_to_float);

// Largest absolute difference against a reference and the reference's largest magnitude;
// relative = max_abs / max_ref (the scale-free figure `run --check` reports).
struct ErrorStats {
  double max_abs = 0;
  double max_ref = 0;
  double relative = 0;
  int64_t worst_index = -1;  // flat index of the largest difference
  bool finite = true;        // false when the result holds NaN or infinity
};
template <typename T>
ErrorStats compare_to_reference(const std::vector<T>& result, const std::vector<double>& reference);

}  // namespace wallfacer::runtime
