// Internal to the CUDA backend: host-side launchers of the whole-step program's pointwise kernels
// (step_kernels.cu), with the semantics of runtime/train/layers.cpp and of StepKernels
// (wallfacer/runtime/step_kernels.hpp): RMS norm forward and backward, rotary, residual add,
// GELU and SwiGLU forward and backward, embedding forward and backward, softmax cross-entropy
// fused with its gradient, the sum of squares and the AdamW update. Every pointer is device
// memory, index arrays included; everything is enqueued on `stream` and returns at once.
// Reductions (norms, log-sum-exp, sums of squares) accumulate in double.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace wallfacer::runtime::cuda {

template <typename T>
void launch_embedding_forward(const T* table, const T* pos_table, const int32_t* tokens, const int64_t* positions,
                              int64_t rows_per_batch, T* x, int64_t rows, int64_t width, cudaStream_t stream);
template <typename T>
void launch_embedding_backward(const T* dx, const int32_t* tokens, const int64_t* positions, int64_t rows_per_batch,
                               T* dtable, T* dpos_table, int64_t rows, int64_t width, cudaStream_t stream);
template <typename T>
void launch_rms_norm_forward(const T* x, const T* gain, T* y, T* rstd, int64_t rows, int64_t width,
                             cudaStream_t stream);
template <typename T>
void launch_rms_norm_backward(const T* x, const T* gain, const T* rstd, const T* dy, T* dx, T* dgain, int64_t rows,
                              int64_t width, cudaStream_t stream);
template <typename T>
void launch_rotary(T* x, const int64_t* positions, int64_t rows_per_batch, int64_t rows, int heads, int head_dim,
                   double base, bool inverse, cudaStream_t stream);
template <typename T>
void launch_add(const T* a, const T* b, T* out, int64_t count, cudaStream_t stream);
template <typename T>
void launch_gelu_forward(const T* u, T* h, int64_t count, cudaStream_t stream);
template <typename T>
void launch_gelu_backward(const T* u, const T* dh, T* du, int64_t count, cudaStream_t stream);
template <typename T>
void launch_swiglu_forward(const T* g, const T* u, T* h, int64_t count, cudaStream_t stream);
template <typename T>
void launch_swiglu_backward(const T* g, const T* u, const T* dh, T* dg, T* du, int64_t count, cudaStream_t stream);
// Per row r: loss[r] = mask[r] ? lse - logit[target] : 0 and correct[r] = 1 when the first
// largest logit is the target (masked rows only); dlogits as StepKernels::cross_entropy.
template <typename T>
void launch_cross_entropy(const T* logits, const int32_t* targets, const uint8_t* mask, double scale, T* dlogits,
                          double* loss, int32_t* correct, int64_t rows, int64_t vocab, cudaStream_t stream);
// *sum += sum_i x[i]^2 (the caller zeroes *sum).
template <typename T>
void launch_sum_squares(const T* x, int64_t count, double* sum, cudaStream_t stream);
// AdamW over [0, count): c1 and c2 are the bias corrections 1 - beta^count.
template <typename T>
void launch_adamw(T* params, const T* grads, T* m, T* v, int64_t count, double lr, double grad_scale, double beta1,
                  double beta2, double eps, double weight_decay, double c1, double c2, cudaStream_t stream);

}  // namespace wallfacer::runtime::cuda
