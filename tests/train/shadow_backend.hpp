// A test backend whose memory the host cannot touch, as a GPU's: every allocation is an address
// in a reserved, inaccessible (PROT_NONE) range, backed by a block of an inner host backend that
// only the backend's own calls reach. A host read or write of the trainer's tensors faults as it
// would on device memory, and every pointer the backend or the kernels are handed must lie inside
// one of its live allocations (a stale, foreign or host pointer throws), so the trainer's device
// path is checked on the CPU. The kernels (ShadowKernels) check each tensor's whole extent and run
// the CPU kernels on the inner blocks.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <wallfacer/runtime/backend.hpp>
#include <wallfacer/runtime/step_kernels.hpp>

namespace wallfacer::test {

class ShadowBackend final : public runtime::Backend {
 public:
  explicit ShadowBackend(runtime::Backend& inner);
  ~ShadowBackend() override;

  // The inner block behind [p, p + bytes); throws std::logic_error naming `what` when the range
  // is not inside one live allocation.
  void* real(const void* p, size_t bytes, const char* what) const;
  int64_t allocations() const { return allocations_; }
  int64_t peak_bytes() const { return peak_bytes_; }  // the most bytes live at once
  int64_t translations() const { return translations_; }

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::string name() const override { return "shadow memory over " + inner_.name(); }
  void set_groups(const std::vector<CommGroup>& groups) override;

  void* allocate(size_t bytes) override;
  void release(void* data) override;
  void upload(void* dst, const void* host, size_t bytes) override;
  void download(void* host, const void* src, size_t bytes) override;
  void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes, size_t rows) override;
  void fill(void* dst, runtime::ElemType type, size_t count, double value) override;
  void accumulate(void* dst, const void* src, size_t count, runtime::ElemType type) override;

  runtime::RequestId isend(int peer, int tag, const void* data, size_t bytes) override;
  runtime::RequestId irecv(int peer, int tag, void* data, size_t bytes) override;
  runtime::RequestId iallgatherv(int group, const void* send, int64_t send_count, void* recv,
                                 const runtime::Counts& recv_counts, runtime::ElemType type) override;
  runtime::RequestId ialltoallv(int group, const void* send, const runtime::Counts& send_counts, void* recv,
                                const runtime::Counts& recv_counts, runtime::ElemType type) override;
  bool has_reduce_scatter() const override { return inner_.has_reduce_scatter(); }
  runtime::RequestId ireduce_scatter(int group, const void* send, void* recv, const runtime::Counts& recv_counts,
                                     runtime::ElemType type) override;
  runtime::RequestId iallreduce(int group, void* data, int64_t count, runtime::ElemType type) override;

  bool test(runtime::RequestId request) override { return inner_.test(request); }
  void wait_any(const std::vector<runtime::RequestId>& pending) override { inner_.wait_any(pending); }
  void progress() override { inner_.progress(); }
  void abandon() noexcept override { inner_.abandon(); }
  void synchronize() override { inner_.synchronize(); }

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

  bool all_ok(bool ok) override { return inner_.all_ok(ok); }
  std::vector<std::string> gather_to_root(const std::string& bytes) override { return inner_.gather_to_root(bytes); }
  double max_over_ranks(double value) override { return inner_.max_over_ranks(value); }
  void barrier() override { inner_.barrier(); }

 private:
  template <typename T>
  T* r(const T* p, int64_t elements, const char* what) const {
    return static_cast<T*>(real(p, size_t(elements) * sizeof(T), what));
  }
  template <typename T>
  void forward_impl(const kernels::QueryBlock<T>& q, const kernels::KeyBlock<T>& kv, const kernels::AttnShape& shape,
                    T* acc_o, T* acc_lse, int64_t acc_row_stride, int64_t lse_stride);
  template <typename T>
  void backward_impl(const kernels::QueryBlock<T>& q, const kernels::KeyBlock<T>& kv,
                     const kernels::BackwardInputs<T>& in, const kernels::AttnShape& shape, T* dq, T* dk, T* dv);
  int member_index(int group) const;

  struct Block {
    void* real = nullptr;
    size_t bytes = 0;
  };
  runtime::Backend& inner_;
  char* region_ = nullptr;  // reserved, never accessible
  size_t region_bytes_ = 0, used_ = 0;
  std::map<uintptr_t, Block> blocks_;  // by shadow address
  std::vector<CommGroup> groups_;
  mutable int64_t translations_ = 0;
  int64_t allocations_ = 0, live_bytes_ = 0, peak_bytes_ = 0;
};

// The CPU kernels behind the shadow backend's addresses: every tensor's whole extent must be one
// live allocation. `calls` counts the kernel calls made.
template <typename T>
std::unique_ptr<runtime::StepKernels<T>> make_shadow_kernels(ShadowBackend& backend, int64_t* calls);

}  // namespace wallfacer::test
