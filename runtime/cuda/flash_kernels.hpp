// Internal to the tensor-core kernels (flash_forward.cu, flash_backward.cu): the geometry they
// take from an AttnShape, the conditions under which they run (head_dim 64 or 128, rows and heads
// starting on 16-byte boundaries, as cp.async needs), and the check of their CUDA calls (these
// files build as C++17 device code, without the backend's C++20 headers and its WF_CUDA_CHECK).
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include <wallfacer/runtime/attention_kernels.hpp>

namespace wallfacer::runtime::cuda {

struct FlashGeometry {
  int64_t q_rows = 0, k_rows = 0;
  int heads = 0, kv_heads = 0, group = 1, q_head_offset = 0, kv_head_offset = 0;
  int64_t q_stride = 0, kv_stride = 0;  // input rows (elements)
  int64_t o_stride = 0;                 // O, dQ rows: heads * head_dim (dense)
  int64_t dkv_stride = 0;               // dK, dV rows: kv_heads * head_dim (dense)
  int64_t lse_stride = 0;               // between heads of lse and D: q_rows
  bool causal = false;
  float scale = 1, scale_log2 = 1;  // softmax scale, and the same times log2(e)
};

inline FlashGeometry flash_geometry(const kernels::AttnShape& shape, int64_t q_rows, int64_t k_rows) {
  FlashGeometry g;
  g.q_rows = q_rows;
  g.k_rows = k_rows;
  g.heads = shape.heads;
  g.kv_heads = shape.kv_heads;
  g.group = shape.group;
  g.q_head_offset = shape.q_head_offset;
  g.kv_head_offset = shape.kv_head_offset;
  g.q_stride = shape.q_row_stride > 0 ? shape.q_row_stride : int64_t(shape.heads) * shape.head_dim;
  g.kv_stride = shape.kv_row_stride > 0 ? shape.kv_row_stride : int64_t(shape.kv_heads) * shape.head_dim;
  g.o_stride = int64_t(shape.heads) * shape.head_dim;
  g.dkv_stride = int64_t(shape.kv_heads) * shape.head_dim;
  g.lse_stride = q_rows;
  g.causal = shape.causal;
  const double scale = shape.scale > 0 ? shape.scale : 1.0 / std::sqrt(double(shape.head_dim));
  g.scale = float(scale);
  g.scale_log2 = float(scale * 1.4426950408889634);
  return g;
}

// The tensor-core kernels copy 16-byte chunks: every row and head must start on such a boundary.
inline bool flash_supported(const kernels::AttnShape& shape, const void* q, const void* k, const void* v,
                            const void* dO = nullptr) {
  if (shape.head_dim != 64 && shape.head_dim != 128) return false;
  if (shape.group < 1 || shape.heads < 0 || shape.kv_heads < 0) return false;
  if (shape.q_row_stride % 8 != 0 || shape.kv_row_stride % 8 != 0) return false;
  for (const void* p : {q, k, v, dO})
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

// The calling rank for error messages (cuda_backend.cpp).
int& error_rank();

inline void check_flash(cudaError_t e, const char* file, int line, const char* call) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": rank " + std::to_string(error_rank()) +
                             ": " + call + " failed: " + cudaGetErrorString(e));
}
#define WF_FLASH_CHECK(call) ::wallfacer::runtime::cuda::check_flash((call), __FILE__, __LINE__, #call)

}  // namespace wallfacer::runtime::cuda
