// Internal to the CUDA backend: the device half every transport shares (memory, copies, kernels,
// streams, events, device timing) and the checking macros. A transport derives from
// CudaDeviceBackend and adds point-to-point, collectives, completion and the control calls.
//
// Streams and events. Everything the executor does to buffers (copies, fills, kernels) is
// enqueued on the rank's compute stream and returns at once, in the executor's order, so the
// executor's single reading of the schedule is also the device's order. A posted transfer
// records an event on the compute stream (its send data is packed) that the communication
// stream waits on before the transfer; the transfer records a done event, and when the executor
// learns the transfer is complete (test()) the compute stream waits on that event, so whatever
// the executor then enqueues (unpacking, the kernels that read the data, freeing the send
// buffer) runs after it on the device. Host and device never wait on each other except in
// download(), synchronize() and the control calls.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include <wallfacer/runtime/backend.hpp>
#include <wallfacer/runtime/cuda/cuda_backend.hpp>

namespace wallfacer::runtime::cuda {

[[noreturn]] void throw_cuda(const char* file, int line, int rank, const char* call, const std::string& message);

// The calling rank for error messages (set per thread by each backend).
int& error_rank();

#define WF_CUDA_CHECK(call)                                                                                       \
  do {                                                                                                            \
    const cudaError_t wf_status_ = (call);                                                                        \
    if (wf_status_ != cudaSuccess)                                                                                \
      ::wallfacer::runtime::cuda::throw_cuda(__FILE__, __LINE__, ::wallfacer::runtime::cuda::error_rank(), #call, \
                                             cudaGetErrorString(wf_status_));                                     \
  } while (0)

// An event shared by the requests and streams that wait on it; destroyed when the last user lets
// go (CUDA releases it after pending work completes).
class Event {
 public:
  explicit Event(bool timing = false);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};
using EventPtr = std::shared_ptr<Event>;

class CudaDeviceBackend : public Backend {
 public:
  CudaDeviceBackend(int rank, int size, int device);
  ~CudaDeviceBackend() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

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

  void synchronize() override;
  DeviceTimes device_times() override;

  cudaStream_t compute_stream() const { return compute_; }
  cudaStream_t comm_stream() const { return comm_; }
  // An event recorded now on the compute stream: what a transfer posted now must wait for.
  EventPtr record_compute();
  // The compute stream waits for `done` (a transfer's completion) before anything enqueued later.
  void compute_waits(const EventPtr& done);
  // Timing of a stretch of communication on the comm stream: call begin before, end after.
  void comm_interval_begin();
  void comm_interval_end();

 protected:
  const int rank_, size_, device_;

 private:
  template <typename Launch>
  void timed_kernel(Launch&& launch);
  // Device copies of host position arrays, freed (stream-ordered) after the kernel.
  const int64_t* device_positions(const int64_t* host, int64_t rows, std::vector<void*>& scratch);

  cudaStream_t compute_ = nullptr, comm_ = nullptr;
  std::vector<std::pair<EventPtr, EventPtr>> compute_intervals_, comm_intervals_;
  EventPtr open_comm_;
};

}  // namespace wallfacer::runtime::cuda
