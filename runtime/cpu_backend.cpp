#include <wallfacer/runtime/cpu_backend.hpp>

#include <cstdlib>
#include <cstring>
#include <new>

namespace wallfacer::runtime {

void* CpuBackend::allocate(size_t bytes) {
  // 64-byte alignment keeps rows friendly to the vectorised kernels and SGEMM.
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (!p) throw std::bad_alloc();
  return p;
}

void CpuBackend::release(void* data) {
  std::free(data);
}

void CpuBackend::upload(void* dst, const void* host, size_t bytes) {
  if (bytes) std::memcpy(dst, host, bytes);
}

void CpuBackend::download(void* host, const void* src, size_t bytes) {
  if (bytes) std::memcpy(host, src, bytes);
}

void CpuBackend::copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                         size_t rows) {
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  if (dst_pitch == row_bytes && src_pitch == row_bytes) {
    std::memcpy(d, s, row_bytes * rows);
    return;
  }
  for (size_t r = 0; r < rows; ++r)
    std::memcpy(d + r * dst_pitch, s + r * src_pitch, row_bytes);
}

namespace {
template <typename T>
void fill_as(void* dst, size_t count, double value) {
  T* p = static_cast<T*>(dst);
  for (size_t i = 0; i < count; ++i)
    p[i] = T(value);
}
template <typename T>
void accumulate_as(void* dst, const void* src, size_t count) {
  T* d = static_cast<T*>(dst);
  const T* s = static_cast<const T*>(src);
  for (size_t i = 0; i < count; ++i)
    d[i] += s[i];
}
}  // namespace

void CpuBackend::fill(void* dst, ElemType type, size_t count, double value) {
  if (type == ElemType::F32)
    fill_as<float>(dst, count, value);
  else
    fill_as<double>(dst, count, value);
}

void CpuBackend::accumulate(void* dst, const void* src, size_t count, ElemType type) {
  if (type == ElemType::F32)
    accumulate_as<float>(dst, src, count);
  else
    accumulate_as<double>(dst, src, count);
}

void CpuBackend::attention_forward(const kernels::QueryBlock<float>& q, const kernels::KeyBlock<float>& kv,
                                   const kernels::AttnShape& shape, float* acc_o, float* acc_lse,
                                   int64_t acc_row_stride, int64_t lse_stride) {
  kernels::attention_forward(q, kv, shape, acc_o, acc_lse, acc_row_stride, lse_stride);
}
void CpuBackend::attention_forward(const kernels::QueryBlock<double>& q, const kernels::KeyBlock<double>& kv,
                                   const kernels::AttnShape& shape, double* acc_o, double* acc_lse,
                                   int64_t acc_row_stride, int64_t lse_stride) {
  kernels::attention_forward(q, kv, shape, acc_o, acc_lse, acc_row_stride, lse_stride);
}
void CpuBackend::attention_backward(const kernels::QueryBlock<float>& q, const kernels::KeyBlock<float>& kv,
                                    const kernels::BackwardInputs<float>& in, const kernels::AttnShape& shape,
                                    float* dq, float* dk, float* dv) {
  kernels::attention_backward(q, kv, in, shape, dq, dk, dv);
}
void CpuBackend::attention_backward(const kernels::QueryBlock<double>& q, const kernels::KeyBlock<double>& kv,
                                    const kernels::BackwardInputs<double>& in, const kernels::AttnShape& shape,
                                    double* dq, double* dk, double* dv) {
  kernels::attention_backward(q, kv, in, shape, dq, dk, dv);
}
void CpuBackend::backward_prep(const float* o, const float* dO, int64_t rows, int heads, int head_dim,
                               int64_t row_stride, float* D, int64_t lse_stride) {
  kernels::backward_prep(o, dO, rows, heads, head_dim, row_stride, D, lse_stride);
}
void CpuBackend::backward_prep(const double* o, const double* dO, int64_t rows, int heads, int head_dim,
                               int64_t row_stride, double* D, int64_t lse_stride) {
  kernels::backward_prep(o, dO, rows, heads, head_dim, row_stride, D, lse_stride);
}
void CpuBackend::merge_partial(float* o_a, float* lse_a, const float* o_b, const float* lse_b, int64_t rows, int heads,
                               int head_dim, int64_t row_stride, int64_t lse_stride) {
  kernels::merge_partial(o_a, lse_a, o_b, lse_b, rows, heads, head_dim, row_stride, lse_stride);
}
void CpuBackend::merge_partial(double* o_a, double* lse_a, const double* o_b, const double* lse_b, int64_t rows,
                               int heads, int head_dim, int64_t row_stride, int64_t lse_stride) {
  kernels::merge_partial(o_a, lse_a, o_b, lse_b, rows, heads, head_dim, row_stride, lse_stride);
}

}  // namespace wallfacer::runtime
