// Internal to the CUDA backend: host-side launchers of the device kernels in attention.cu. The
// attention kernels follow attention_kernels.hpp exactly (layouts, strides, masks by global
// position, GQA, the (O, lse) accumulator and its stable merge); every pointer is device memory,
// positions included. Tin is the element type of the inputs (float, double, or a 16-bit type for
// the low-precision entry points), Acc the type of accumulators and outputs.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include <wallfacer/runtime/attention_kernels.hpp>

namespace wallfacer::runtime::cuda {

// The 16-bit input types of the low-precision kernels (bf16 and fp16, fp32 accumulation).
enum class HalfType { BF16, FP16 };

template <typename T>
void launch_forward(const kernels::QueryBlock<T>& q, const kernels::KeyBlock<T>& kv, const kernels::AttnShape& shape,
                    T* acc_o, T* acc_lse, int64_t acc_row_stride, int64_t lse_stride, cudaStream_t stream);
template <typename T>
void launch_backward(const kernels::QueryBlock<T>& q, const kernels::KeyBlock<T>& kv,
                     const kernels::BackwardInputs<T>& in, const kernels::AttnShape& shape, T* dq, T* dk, T* dv,
                     cudaStream_t stream);
template <typename T>
void launch_backward_prep(const T* o, const T* dO, int64_t rows, int heads, int head_dim, int64_t row_stride, T* D,
                          int64_t lse_stride, cudaStream_t stream);
template <typename T>
void launch_merge(T* o_a, T* lse_a, const T* o_b, const T* lse_b, int64_t rows, int heads, int head_dim,
                  int64_t row_stride, int64_t lse_stride, cudaStream_t stream);
template <typename T>
void launch_fill(T* dst, size_t count, T value, cudaStream_t stream);
template <typename T>
void launch_accumulate(T* dst, const T* src, size_t count, cudaStream_t stream);

// Low precision: q, k, v, dO in bf16 or fp16 (raw 16-bit words), O, lse, D, dQ, dK, dV in fp32.
// The forward writes a fresh (O, lse) (the accumulator starts empty); the backward adds into dQ,
// dK, dV, which the caller zeroes. Positions may be null (0 .. rows-1).
void launch_forward_half(HalfType type, const uint16_t* q, const uint16_t* k, const uint16_t* v, const int64_t* q_pos,
                         const int64_t* k_pos, int64_t q_rows, int64_t k_rows, const kernels::AttnShape& shape,
                         float* o, float* lse, cudaStream_t stream);
void launch_backward_half(HalfType type, const uint16_t* q, const uint16_t* k, const uint16_t* v, const uint16_t* dO,
                          const float* lse, const float* D, const int64_t* q_pos, const int64_t* k_pos, int64_t q_rows,
                          int64_t k_rows, const kernels::AttnShape& shape, float* dq, float* dk, float* dv,
                          cudaStream_t stream);
// The same forward on tensor cores through mma.sync (flash_forward.cu), for head_dim 64 and 128
// with rows and heads on 16-byte boundaries; returns false (and does nothing) otherwise.
bool launch_forward_half_tensor_cores(HalfType type, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                                      const int64_t* q_pos, const int64_t* k_pos, int64_t q_rows, int64_t k_rows,
                                      const kernels::AttnShape& shape, float* o, float* lse, cudaStream_t stream);
// The earlier tensor-core forward through WMMA (attention_wmma.cu), head_dim 64 and 128, kept for
// comparison; returns false for other head dims.
bool launch_forward_half_wmma(HalfType type, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                              const int64_t* q_pos, const int64_t* k_pos, int64_t q_rows, int64_t k_rows,
                              const kernels::AttnShape& shape, float* o, float* lse, cudaStream_t stream);
// The backward on tensor cores (flash_backward.cu), same conditions as the forward: adds into dQ
// (atomics), dK and dV (each key block and kv head owned by one thread block); returns false
// (and does nothing) where the conditions do not hold.
bool launch_backward_half_tensor_cores(HalfType type, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                                       const uint16_t* dO, const float* lse, const float* D, const int64_t* q_pos,
                                       const int64_t* k_pos, int64_t q_rows, int64_t k_rows,
                                       const kernels::AttnShape& shape, float* dq, float* dk, float* dv,
                                       cudaStream_t stream);
// D = rowsum(dO * O) with dO in 16 bits and O in fp32.
void launch_backward_prep_half(HalfType type, const float* o, const uint16_t* dO, int64_t rows, int heads, int head_dim,
                               float* D, cudaStream_t stream);
// Rounds fp32 values to bf16 or fp16 words (round to nearest even), and back.
void launch_to_half(HalfType type, const float* src, uint16_t* dst, size_t count, cudaStream_t stream);
void launch_from_half(HalfType type, const uint16_t* src, float* dst, size_t count, cudaStream_t stream);

}  // namespace wallfacer::runtime::cuda
