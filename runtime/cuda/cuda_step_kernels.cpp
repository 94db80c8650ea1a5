// The whole-step program's kernels on a GPU (StepKernels, wallfacer/runtime/step_kernels.hpp):
// GEMMs through cuBLASLt, the pointwise ops through step_kernels.cu, all on the rank's compute
// stream of its CUDA backend, so they keep the executor's order with the attention and the
// transfers. Host index arrays (tokens, targets, mask, positions) are staged into stream-ordered
// device scratch that is freed behind the kernel reading it.
#include <fmt/format.h>

#include <cmath>
#include <numeric>
#include <type_traits>
#include <vector>

#include <wallfacer/runtime/step_kernels.hpp>
#include "cublaslt_gemm.hpp"
#include "cuda_device_backend.hpp"
#include "device_kernels.hpp"
#include "step_kernels_device.hpp"

namespace wallfacer::runtime::cuda {
namespace {

template <typename T>
class CudaStepKernels final : public StepKernels<T> {
 public:
  CudaStepKernels(CudaDeviceBackend& backend, const CudaStepKernelsOptions& options)
      : backend_(backend), stream_(backend.compute_stream()), gemm_(stream_), options_(options) {}

  std::string name() const override {
    if constexpr (std::is_same_v<T, double>) return "cuda (cuBLASLt fp64)";
    return options_.bf16_gemm ? "cuda (cuBLASLt bf16 inputs, fp32 accumulation)" : "cuda (cuBLASLt fp32)";
  }

  void gemm(const T* a, bool transpose_a, const T* b, bool transpose_b, T* c, int64_t m, int64_t n, int64_t k,
            bool accumulate) override {
    const GemmShape shape{m, n, k, transpose_a, transpose_b};
    if constexpr (std::is_same_v<T, double>) {
      gemm_.run(GemmType::F64, GemmType::F64, a, b, c, shape, accumulate);
    } else if (!options_.bf16_gemm) {
      gemm_.run(GemmType::F32, GemmType::F32, a, b, c, shape, accumulate);
    } else {
      // Inputs rounded to bf16, products accumulated and written in fp32.
      const size_t na = size_t(m * k), nb = size_t(k * n);
      auto* a16 = static_cast<uint16_t*>(backend_.allocate(na * 2));
      auto* b16 = static_cast<uint16_t*>(backend_.allocate(nb * 2));
      launch_to_half(HalfType::BF16, a, a16, na, stream_);
      launch_to_half(HalfType::BF16, b, b16, nb, stream_);
      gemm_.run(GemmType::BF16, GemmType::F32, a16, b16, c, shape, accumulate);
      backend_.release(a16);
      backend_.release(b16);
    }
  }

  void embedding_forward(const T* table, const T* pos_table, const int32_t* tokens, const int64_t* positions,
                         int64_t rows_per_batch, T* x, int64_t rows, int64_t width) override {
    Staged st(backend_);
    launch_embedding_forward<T>(table, pos_table, st.put(tokens, rows),
                                pos_table ? st.put(positions, rows_per_batch) : nullptr, rows_per_batch, x, rows, width,
                                stream_);
  }
  void embedding_backward(const T* dx, const int32_t* tokens, const int64_t* positions, int64_t rows_per_batch,
                          T* dtable, T* dpos_table, int64_t rows, int64_t width) override {
    Staged st(backend_);
    launch_embedding_backward<T>(dx, st.put(tokens, rows), dpos_table ? st.put(positions, rows_per_batch) : nullptr,
                                 rows_per_batch, dtable, dpos_table, rows, width, stream_);
  }
  void rms_norm_forward(const T* x, const T* gain, T* y, T* rstd, int64_t rows, int64_t width) override {
    launch_rms_norm_forward<T>(x, gain, y, rstd, rows, width, stream_);
  }
  void rms_norm_backward(const T* x, const T* gain, const T* rstd, const T* dy, T* dx, T* dgain, int64_t rows,
                         int64_t width) override {
    launch_rms_norm_backward<T>(x, gain, rstd, dy, dx, dgain, rows, width, stream_);
  }
  void rotary(T* x, const int64_t* positions, int64_t rows_per_batch, int64_t rows, int heads, int head_dim,
              double base, bool inverse) override {
    Staged st(backend_);
    launch_rotary<T>(x, st.put(positions, rows_per_batch), rows_per_batch, rows, heads, head_dim, base, inverse,
                     stream_);
  }
  void add(const T* a, const T* b, T* out, int64_t count) override { launch_add<T>(a, b, out, count, stream_); }
  void gelu_forward(const T* u, T* h, int64_t count) override { launch_gelu_forward<T>(u, h, count, stream_); }
  void gelu_backward(const T* u, const T* dh, T* du, int64_t count) override {
    launch_gelu_backward<T>(u, dh, du, count, stream_);
  }
  void swiglu_forward(const T* g, const T* u, T* h, int64_t count) override {
    launch_swiglu_forward<T>(g, u, h, count, stream_);
  }
  void swiglu_backward(const T* g, const T* u, const T* dh, T* dg, T* du, int64_t count) override {
    launch_swiglu_backward<T>(g, u, dh, dg, du, count, stream_);
  }

  double cross_entropy(const T* logits, const int32_t* targets, const uint8_t* mask, double scale, T* dlogits,
                       int64_t rows, int64_t vocab, int64_t& correct) override {
    correct = 0;
    if (rows == 0) return 0;
    Staged st(backend_);
    auto* loss = static_cast<double*>(backend_.allocate(size_t(rows) * sizeof(double)));
    auto* hits = static_cast<int32_t*>(backend_.allocate(size_t(rows) * sizeof(int32_t)));
    launch_cross_entropy<T>(logits, st.put(targets, rows), st.put(mask, rows), scale, dlogits, loss, hits, rows, vocab,
                            stream_);
    std::vector<double> host_loss(static_cast<size_t>(rows));
    std::vector<int32_t> host_hits(static_cast<size_t>(rows));
    backend_.download(host_loss.data(), loss, host_loss.size() * sizeof(double));
    backend_.download(host_hits.data(), hits, host_hits.size() * sizeof(int32_t));
    backend_.release(loss);
    backend_.release(hits);
    for (int32_t h : host_hits)
      correct += h;
    return std::accumulate(host_loss.begin(), host_loss.end(), 0.0);
  }

  double sum_squares(const T* x, int64_t count) override {
    auto* sum = static_cast<double*>(backend_.allocate(sizeof(double)));
    WF_CUDA_CHECK(cudaMemsetAsync(sum, 0, sizeof(double), stream_));
    launch_sum_squares<T>(x, count, sum, stream_);
    double host = 0;
    backend_.download(&host, sum, sizeof(double));
    backend_.release(sum);
    return host;
  }

  void adamw(const AdamWStep& s, bool decay, T* params, const T* grads, T* m, T* v, int64_t count) override {
    const double c1 = 1.0 - std::pow(s.beta1, double(s.count));
    const double c2 = 1.0 - std::pow(s.beta2, double(s.count));
    launch_adamw<T>(params, grads, m, v, count, s.lr, s.grad_scale, s.beta1, s.beta2, s.eps,
                    decay ? s.weight_decay : 0.0, c1, c2, stream_);
  }

 private:
  // Host index arrays staged on the device for the kernels of one call, freed (stream-ordered)
  // behind them.
  class Staged {
   public:
    explicit Staged(CudaDeviceBackend& backend) : b_(backend) {}
    ~Staged() {
      for (void* p : blocks_)
        b_.release(p);  // stream-ordered; cannot fail for a block it allocated
    }
    template <typename I>
    const I* put(const I* host, int64_t count) {
      if (host == nullptr || count <= 0) return nullptr;
      void* p = b_.allocate(size_t(count) * sizeof(I));
      blocks_.push_back(p);
      // From pageable memory: returns once staged, so the host array may change afterwards.
      WF_CUDA_CHECK(cudaMemcpyAsync(p, host, size_t(count) * sizeof(I), cudaMemcpyHostToDevice, b_.compute_stream()));
      return static_cast<const I*>(p);
    }

   private:
    CudaDeviceBackend& b_;
    std::vector<void*> blocks_;
  };

  CudaDeviceBackend& backend_;
  cudaStream_t stream_;
  LtGemm gemm_;
  const CudaStepKernelsOptions options_;
};

}  // namespace
}  // namespace wallfacer::runtime::cuda

namespace wallfacer::runtime {

template <typename T>
std::unique_ptr<StepKernels<T>> make_cuda_step_kernels(Backend& backend, const CudaStepKernelsOptions& options) {
  auto* device = dynamic_cast<cuda::CudaDeviceBackend*>(&backend);
  if (device == nullptr)
    throw CudaError(
        fmt::format("rank {}: the CUDA step kernels need a CUDA backend, not {}", backend.rank(), backend.name()));
  cuda::error_rank() = backend.rank();
  return std::make_unique<cuda::CudaStepKernels<T>>(*device, options);
}

template std::unique_ptr<StepKernels<float>> make_cuda_step_kernels<float>(Backend&, const CudaStepKernelsOptions&);
template std::unique_ptr<StepKernels<double>> make_cuda_step_kernels<double>(Backend&, const CudaStepKernelsOptions&);

}  // namespace wallfacer::runtime
