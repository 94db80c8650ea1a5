#include <wallfacer/train/cpu_step_kernels.hpp>

#include <vector>

#include <wallfacer/train/layers.hpp>
#include <wallfacer/train/optimizer.hpp>

namespace wallfacer::train {
namespace {

template <typename T>
class CpuStepKernels final : public runtime::StepKernels<T> {
 public:
  std::string name() const override { return "cpu (OpenBLAS)"; }

  void gemm(const T* a, bool transpose_a, const T* b, bool transpose_b, T* c, int64_t m, int64_t n, int64_t k,
            bool accumulate) override {
    matmul(a, transpose_a, b, transpose_b, c, m, n, k, accumulate);
  }

  void embedding_forward(const T* table, const T* pos_table, const int32_t* tokens, const int64_t* positions,
                         int64_t rows_per_batch, T* x, int64_t rows, int64_t width) override {
    for (int64_t r = 0; r < rows; ++r) {
      const T* e = table + int64_t(tokens[r]) * width;
      T* out = x + r * width;
      for (int64_t j = 0; j < width; ++j)
        out[j] = e[j];
      if (!pos_table) continue;
      const T* p = pos_table + positions[r % rows_per_batch] * width;
      for (int64_t j = 0; j < width; ++j)
        out[j] += p[j];
    }
  }

  void embedding_backward(const T* dx, const int32_t* tokens, const int64_t* positions, int64_t rows_per_batch,
                          T* dtable, T* dpos_table, int64_t rows, int64_t width) override {
    for (int64_t r = 0; r < rows; ++r) {
      T* e = dtable + int64_t(tokens[r]) * width;
      T* p = dpos_table ? dpos_table + positions[r % rows_per_batch] * width : nullptr;
      for (int64_t j = 0; j < width; ++j) {
        e[j] += dx[r * width + j];
        if (p) p[j] += dx[r * width + j];
      }
    }
  }

  void rms_norm_forward(const T* x, const T* gain, T* y, T* rstd, int64_t rows, int64_t width) override {
    train::rms_norm_forward(x, gain, y, rstd, rows, width);
  }
  void rms_norm_backward(const T* x, const T* gain, const T* rstd, const T* dy, T* dx, T* dgain, int64_t rows,
                         int64_t width) override {
    train::rms_norm_backward(x, gain, rstd, dy, dx, dgain, rows, width);
  }

  void rotary(T* x, const int64_t* positions, int64_t rows_per_batch, int64_t rows, int heads, int head_dim,
              double base, bool inverse) override {
    const std::vector<int64_t> pos(positions, positions + rows_per_batch);
    train::rotary(x, pos, rows_per_batch, rows, heads, head_dim, base, inverse);
  }

  void add(const T* a, const T* b, T* out, int64_t count) override {
    for (int64_t i = 0; i < count; ++i)
      out[i] = a[i] + b[i];
  }

  void gelu_forward(const T* u, T* h, int64_t count) override { train::gelu_forward(u, h, count); }
  void gelu_backward(const T* u, const T* dh, T* du, int64_t count) override { train::gelu_backward(u, dh, du, count); }
  void swiglu_forward(const T* g, const T* u, T* h, int64_t count) override { train::swiglu_forward(g, u, h, count); }
  void swiglu_backward(const T* g, const T* u, const T* dh, T* dg, T* du, int64_t count) override {
    train::swiglu_backward(g, u, dh, dg, du, count);
  }

  double cross_entropy(const T* logits, const int32_t* targets, const uint8_t* mask, double scale, T* dlogits,
                       int64_t rows, int64_t vocab, int64_t& correct) override {
    return train::cross_entropy(logits, targets, mask, scale, dlogits, rows, vocab, correct);
  }

  double sum_squares(const T* x, int64_t count) override {
    double squares = 0;
    for (int64_t i = 0; i < count; ++i)
      squares += double(x[i]) * double(x[i]);
    return squares;
  }

  void adamw(const runtime::AdamWStep& s, bool decay, T* params, const T* grads, T* m, T* v, int64_t count) override {
    adamw_range(s, decay, params, grads, m, v, count);
  }
};

}  // namespace

template <typename T>
std::unique_ptr<runtime::StepKernels<T>> make_cpu_step_kernels() {
  return std::make_unique<CpuStepKernels<T>>();
}

template std::unique_ptr<runtime::StepKernels<float>> make_cpu_step_kernels<float>();
template std::unique_ptr<runtime::StepKernels<double>> make_cpu_step_kernels<double>();

}  // namespace wallfacer::train
