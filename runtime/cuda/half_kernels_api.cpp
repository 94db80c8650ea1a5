// The 16-bit kernel check: inputs drawn on the host, rounded on the device, the rounded values
// brought back for the fp64 reference, forward and backward timed with CUDA events.
#include <wallfacer/runtime/cuda/kernel_check.hpp>

#include <fmt/format.h>

#include <cmath>

#include <wallfacer/runtime/reference_attention.hpp>
#include <wallfacer/runtime/tensor.hpp>
#include "cuda_device_backend.hpp"
#include "device_kernels.hpp"

namespace wallfacer::runtime {
namespace {

using cuda::HalfType;

// Device memory released at scope exit.
struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) { WF_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 1))); }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

double relative(const std::vector<float>& got, const std::vector<double>& ref) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = std::abs(double(got[i]) - ref[i]);
    diff = std::isfinite(d) ? std::max(diff, d) : INFINITY;
    scale = std::max(scale, std::abs(ref[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

// Uniform [-1, 1) values rounded to 16 bits on the device; returns the rounded values as doubles.
std::vector<double> upload_half(HalfType type, size_t count, uint64_t seed, uint64_t stream, uint16_t* dst) {
  std::vector<float> host(count);
  for (size_t i = 0; i < count; ++i)
    host[i] = float(seeded_uniform(seed, stream, i));
  DeviceBuffer staging(count * sizeof(float));
  WF_CUDA_CHECK(cudaMemcpy(staging.p, host.data(), count * sizeof(float), cudaMemcpyHostToDevice));
  cuda::launch_to_half(type, staging.as<float>(), dst, count, nullptr);
  cuda::launch_from_half(type, dst, staging.as<float>(), count, nullptr);
  WF_CUDA_CHECK(cudaMemcpy(host.data(), staging.p, count * sizeof(float), cudaMemcpyDeviceToHost));
  return std::vector<double>(host.begin(), host.end());
}

std::vector<float> download(const DeviceBuffer& buffer, size_t count) {
  std::vector<float> host(count);
  WF_CUDA_CHECK(cudaMemcpy(host.data(), buffer.p, count * sizeof(float), cudaMemcpyDeviceToHost));
  return host;
}

template <typename Body>
double mean_ms(int reps, Body&& body) {
  body();  // warm-up
  cuda::Event begin(true), end(true);
  WF_CUDA_CHECK(cudaEventRecord(begin.get(), nullptr));
  for (int r = 0; r < reps; ++r)
    body();
  WF_CUDA_CHECK(cudaEventRecord(end.get(), nullptr));
  WF_CUDA_CHECK(cudaEventSynchronize(end.get()));
  float ms = 0;
  WF_CUDA_CHECK(cudaEventElapsedTime(&ms, begin.get(), end.get()));
  return double(ms) / std::max(reps, 1);
}

}  // namespace

KernelReport run_kernel_case(const KernelCase& c) {
  const CudaDeviceInfo info = cuda_device_info(0);
  if (!info.available) throw CudaError("no usable CUDA device: " + info.description);
  cuda::error_rank() = 0;
  const HalfType type = c.bf16 ? HalfType::BF16 : HalfType::FP16;
  const size_t nq = size_t(c.seq) * size_t(c.heads) * size_t(c.head_dim);
  const size_t nk = size_t(c.seq) * size_t(c.kv_heads) * size_t(c.head_dim);
  const size_t nl = size_t(c.seq) * size_t(c.heads);
  DeviceBuffer q(nq * 2), k(nk * 2), v(nk * 2), dO(nq * 2);
  DeviceBuffer o(nq * 4), lse(nl * 4), D(nl * 4), dq(nq * 4), dk(nk * 4), dv(nk * 4);
  const auto hq = upload_half(type, nq, c.seed, 0, q.as<uint16_t>());
  const auto hk = upload_half(type, nk, c.seed, 1, k.as<uint16_t>());
  const auto hv = upload_half(type, nk, c.seed, 2, v.as<uint16_t>());
  const auto hdo = upload_half(type, nq, c.seed, 3, dO.as<uint16_t>());

  kernels::AttnShape shape;
  shape.heads = c.heads;
  shape.kv_heads = c.kv_heads;
  shape.head_dim = c.head_dim;
  shape.group = c.heads / c.kv_heads;
  shape.causal = c.causal;
  const uint16_t *qp = q.as<uint16_t>(), *kp = k.as<uint16_t>(), *vp = v.as<uint16_t>(), *dop = dO.as<uint16_t>();
  KernelReport report;
  // Which kernels run is settled by a first call of each (a tensor-core launcher declines shapes
  // it does not take); the timed calls repeat that choice.
  auto forward_once = [&]() -> std::string {
    if (c.forward == "tensor-cores" &&
        cuda::launch_forward_half_tensor_cores(type, qp, kp, vp, nullptr, nullptr, c.seq, c.seq, shape, o.as<float>(),
                                               lse.as<float>(), nullptr))
      return "tensor cores (mma.sync)";
    if (c.forward == "wmma" && cuda::launch_forward_half_wmma(type, qp, kp, vp, nullptr, nullptr, c.seq, c.seq, shape,
                                                              o.as<float>(), lse.as<float>(), nullptr))
      return "tensor cores (WMMA)";
    cuda::launch_forward_half(type, qp, kp, vp, nullptr, nullptr, c.seq, c.seq, shape, o.as<float>(), lse.as<float>(),
                              nullptr);
    return "CUDA cores";
  };
  auto backward_once = [&]() -> std::string {
    cuda::launch_fill<float>(dq.as<float>(), nq, 0.0f, nullptr);
    cuda::launch_fill<float>(dk.as<float>(), nk, 0.0f, nullptr);
    cuda::launch_fill<float>(dv.as<float>(), nk, 0.0f, nullptr);
    if (c.backward == "tensor-cores" &&
        cuda::launch_backward_half_tensor_cores(type, qp, kp, vp, dop, lse.as<float>(), D.as<float>(), nullptr, nullptr,
                                                c.seq, c.seq, shape, dq.as<float>(), dk.as<float>(), dv.as<float>(),
                                                nullptr))
      return "tensor cores (mma.sync)";
    cuda::launch_backward_half(type, qp, kp, vp, dop, lse.as<float>(), D.as<float>(), nullptr, nullptr, c.seq, c.seq,
                               shape, dq.as<float>(), dk.as<float>(), dv.as<float>(), nullptr);
    return "CUDA cores";
  };
  report.forward_kernel = forward_once();
  auto forward = [&] { forward_once(); };
  auto backward = [&] { backward_once(); };
  report.forward_ms = mean_ms(c.reps, forward);
  cuda::launch_backward_prep_half(type, o.as<float>(), dO.as<uint16_t>(), c.seq, c.heads, c.head_dim, D.as<float>(),
                                  nullptr);
  report.backward_kernel = backward_once();
  report.backward_ms = mean_ms(c.reps, backward);
  WF_CUDA_CHECK(cudaDeviceSynchronize());
  const double pairs = c.causal ? double(c.seq) * double(c.seq + 1) / 2 : double(c.seq) * double(c.seq);
  const double fwd_flops = 4.0 * pairs * c.heads * c.head_dim;
  report.forward_tflops = fwd_flops / (report.forward_ms * 1e-3) * 1e-12;
  report.backward_tflops = 2.5 * fwd_flops / (report.backward_ms * 1e-3) * 1e-12;
  if (c.reference) {
    reference::Shape rs{1, c.seq, c.heads, c.kv_heads, c.head_dim, c.causal, 0};
    const reference::Outputs ref = reference::attention(rs, hq, hk, hv, hdo);
    report.o = relative(download(o, nq), ref.o);
    report.lse = relative(download(lse, nl), ref.lse);
    report.dq = relative(download(dq, nq), ref.dq);
    report.dk = relative(download(dk, nk), ref.dk);
    report.dv = relative(download(dv, nk), ref.dv);
    report.checked = true;
  }
  return report;
}

}  // namespace wallfacer::runtime
