// The device half of the CUDA backend: stream-ordered device memory, copies, kernels with
// device timing, events between the compute and communication streams.
#include "cuda_device_backend.hpp"

#include <fmt/format.h>
#include <nccl.h>

#include <cmath>

#include "device_kernels.hpp"

namespace wallfacer::runtime::cuda {

void throw_cuda(const char* file, int line, int rank, const char* call, const std::string& message) {
  throw CudaError(fmt::format("{}:{}: rank {}: {} failed: {}", file, line, rank, call, message));
}

int& error_rank() {
  thread_local int rank = -1;
  return rank;
}

Event::Event(bool timing) {
  WF_CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}
Event::~Event() {
  if (event_) cudaEventDestroy(event_);  // not checked: a destructor must not throw
}

CudaDeviceBackend::CudaDeviceBackend(int rank, int size, int device) : rank_(rank), size_(size), device_(device) {
  error_rank() = rank;
  WF_CUDA_CHECK(cudaSetDevice(device));
  WF_CUDA_CHECK(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
  WF_CUDA_CHECK(cudaStreamCreateWithFlags(&comm_, cudaStreamNonBlocking));
}

CudaDeviceBackend::~CudaDeviceBackend() {
  // Not checked: on the error path the device may already be unusable.
  cudaStreamSynchronize(comm_);
  cudaStreamSynchronize(compute_);
  compute_intervals_.clear();
  comm_intervals_.clear();
  open_comm_.reset();
  cudaStreamDestroy(comm_);
  cudaStreamDestroy(compute_);
}

void* CudaDeviceBackend::allocate(size_t bytes) {
  void* p = nullptr;
  WF_CUDA_CHECK(cudaMallocAsync(&p, std::max<size_t>(bytes, 1), compute_));
  return p;
}

// Stream-ordered: the memory returns to the pool once the compute stream reaches this point,
// which is after every transfer that used it (test() made the stream wait on its done event).
void CudaDeviceBackend::release(void* data) {
  if (data) WF_CUDA_CHECK(cudaFreeAsync(data, compute_));
}

void CudaDeviceBackend::upload(void* dst, const void* host, size_t bytes) {
  WF_CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, compute_));
  // The host buffer may be temporary.
  WF_CUDA_CHECK(cudaStreamSynchronize(compute_));
}

void CudaDeviceBackend::download(void* host, const void* src, size_t bytes) {
  WF_CUDA_CHECK(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, compute_));
  WF_CUDA_CHECK(cudaStreamSynchronize(compute_));
}

void CudaDeviceBackend::copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                                size_t rows) {
  if (rows == 0 || row_bytes == 0) return;
  WF_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, rows, cudaMemcpyDeviceToDevice, compute_));
}

void CudaDeviceBackend::fill(void* dst, ElemType type, size_t count, double value) {
  if (type == ElemType::F32)
    launch_fill<float>(static_cast<float*>(dst), count, float(value), compute_);
  else
    launch_fill<double>(static_cast<double*>(dst), count, value, compute_);
}

void CudaDeviceBackend::accumulate(void* dst, const void* src, size_t count, ElemType type) {
  if (type == ElemType::F32)
    launch_accumulate<float>(static_cast<float*>(dst), static_cast<const float*>(src), count, compute_);
  else
    launch_accumulate<double>(static_cast<double*>(dst), static_cast<const double*>(src), count, compute_);
}

template <typename Launch>
void CudaDeviceBackend::timed_kernel(Launch&& launch) {
  auto begin = std::make_shared<Event>(true), end = std::make_shared<Event>(true);
  WF_CUDA_CHECK(cudaEventRecord(begin->get(), compute_));
  launch();
  WF_CUDA_CHECK(cudaEventRecord(end->get(), compute_));
  compute_intervals_.emplace_back(std::move(begin), std::move(end));
}

const int64_t* CudaDeviceBackend::device_positions(const int64_t* host, int64_t rows, std::vector<void*>& scratch) {
  if (host == nullptr || rows == 0) return nullptr;
  void* p = allocate(size_t(rows) * sizeof(int64_t));
  scratch.push_back(p);
  // From pageable memory: returns once the data is staged, so the host array may go away.
  WF_CUDA_CHECK(cudaMemcpyAsync(p, host, size_t(rows) * sizeof(int64_t), cudaMemcpyHostToDevice, compute_));
  return static_cast<const int64_t*>(p);
}

namespace {

template <typename T>
kernels::QueryBlock<T> with_pos(kernels::QueryBlock<T> q, const int64_t* pos) {
  q.pos = pos;
  return q;
}
template <typename T>
kernels::KeyBlock<T> with_pos(kernels::KeyBlock<T> kv, const int64_t* pos) {
  kv.pos = pos;
  return kv;
}

}  // namespace

#define WF_DEVICE_KERNELS(T)                                                                                           \
  void CudaDeviceBackend::attention_forward(const kernels::QueryBlock<T>& q, const kernels::KeyBlock<T>& kv,           \
                                            const kernels::AttnShape& shape, T* acc_o, T* acc_lse,                     \
                                            int64_t acc_row_stride, int64_t lse_stride) {                              \
    std::vector<void*> scratch;                                                                                        \
    const auto dq = with_pos(q, device_positions(q.pos, q.rows, scratch));                                             \
    const auto dkv = with_pos(kv, device_positions(kv.pos, kv.rows, scratch));                                         \
    timed_kernel([&] { launch_forward<T>(dq, dkv, shape, acc_o, acc_lse, acc_row_stride, lse_stride, compute_); });    \
    for (void* p : scratch)                                                                                            \
      release(p);                                                                                                      \
  }                                                                                                                    \
  void CudaDeviceBackend::attention_backward(const kernels::QueryBlock<T>& q, const kernels::KeyBlock<T>& kv,          \
                                             const kernels::BackwardInputs<T>& in, const kernels::AttnShape& shape,    \
                                             T* dq_out, T* dk, T* dv) {                                                \
    std::vector<void*> scratch;                                                                                        \
    const auto dq = with_pos(q, device_positions(q.pos, q.rows, scratch));                                             \
    const auto dkv = with_pos(kv, device_positions(kv.pos, kv.rows, scratch));                                         \
    timed_kernel([&] { launch_backward<T>(dq, dkv, in, shape, dq_out, dk, dv, compute_); });                           \
    for (void* p : scratch)                                                                                            \
      release(p);                                                                                                      \
  }                                                                                                                    \
  void CudaDeviceBackend::backward_prep(const T* o, const T* dO, int64_t rows, int heads, int head_dim,                \
                                        int64_t row_stride, T* D, int64_t lse_stride) {                                \
    timed_kernel([&] { launch_backward_prep<T>(o, dO, rows, heads, head_dim, row_stride, D, lse_stride, compute_); }); \
  }                                                                                                                    \
  void CudaDeviceBackend::merge_partial(T* o_a, T* lse_a, const T* o_b, const T* lse_b, int64_t rows, int heads,       \
                                        int head_dim, int64_t row_stride, int64_t lse_stride) {                        \
    timed_kernel(                                                                                                      \
        [&] { launch_merge<T>(o_a, lse_a, o_b, lse_b, rows, heads, head_dim, row_stride, lse_stride, compute_); });    \
  }
WF_DEVICE_KERNELS(float)
WF_DEVICE_KERNELS(double)
#undef WF_DEVICE_KERNELS

EventPtr CudaDeviceBackend::record_compute() {
  auto event = std::make_shared<Event>();
  WF_CUDA_CHECK(cudaEventRecord(event->get(), compute_));
  return event;
}

void CudaDeviceBackend::compute_waits(const EventPtr& done) {
  WF_CUDA_CHECK(cudaStreamWaitEvent(compute_, done->get(), 0));
}

void CudaDeviceBackend::comm_interval_begin() {
  open_comm_ = std::make_shared<Event>(true);
  WF_CUDA_CHECK(cudaEventRecord(open_comm_->get(), comm_));
}

void CudaDeviceBackend::comm_interval_end() {
  auto end = std::make_shared<Event>(true);
  WF_CUDA_CHECK(cudaEventRecord(end->get(), comm_));
  comm_intervals_.emplace_back(std::move(open_comm_), std::move(end));
}

void CudaDeviceBackend::synchronize() {
  WF_CUDA_CHECK(cudaStreamSynchronize(comm_));
  WF_CUDA_CHECK(cudaStreamSynchronize(compute_));
}

DeviceTimes CudaDeviceBackend::device_times() {
  synchronize();
  auto total = [](std::vector<std::pair<EventPtr, EventPtr>>& intervals) {
    double seconds = 0;
    for (const auto& [begin, end] : intervals) {
      float ms = 0;
      WF_CUDA_CHECK(cudaEventElapsedTime(&ms, begin->get(), end->get()));
      seconds += double(ms) * 1e-3;
    }
    intervals.clear();
    return seconds;
  };
  DeviceTimes times;
  times.valid = true;
  times.compute_seconds = total(compute_intervals_);
  times.comm_seconds = total(comm_intervals_);
  return times;
}

}  // namespace wallfacer::runtime::cuda

namespace wallfacer::runtime {

CudaDeviceInfo cuda_device_info(int device) {
  CudaDeviceInfo info;
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    info.description =
        status != cudaSuccess ? fmt::format("no CUDA device: {}", cudaGetErrorString(status)) : "no CUDA device found";
    return info;
  }
  info.devices = count;
  if (device < 0 || device >= count) {
    info.description = fmt::format("device {} requested but {} CUDA devices are present", device, count);
    return info;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    info.description = fmt::format("cannot query CUDA device {}", device);
    return info;
  }
  int driver = 0, runtime = 0, nccl = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  ncclGetVersion(&nccl);
  info.available = true;
  info.description =
      fmt::format("{}, sm_{}{}, {:.1f} GiB; driver {}.{}, runtime {}.{}, NCCL {}.{}.{}", prop.name, prop.major,
                  prop.minor, double(prop.totalGlobalMem) / double(1ull << 30), driver / 1000, driver % 1000 / 10,
                  runtime / 1000, runtime % 1000 / 10, nccl / 10000, nccl / 100 % 100, nccl % 100);
  return info;
}

}  // namespace wallfacer::runtime
