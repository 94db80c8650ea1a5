// The half of a backend that every CPU backend shares: host memory and the CPU attention kernels
// (attention_kernels.hpp). The local (threads) and MPI backends derive from it and add
// communication.
#pragma once

#include <wallfacer/runtime/backend.hpp>

namespace wallfacer::runtime {

class CpuBackend : public Backend {
 public:
  void* allocate(size_t bytes) override;
  void release(void* data) override;
  void upload(void* dst, const void* host, size_t bytes) override;
  void download(void* host, const void* src, size_t bytes) override;
  void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes, size_t rows) override;
  void fill(void* dst, ElemType type, size_t count, double value) override;
  void accumulate(void* dst, const void* src, size_t count, ElemType type) override;

  void attention_forward(const kernels::QueryBlock<float>& q, const kernels::KeyBlock<float>& kv,
                         const kernels::AttnShape& shape, float* acc_o, float* acc_lse, int64_t acc_row_stride,
                         int64_t lse_stride) override;
  void attention_forward(const kernels::QueryBlock<double>& q, const kernels::KeyBlock<double>& kv,
                         const kernels::AttnShape& shape, double* acc_o, double* acc_lse, int64_t acc_row_stride,
                         int64_t lse_stride) override;
  void attention_backward(const kernels::QueryBlock<float>& q, const kernels::KeyBlock<float>& kv,
                          const kernels::BackwardInputs<float>& in, const kernels::AttnShape& shape, float* dq,
                          float* dk, float* dv) override;
  void attention_backward(const kernels::QueryBlock<double>& q, const kernels::KeyBlock<double>& kv,
                          const kernels::BackwardInputs<double>& in, const kernels::AttnShape& shape, double* dq,
                          double* dk, double* dv) override;
  void backward_prep(const float* o, const float* dO, int64_t rows, int heads, int head_dim, int64_t row_stride,
                     float* D, int64_t lse_stride) override;
  void backward_prep(const double* o, const double* dO, int64_t rows, int heads, int head_dim, int64_t row_stride,
                     double* D, int64_t lse_stride) override;
  void merge_partial(float* o_a, float* lse_a, const float* o_b, const float* lse_b, int64_t rows, int heads,
                     int head_dim, int64_t row_stride, int64_t lse_stride) override;
  void merge_partial(double* o_a, double* lse_a, const double* o_b, const double* lse_b, int64_t rows, int heads,
                     int head_dim, int64_t row_stride, int64_t lse_stride) override;
};

}  // namespace wallfacer::runtime
