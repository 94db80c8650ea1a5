// The compute kernels of the whole-step program (docs/step.md): what a runtime runs for its Gemm
// and Pointwise ops (matrix products, embedding, RMS norms, rotary, residual adds, activations,
// softmax cross-entropy, AdamW) on the tensors the trainer binds to them (docs/training.md, "How
// the step runs"). Backend-neutral: the trainer drives any implementation the same way, the CPU
// one (runtime/train, OpenBLAS) or a device one.
//
// Conventions, as for Backend (backend.hpp). Tensor pointers (`x`, `y`, `a`, `b`, `c`, `gain`,
// `table`, `params`, `grads`, `m`, `v`, ...) point into the memory of the backend the kernels
// run with (host memory for the CPU backends, device memory for a CUDA backend); index arrays
// (`tokens`, `targets`, `mask`, `positions`) are ordinary host memory, which a device
// implementation uploads. Matrices are row-major; activations are [rows][width] with rows =
// sequences x the rank's own tokens (sequence-major), so row r is the sequence's token
// positions[r % rows_per_batch]. "accumulates" means += into the output. Calls may run
// asynchronously on a device; results returned to the host (cross_entropy, sum_squares) wait
// for the work before them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace wallfacer::runtime {

class Backend;

// One AdamW update (decoupled weight decay, bias correction by the update count).
struct AdamWStep {
  double lr = 0;          // this step's learning rate
  double grad_scale = 1;  // clipping: gradients are multiplied by this first
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0;  // applied only where the call's `decay` is set
  int64_t count = 1;        // updates applied so far, this one included (1 on the first)
};

template <typename T>
class StepKernels {
 public:
  virtual ~StepKernels() = default;
  virtual std::string name() const = 0;  // "cpu (OpenBLAS)", ...

  // ---- Gemm ops ----
  // C[m x n] (+)= op(A) op(B), A stored m x k (k x m when transpose_a), B k x n (n x k when
  // transpose_b). accumulate: C += instead of C =.
  virtual void gemm(const T* a, bool transpose_a, const T* b, bool transpose_b, T* c, int64_t m, int64_t n, int64_t k,
                    bool accumulate) = 0;

  // ---- Pointwise ops ----
  // x[r] = table[tokens[r]] (+ pos_table[positions[r % rows_per_batch]] when pos_table is set).
  virtual void embedding_forward(const T* table, const T* pos_table, const int32_t* tokens, const int64_t* positions,
                                 int64_t rows_per_batch, T* x, int64_t rows, int64_t width) = 0;
  // Accumulates dx[r] into dtable[tokens[r]] (and dpos_table[positions[r % rows_per_batch]]).
  virtual void embedding_backward(const T* dx, const int32_t* tokens, const int64_t* positions, int64_t rows_per_batch,
                                  T* dtable, T* dpos_table, int64_t rows, int64_t width) = 0;
  // y = x / rms(x) * gain per row; rstd[r] = 1 / sqrt(mean(x^2) + 1e-5).
  virtual void rms_norm_forward(const T* x, const T* gain, T* y, T* rstd, int64_t rows, int64_t width) = 0;
  // The backward of y = rms_norm(x) for upstream dy: dx and dgain accumulate.
  virtual void rms_norm_backward(const T* x, const T* gain, const T* rstd, const T* dy, T* dx, T* dgain, int64_t rows,
                                 int64_t width) = 0;
  // In place on x [rows][heads][head_dim]: rotates pairs (2i, 2i+1) of every head by
  // position * base^(-2i/head_dim) (base: the model's rotary base, 10000 by default); inverse
  // rotates back (the rotation's backward).
  virtual void rotary(T* x, const int64_t* positions, int64_t rows_per_batch, int64_t rows, int heads, int head_dim,
                      double base, bool inverse) = 0;
  // out = a + b elementwise (the residual adds, and the sum of two gradients); out may be a or b.
  virtual void add(const T* a, const T* b, T* out, int64_t count) = 0;
  // h = gelu(u) (tanh form); du = dh * gelu'(u).
  virtual void gelu_forward(const T* u, T* h, int64_t count) = 0;
  virtual void gelu_backward(const T* u, const T* dh, T* du, int64_t count) = 0;
  // h = silu(g) * u; its backward writes dg and du.
  virtual void swiglu_forward(const T* g, const T* u, T* h, int64_t count) = 0;
  virtual void swiglu_backward(const T* g, const T* u, const T* dh, T* dg, T* du, int64_t count) = 0;
  // Softmax cross-entropy of logits [rows][vocab], fused with its gradient: rows weigh
  // mask[r] * scale; writes dlogits = mask[r] * scale * (softmax - onehot(target)). Returns the
  // sum over masked rows of the row's loss (unscaled, in double); `correct` counts the masked rows
  // whose first largest logit is the target.
  virtual double cross_entropy(const T* logits, const int32_t* targets, const uint8_t* mask, double scale, T* dlogits,
                               int64_t rows, int64_t vocab, int64_t& correct) = 0;

  // ---- the Optimizer op ----
  // Sum of x[i]^2 in double (the global clipping norm's share of this rank).
  virtual double sum_squares(const T* x, int64_t count) = 0;
  // One AdamW update of params[0, count) from grads (times step.grad_scale) with the moments m and
  // v of the same range (zero before the first update); weight decay where `decay`.
  virtual void adamw(const AdamWStep& step, bool decay, T* params, const T* grads, T* m, T* v, int64_t count) = 0;
};

// Makes the kernels a trainer runs with on `backend` (whose memory the pointers are in).
template <typename T>
using StepKernelsFactory = std::function<std::unique_ptr<StepKernels<T>>(Backend& backend)>;

}  // namespace wallfacer::runtime
