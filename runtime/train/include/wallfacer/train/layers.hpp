// The dense building blocks of the trainer's decoder, forward and backward, on row-major host
// arrays in float or double: matrix products (OpenBLAS), RMS norm, rotary position embedding,
// GELU and SiLU-gated activations, and softmax cross-entropy with a loss mask. Every function
// works on `rows` independent rows, so a rank runs them on exactly the tokens it holds.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace wallfacer::train {

// While one is alive, records the {m, n, k} of every matmul the constructing thread runs: what the
// tests compare with the step program's Gemm ops (docs/training.md, "How the step runs").
class GemmTrace {
 public:
  GemmTrace();
  ~GemmTrace();
  GemmTrace(const GemmTrace&) = delete;
  GemmTrace& operator=(const GemmTrace&) = delete;
  const std::vector<std::array<int64_t, 3>>& calls() const { return calls_; }
  void record(int64_t m, int64_t n, int64_t k) { calls_.push_back({m, n, k}); }

 private:
  GemmTrace* previous_;
  std::vector<std::array<int64_t, 3>> calls_;
};

// C[m x n] (+)= A[m x k] * B[k x n], with A or B read transposed when asked (then A is stored
// k x m, B n x k). accumulate: C += instead of C =.
template <typename T>
void matmul(const T* a, bool transpose_a, const T* b, bool transpose_b, T* c, int64_t m, int64_t n, int64_t k,
            bool accumulate);

// y = x / rms(x) * gain over rows of `width`; rstd[r] = 1 / sqrt(mean(x^2) + eps).
template <typename T>
void rms_norm_forward(const T* x, const T* gain, T* y, T* rstd, int64_t rows, int64_t width);
// dx (+)= d/dx, dgain += d/dgain for y = rms_norm(x) with upstream dy; dx accumulates.
template <typename T>
void rms_norm_backward(const T* x, const T* gain, const T* rstd, const T* dy, T* dx, T* dgain, int64_t rows,
                       int64_t width);

// Rotates pairs (2i, 2i+1) of every head by pos * base^(-2i/head_dim); inverse rotates back
// (the backward of the rotation is its inverse). x: [rows][heads][head_dim].
template <typename T>
void rotary(T* x, const std::vector<int64_t>& positions, int64_t rows_per_batch, int64_t rows, int heads, int head_dim,
            double base, bool inverse);

// GELU (tanh approximation) and its backward: du = dh * gelu'(u).
template <typename T>
void gelu_forward(const T* u, T* h, int64_t count);
template <typename T>
void gelu_backward(const T* u, const T* dh, T* du, int64_t count);
// h = silu(g) * u and its backward.
template <typename T>
void swiglu_forward(const T* g, const T* u, T* h, int64_t count);
template <typename T>
void swiglu_backward(const T* g, const T* u, const T* dh, T* dg, T* du, int64_t count);

// Softmax cross-entropy of logits [rows][vocab] against targets, rows weighted by
// mask[r] * scale. Returns sum_r mask[r] * loss_r (unscaled, in double) and writes
// dlogits = mask[r] * scale * (softmax - onehot); `correct` counts the masked rows whose largest
// logit is the target (the first largest on ties).
template <typename T>
double cross_entropy(const T* logits, const int32_t* targets, const uint8_t* mask, double scale, T* dlogits,
                     int64_t rows, int64_t vocab, int64_t& correct);

}  // namespace wallfacer::train
