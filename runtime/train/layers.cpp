#include <wallfacer/train/layers.hpp>

#include <cblas.h>

#include <wallfacer/runtime/attention_kernels.hpp>

#include <algorithm>
#include <cmath>

namespace wallfacer::train {

namespace {

constexpr double kNormEps = 1e-5;
constexpr double kRotaryBase = 10000.0;

void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c) {
  cblas_sgemm(CblasRowMajor, ta, tb, blasint(m), blasint(n), blasint(k), 1.0f, a, blasint(lda), b, blasint(ldb), beta,
              c, blasint(n));
}
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c) {
  cblas_dgemm(CblasRowMajor, ta, tb, blasint(m), blasint(n), blasint(k), 1.0, a, blasint(lda), b, blasint(ldb), beta, c,
              blasint(n));
}

thread_local GemmTrace* current_trace = nullptr;

}  // namespace

GemmTrace::GemmTrace() : previous_(current_trace) {
  current_trace = this;
}
GemmTrace::~GemmTrace() {
  current_trace = previous_;
}

template <typename T>
void matmul(const T* a, bool transpose_a, const T* b, bool transpose_b, T* c, int64_t m, int64_t n, int64_t k,
            bool accumulate) {
  if (current_trace) current_trace->record(m, n, k);
  kernels::use_default_blas_threads();
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate) std::fill(c, c + m * n, T(0));
    return;
  }
  gemm(transpose_a ? CblasTrans : CblasNoTrans, transpose_b ? CblasTrans : CblasNoTrans, m, n, k, a,
       transpose_a ? m : k, b, transpose_b ? k : n, accumulate ? T(1) : T(0), c);
}

template <typename T>
void rms_norm_forward(const T* x, const T* gain, T* y, T* rstd, int64_t rows, int64_t width) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * width;
    double sum = 0;
    for (int64_t j = 0; j < width; ++j)
      sum += double(xr[j]) * double(xr[j]);
    const T inv = T(1.0 / std::sqrt(sum / double(width) + kNormEps));
    rstd[r] = inv;
    for (int64_t j = 0; j < width; ++j)
      y[r * width + j] = xr[j] * inv * gain[j];
  }
}

template <typename T>
void rms_norm_backward(const T* x, const T* gain, const T* rstd, const T* dy, T* dx, T* dgain, int64_t rows,
                       int64_t width) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * width;
    const T* dyr = dy + r * width;
    const T inv = rstd[r];
    double dot = 0;  // sum_j gain_j dy_j x_j
    for (int64_t j = 0; j < width; ++j) {
      dot += double(gain[j]) * double(dyr[j]) * double(xr[j]);
      dgain[j] += dyr[j] * xr[j] * inv;
    }
    const T coeff = T(dot / double(width)) * inv * inv * inv;
    for (int64_t j = 0; j < width; ++j)
      dx[r * width + j] += inv * gain[j] * dyr[j] - coeff * xr[j];
  }
}

template <typename T>
void rotary(T* x, const std::vector<int64_t>& positions, int64_t rows_per_batch, int64_t rows, int heads, int head_dim,
            bool inverse) {
  const int pairs = head_dim / 2;
  std::vector<double> freq(static_cast<size_t>(pairs));
  for (int i = 0; i < pairs; ++i)
    freq[size_t(i)] = std::pow(kRotaryBase, -2.0 * i / head_dim);
  for (int64_t r = 0; r < rows; ++r) {
    const double pos = double(positions[size_t(r % rows_per_batch)]);
    for (int i = 0; i < pairs; ++i) {
      const double angle = pos * freq[size_t(i)];
      const T c = T(std::cos(angle)), s = T(inverse ? -std::sin(angle) : std::sin(angle));
      for (int h = 0; h < heads; ++h) {
        T* p = x + (r * heads + h) * head_dim + 2 * i;
        const T a = p[0], b = p[1];
        p[0] = a * c - b * s;
        p[1] = a * s + b * c;
      }
    }
  }
}

namespace {
constexpr double kGeluScale = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluCubic = 0.044715;
}  // namespace

template <typename T>
void gelu_forward(const T* u, T* h, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const double x = u[i];
    h[i] = T(0.5 * x * (1.0 + std::tanh(kGeluScale * (x + kGeluCubic * x * x * x))));
  }
}

template <typename T>
void gelu_backward(const T* u, const T* dh, T* du, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const double x = u[i];
    const double t = std::tanh(kGeluScale * (x + kGeluCubic * x * x * x));
    const double grad = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kGeluScale * (1.0 + 3.0 * kGeluCubic * x * x);
    du[i] = T(double(dh[i]) * grad);
  }
}

template <typename T>
void swiglu_forward(const T* g, const T* u, T* h, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const double x = g[i];
    h[i] = T(x / (1.0 + std::exp(-x)) * double(u[i]));
  }
}

template <typename T>
void swiglu_backward(const T* g, const T* u, const T* dh, T* dg, T* du, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const double x = g[i];
    const double sig = 1.0 / (1.0 + std::exp(-x));
    du[i] = T(double(dh[i]) * x * sig);
    dg[i] = T(double(dh[i]) * double(u[i]) * sig * (1.0 + x * (1.0 - sig)));
  }
}

template <typename T>
double cross_entropy(const T* logits, const int32_t* targets, const uint8_t* mask, double scale, T* dlogits,
                     int64_t rows, int64_t vocab, int64_t& correct) {
  double total = 0;
  correct = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = logits + r * vocab;
    T* drow = dlogits + r * vocab;
    if (!mask[r]) {
      std::fill(drow, drow + vocab, T(0));
      continue;
    }
    double top = row[0];
    int64_t best = 0;
    for (int64_t j = 1; j < vocab; ++j)
      if (double(row[j]) > top) {
        top = double(row[j]);
        best = j;
      }
    correct += best == targets[r] ? 1 : 0;
    double sum = 0;
    for (int64_t j = 0; j < vocab; ++j)
      sum += std::exp(double(row[j]) - top);
    const double lse = top + std::log(sum);
    total += lse - double(row[targets[r]]);
    for (int64_t j = 0; j < vocab; ++j)
      drow[j] = T(scale * std::exp(double(row[j]) - lse));
    drow[targets[r]] -= T(scale);
  }
  return total;
}

#define WF_TRAIN_INSTANTIATE(T)                                                                         \
  template void matmul<T>(const T*, bool, const T*, bool, T*, int64_t, int64_t, int64_t, bool);         \
  template void rms_norm_forward<T>(const T*, const T*, T*, T*, int64_t, int64_t);                      \
  template void rms_norm_backward<T>(const T*, const T*, const T*, const T*, T*, T*, int64_t, int64_t); \
  template void rotary<T>(T*, const std::vector<int64_t>&, int64_t, int64_t, int, int, bool);           \
  template void gelu_forward<T>(const T*, T*, int64_t);                                                 \
  template void gelu_backward<T>(const T*, const T*, T*, int64_t);                                      \
  template void swiglu_forward<T>(const T*, const T*, T*, int64_t);                                     \
  template void swiglu_backward<T>(const T*, const T*, const T*, T*, T*, int64_t);                      \
  template double cross_entropy<T>(const T*, const int32_t*, const uint8_t*, double, T*, int64_t, int64_t, int64_t&);
WF_TRAIN_INSTANTIATE(float)
WF_TRAIN_INSTANTIATE(double)
#undef WF_TRAIN_INSTANTIATE

}  // namespace wallfacer::train
