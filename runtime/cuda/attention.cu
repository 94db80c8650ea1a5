// Device attention kernels of the CUDA backend (device_kernels.hpp). One warp per (query row,
// query head): each lane holds head_dim/32 elements of the row, scores are warp-reduced dot
// products, and the forward keeps the online softmax (running max, sum, unnormalised output) in
// registers before merging the block's (O, lse) into the accumulator with the stable merge of
// docs/algorithms.md §1.1. The backward recomputes P = exp(S - lse) with the final lse, keeps the
// row's dQ in registers and adds dK, dV with atomics (sums over query rows and the query heads of
// a GQA group). Written for correctness: CUDA cores, no tensor cores, no shared-memory tiling.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "device_kernels.hpp"

namespace wallfacer::runtime::cuda {
namespace {

constexpr int kWarp = 32;

template <typename T>
__device__ inline T neg_inf() {
  return -INFINITY;
}

__device__ inline float to_acc(float x, float) {
  return x;
}
__device__ inline double to_acc(double x, double) {
  return x;
}
__device__ inline float to_acc(__nv_bfloat16 x, float) {
  return __bfloat162float(x);
}
__device__ inline float to_acc(__half x, float) {
  return __half2float(x);
}

__device__ inline float exp_of(float x) {
  return expf(x);
}
__device__ inline double exp_of(double x) {
  return exp(x);
}
__device__ inline float log_of(float x) {
  return logf(x);
}
__device__ inline double log_of(double x) {
  return log(x);
}
__device__ inline float log1p_of(float x) {
  return log1pf(x);
}
__device__ inline double log1p_of(double x) {
  return log1p(x);
}

template <typename Acc>
__device__ inline Acc warp_sum(Acc v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Strides and sizes shared by the kernels, resolved on the host (0 = dense already replaced).
struct Geometry {
  int64_t q_rows = 0, k_rows = 0;
  int heads = 0, head_dim = 0, group = 1, q_head_offset = 0, kv_head_offset = 0;
  int64_t q_stride = 0, kv_stride = 0, acc_stride = 0, lse_stride = 0;
  bool causal = false;
  double scale = 1;
};

Geometry geometry(const kernels::AttnShape& s, int64_t q_rows, int64_t k_rows, int64_t acc_row_stride,
                  int64_t lse_stride) {
  if (s.head_dim < 1 || s.head_dim > 8 * kWarp)
    throw std::invalid_argument("device attention kernels: head_dim " + std::to_string(s.head_dim) + " outside 1..256");
  Geometry g;
  g.q_rows = q_rows;
  g.k_rows = k_rows;
  g.heads = s.heads;
  g.head_dim = s.head_dim;
  g.group = s.group;
  g.q_head_offset = s.q_head_offset;
  g.kv_head_offset = s.kv_head_offset;
  g.q_stride = s.q_row_stride > 0 ? s.q_row_stride : int64_t(s.heads) * s.head_dim;
  g.kv_stride = s.kv_row_stride > 0 ? s.kv_row_stride : int64_t(s.kv_heads) * s.head_dim;
  g.acc_stride = acc_row_stride > 0 ? acc_row_stride : int64_t(s.heads) * s.head_dim;
  g.lse_stride = lse_stride > 0 ? lse_stride : q_rows;
  g.causal = s.causal;
  g.scale = s.scale > 0 ? s.scale : 1.0 / std::sqrt(double(s.head_dim));
  return g;
}

// The kv head that query head h (local to the block) reads, local to the stored kv heads.
__device__ inline int kv_head_of(const Geometry& g, int h) {
  return (g.q_head_offset + h) / g.group - g.kv_head_offset;
}

template <typename Tin, typename Acc, int NV>
__global__ void forward_kernel(Geometry g, const Tin* q, const Tin* k, const Tin* v, const int64_t* q_pos,
                               const int64_t* k_pos, Acc* acc_o, Acc* acc_lse) {
  const int64_t i = blockIdx.x;
  const int h = blockIdx.y;
  const int lane = threadIdx.x;
  const int kvh = kv_head_of(g, h);
  const Acc scale = Acc(g.scale);
  Acc qv[NV], o[NV];
  for (int t = 0; t < NV; ++t) {
    const int d = lane + t * kWarp;
    qv[t] = d < g.head_dim ? to_acc(q[i * g.q_stride + int64_t(h) * g.head_dim + d], Acc{}) * scale : Acc(0);
    o[t] = 0;
  }
  const int64_t qp = q_pos ? q_pos[i] : i;
  Acc m = neg_inf<Acc>(), l = 0;
  for (int64_t j = 0; j < g.k_rows; ++j) {
    const int64_t kp = k_pos ? k_pos[j] : j;
    if (g.causal && kp > qp) continue;
    const Tin* krow = k + j * g.kv_stride + int64_t(kvh) * g.head_dim;
    const Tin* vrow = v + j * g.kv_stride + int64_t(kvh) * g.head_dim;
    Acc part = 0;
    for (int t = 0; t < NV; ++t) {
      const int d = lane + t * kWarp;
      if (d < g.head_dim) part += qv[t] * to_acc(krow[d], Acc{});
    }
    const Acc s = warp_sum(part);
    const Acc m_new = s > m ? s : m;
    const Acc c = m == neg_inf<Acc>() ? Acc(0) : exp_of(m - m_new);
    const Acc p = exp_of(s - m_new);
    l = l * c + p;
    for (int t = 0; t < NV; ++t) {
      const int d = lane + t * kWarp;
      o[t] = o[t] * c + (d < g.head_dim ? p * to_acc(vrow[d], Acc{}) : Acc(0));
    }
    m = m_new;
  }
  if (l == Acc(0)) return;  // no visible key: the accumulator stays as it is
  const Acc lse_b = m + log_of(l);
  Acc* lse_a = acc_lse + int64_t(h) * g.lse_stride + i;
  Acc* orow = acc_o + i * g.acc_stride + int64_t(h) * g.head_dim;
  const Acc la = *lse_a;
  Acc wa = 0, wb = 1, lse = lse_b;
  if (la != neg_inf<Acc>()) {
    const Acc mx = la > lse_b ? la : lse_b;
    const Acc diff = la > lse_b ? la - lse_b : lse_b - la;
    lse = mx + log1p_of(exp_of(-diff));
    wa = exp_of(la - lse);
    wb = exp_of(lse_b - lse);
  }
  for (int t = 0; t < NV; ++t) {
    const int d = lane + t * kWarp;
    if (d < g.head_dim) orow[d] = (wa == Acc(0) ? Acc(0) : wa * orow[d]) + wb * (o[t] / l);
  }
  __syncwarp();
  if (lane == 0) *lse_a = lse;
}

template <typename Tin, typename Acc, int NV>
__global__ void backward_kernel(Geometry g, const Tin* q, const Tin* k, const Tin* v, const Tin* dO, const Acc* lse,
                                const Acc* D, int64_t lse_stride, const int64_t* q_pos, const int64_t* k_pos, Acc* dq,
                                Acc* dk, Acc* dv) {
  const int64_t i = blockIdx.x;
  const int h = blockIdx.y;
  const int lane = threadIdx.x;
  const int kvh = kv_head_of(g, h);
  const Acc row_lse = lse[int64_t(h) * lse_stride + i];
  if (row_lse == neg_inf<Acc>()) return;
  const Acc row_D = D[int64_t(h) * lse_stride + i];
  const Acc scale = Acc(g.scale);
  Acc qv[NV], dov[NV], dqv[NV];
  const int64_t qoff = i * g.q_stride + int64_t(h) * g.head_dim;
  for (int t = 0; t < NV; ++t) {
    const int d = lane + t * kWarp;
    qv[t] = d < g.head_dim ? to_acc(q[qoff + d], Acc{}) : Acc(0);
    dov[t] = d < g.head_dim ? to_acc(dO[qoff + d], Acc{}) : Acc(0);
    dqv[t] = 0;
  }
  const int64_t qp = q_pos ? q_pos[i] : i;
  for (int64_t j = 0; j < g.k_rows; ++j) {
    const int64_t kp = k_pos ? k_pos[j] : j;
    if (g.causal && kp > qp) continue;
    const int64_t koff = j * g.kv_stride + int64_t(kvh) * g.head_dim;
    Acc s_part = 0, dp_part = 0;
    for (int t = 0; t < NV; ++t) {
      const int d = lane + t * kWarp;
      if (d < g.head_dim) {
        s_part += qv[t] * to_acc(k[koff + d], Acc{});
        dp_part += dov[t] * to_acc(v[koff + d], Acc{});
      }
    }
    const Acc s = warp_sum(s_part) * scale;
    const Acc dp = warp_sum(dp_part);
    const Acc p = exp_of(s - row_lse);
    const Acc ds = p * (dp - row_D) * scale;
    for (int t = 0; t < NV; ++t) {
      const int d = lane + t * kWarp;
      if (d < g.head_dim) {
        dqv[t] += ds * to_acc(k[koff + d], Acc{});
        atomicAdd(dk + koff + d, ds * qv[t]);
        atomicAdd(dv + koff + d, p * dov[t]);
      }
    }
  }
  for (int t = 0; t < NV; ++t) {
    const int d = lane + t * kWarp;
    if (d < g.head_dim) dq[qoff + d] += dqv[t];
  }
}

// D[h][i] = sum_d dO[i][h][d] * O[i][h][d], summed in double.
template <typename To, typename Tdo, typename Acc>
__global__ void prep_kernel(const To* o, const Tdo* dO, int heads, int head_dim, int64_t row_stride, Acc* D,
                            int64_t lse_stride) {
  const int64_t i = blockIdx.x;
  const int h = blockIdx.y;
  double part = 0;
  const int64_t off = i * row_stride + int64_t(h) * head_dim;
  for (int d = threadIdx.x; d < head_dim; d += kWarp)
    part += double(to_acc(o[off + d], Acc{})) * double(to_acc(dO[off + d], Acc{}));
  part = warp_sum(part);
  if (threadIdx.x == 0) D[int64_t(h) * lse_stride + i] = Acc(part);
}

template <typename T>
__global__ void merge_kernel(T* o_a, T* lse_a, const T* o_b, const T* lse_b, int head_dim, int64_t row_stride,
                             int64_t lse_stride) {
  const int64_t i = blockIdx.x;
  const int h = blockIdx.y;
  const T lb = lse_b[int64_t(h) * lse_stride + i];
  if (lb == neg_inf<T>()) return;
  T* la_ptr = lse_a + int64_t(h) * lse_stride + i;
  const T la = *la_ptr;
  const int64_t off = i * row_stride + int64_t(h) * head_dim;
  T wa = 0, wb = 1, lse = lb;
  if (la != neg_inf<T>()) {
    const T mx = la > lb ? la : lb;
    const T diff = la > lb ? la - lb : lb - la;
    lse = mx + log1p_of(exp_of(-diff));
    wa = exp_of(la - lse);
    wb = exp_of(lb - lse);
  }
  for (int d = threadIdx.x; d < head_dim; d += kWarp)
    o_a[off + d] = (wa == T(0) ? T(0) : wa * o_a[off + d]) + wb * o_b[off + d];
  __syncwarp();
  if (threadIdx.x == 0) *la_ptr = lse;
}

template <typename T>
__global__ void fill_kernel(T* dst, size_t count, T value) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = value;
}

template <typename T>
__global__ void accumulate_kernel(T* dst, const T* src, size_t count) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x)
    dst[i] += src[i];
}

template <typename H>
__global__ void to_half_kernel(const float* src, H* dst, size_t count) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    if constexpr (sizeof(H) == 2 && std::is_same_v<H, __nv_bfloat16>)
      dst[i] = __float2bfloat16_rn(src[i]);
    else
      dst[i] = __float2half_rn(src[i]);
  }
}

template <typename H>
__global__ void from_half_kernel(const H* src, float* dst, size_t count) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = to_acc(src[i], float{});
}

void check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": kernel launch failed: " + cudaGetErrorString(e));
}

dim3 row_grid(int64_t rows, int heads) {
  return dim3(unsigned(rows), unsigned(heads));
}

unsigned flat_blocks(size_t count) {
  const size_t blocks = (count + 255) / 256;
  return unsigned(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

// Calls body.template operator()<NV>() with the per-lane element count for head_dim.
template <typename Body>
void with_lanes(int head_dim, Body&& body) {
  if (head_dim <= kWarp)
    body(std::integral_constant<int, 1>{});
  else if (head_dim <= 2 * kWarp)
    body(std::integral_constant<int, 2>{});
  else if (head_dim <= 4 * kWarp)
    body(std::integral_constant<int, 4>{});
  else
    body(std::integral_constant<int, 8>{});
}

template <typename Tin, typename Acc>
void forward_any(const Tin* q, const Tin* k, const Tin* v, const int64_t* q_pos, const int64_t* k_pos, int64_t q_rows,
                 int64_t k_rows, const kernels::AttnShape& shape, Acc* acc_o, Acc* acc_lse, int64_t acc_row_stride,
                 int64_t lse_stride, cudaStream_t stream) {
  if (q_rows == 0 || k_rows == 0 || shape.heads == 0) return;
  const Geometry g = geometry(shape, q_rows, k_rows, acc_row_stride, lse_stride);
  with_lanes(shape.head_dim, [&](auto nv) {
    forward_kernel<Tin, Acc, decltype(nv)::value>
        <<<row_grid(q_rows, shape.heads), kWarp, 0, stream>>>(g, q, k, v, q_pos, k_pos, acc_o, acc_lse);
  });
  check_launch("attention forward");
}

template <typename Tin, typename Acc>
void backward_any(const Tin* q, const Tin* k, const Tin* v, const Tin* dO, const Acc* lse, const Acc* D,
                  int64_t lse_stride, const int64_t* q_pos, const int64_t* k_pos, int64_t q_rows, int64_t k_rows,
                  const kernels::AttnShape& shape, Acc* dq, Acc* dk, Acc* dv, cudaStream_t stream) {
  if (q_rows == 0 || k_rows == 0 || shape.heads == 0) return;
  const Geometry g = geometry(shape, q_rows, k_rows, 0, lse_stride);
  const int64_t ls = lse_stride > 0 ? lse_stride : q_rows;
  with_lanes(shape.head_dim, [&](auto nv) {
    backward_kernel<Tin, Acc, decltype(nv)::value>
        <<<row_grid(q_rows, shape.heads), kWarp, 0, stream>>>(g, q, k, v, dO, lse, D, ls, q_pos, k_pos, dq, dk, dv);
  });
  check_launch("attention backward");
}

}  // namespace

template <typename T>
void launch_forward(const kernels::QueryBlock<T>& q, const kernels::KeyBlock<T>& kv, const kernels::AttnShape& shape,
                    T* acc_o, T* acc_lse, int64_t acc_row_stride, int64_t lse_stride, cudaStream_t stream) {
  forward_any<T, T>(q.q, kv.k, kv.v, q.pos, kv.pos, q.rows, kv.rows, shape, acc_o, acc_lse, acc_row_stride, lse_stride,
                    stream);
}

template <typename T>
void launch_backward(const kernels::QueryBlock<T>& q, const kernels::KeyBlock<T>& kv,
                     const kernels::BackwardInputs<T>& in, const kernels::AttnShape& shape, T* dq, T* dk, T* dv,
                     cudaStream_t stream) {
  backward_any<T, T>(q.q, kv.k, kv.v, in.dO, in.lse, in.D, in.lse_stride, q.pos, kv.pos, q.rows, kv.rows, shape, dq, dk,
                     dv, stream);
}

template <typename T>
void launch_backward_prep(const T* o, const T* dO, int64_t rows, int heads, int head_dim, int64_t row_stride, T* D,
                          int64_t lse_stride, cudaStream_t stream) {
  if (rows == 0 || heads == 0) return;
  prep_kernel<T, T, T><<<row_grid(rows, heads), kWarp, 0, stream>>>(
      o, dO, heads, head_dim, row_stride > 0 ? row_stride : int64_t(heads) * head_dim, D,
      lse_stride > 0 ? lse_stride : rows);
  check_launch("backward prep");
}

template <typename T>
void launch_merge(T* o_a, T* lse_a, const T* o_b, const T* lse_b, int64_t rows, int heads, int head_dim,
                  int64_t row_stride, int64_t lse_stride, cudaStream_t stream) {
  if (rows == 0 || heads == 0) return;
  merge_kernel<T><<<row_grid(rows, heads), kWarp, 0, stream>>>(o_a, lse_a, o_b, lse_b, head_dim,
                                                               row_stride > 0 ? row_stride : int64_t(heads) * head_dim,
                                                               lse_stride > 0 ? lse_stride : rows);
  check_launch("merge partial");
}

template <typename T>
void launch_fill(T* dst, size_t count, T value, cudaStream_t stream) {
  if (count == 0) return;
  fill_kernel<T><<<flat_blocks(count), 256, 0, stream>>>(dst, count, value);
  check_launch("fill");
}

template <typename T>
void launch_accumulate(T* dst, const T* src, size_t count, cudaStream_t stream) {
  if (count == 0) return;
  accumulate_kernel<T><<<flat_blocks(count), 256, 0, stream>>>(dst, src, count);
  check_launch("accumulate");
}

#define WF_INSTANTIATE(T)                                                                                           \
  template void launch_forward<T>(const kernels::QueryBlock<T>&, const kernels::KeyBlock<T>&,                       \
                                  const kernels::AttnShape&, T*, T*, int64_t, int64_t, cudaStream_t);               \
  template void launch_backward<T>(const kernels::QueryBlock<T>&, const kernels::KeyBlock<T>&,                      \
                                   const kernels::BackwardInputs<T>&, const kernels::AttnShape&, T*, T*, T*,        \
                                   cudaStream_t);                                                                   \
  template void launch_backward_prep<T>(const T*, const T*, int64_t, int, int, int64_t, T*, int64_t, cudaStream_t); \
  template void launch_merge<T>(T*, T*, const T*, const T*, int64_t, int, int, int64_t, int64_t, cudaStream_t);     \
  template void launch_fill<T>(T*, size_t, T, cudaStream_t);                                                        \
  template void launch_accumulate<T>(T*, const T*, size_t, cudaStream_t);
WF_INSTANTIATE(float)
WF_INSTANTIATE(double)
#undef WF_INSTANTIATE

void launch_forward_half(HalfType type, const uint16_t* q, const uint16_t* k, const uint16_t* v, const int64_t* q_pos,
                         const int64_t* k_pos, int64_t q_rows, int64_t k_rows, const kernels::AttnShape& shape,
                         float* o, float* lse, cudaStream_t stream) {
  // A fresh accumulator: O = 0 and lse = -inf, so the merge writes the block's result.
  launch_fill<float>(o, size_t(q_rows) * size_t(shape.heads) * size_t(shape.head_dim), 0.0f, stream);
  launch_fill<float>(lse, size_t(q_rows) * size_t(shape.heads), -INFINITY, stream);
  if (type == HalfType::BF16)
    forward_any<__nv_bfloat16, float>(
        reinterpret_cast<const __nv_bfloat16*>(q), reinterpret_cast<const __nv_bfloat16*>(k),
        reinterpret_cast<const __nv_bfloat16*>(v), q_pos, k_pos, q_rows, k_rows, shape, o, lse, 0, 0, stream);
  else
    forward_any<__half, float>(reinterpret_cast<const __half*>(q), reinterpret_cast<const __half*>(k),
                               reinterpret_cast<const __half*>(v), q_pos, k_pos, q_rows, k_rows, shape, o, lse, 0, 0,
                               stream);
}

void launch_backward_half(HalfType type, const uint16_t* q, const uint16_t* k, const uint16_t* v, const uint16_t* dO,
                          const float* lse, const float* D, const int64_t* q_pos, const int64_t* k_pos, int64_t q_rows,
                          int64_t k_rows, const kernels::AttnShape& shape, float* dq, float* dk, float* dv,
                          cudaStream_t stream) {
  if (type == HalfType::BF16)
    backward_any<__nv_bfloat16, float>(
        reinterpret_cast<const __nv_bfloat16*>(q), reinterpret_cast<const __nv_bfloat16*>(k),
        reinterpret_cast<const __nv_bfloat16*>(v), reinterpret_cast<const __nv_bfloat16*>(dO), lse, D, 0, q_pos, k_pos,
        q_rows, k_rows, shape, dq, dk, dv, stream);
  else
    backward_any<__half, float>(reinterpret_cast<const __half*>(q), reinterpret_cast<const __half*>(k),
                                reinterpret_cast<const __half*>(v), reinterpret_cast<const __half*>(dO), lse, D, 0,
                                q_pos, k_pos, q_rows, k_rows, shape, dq, dk, dv, stream);
}

void launch_backward_prep_half(HalfType type, const float* o, const uint16_t* dO, int64_t rows, int heads, int head_dim,
                               float* D, cudaStream_t stream) {
  if (rows == 0 || heads == 0) return;
  const int64_t stride = int64_t(heads) * head_dim;
  if (type == HalfType::BF16)
    prep_kernel<float, __nv_bfloat16, float><<<row_grid(rows, heads), kWarp, 0, stream>>>(
        o, reinterpret_cast<const __nv_bfloat16*>(dO), heads, head_dim, stride, D, rows);
  else
    prep_kernel<float, __half, float><<<row_grid(rows, heads), kWarp, 0, stream>>>(
        o, reinterpret_cast<const __half*>(dO), heads, head_dim, stride, D, rows);
  check_launch("backward prep (16-bit)");
}

void launch_to_half(HalfType type, const float* src, uint16_t* dst, size_t count, cudaStream_t stream) {
  if (count == 0) return;
  if (type == HalfType::BF16)
    to_half_kernel<__nv_bfloat16>
        <<<flat_blocks(count), 256, 0, stream>>>(src, reinterpret_cast<__nv_bfloat16*>(dst), count);
  else
    to_half_kernel<__half><<<flat_blocks(count), 256, 0, stream>>>(src, reinterpret_cast<__half*>(dst), count);
  check_launch("round to 16 bits");
}

void launch_from_half(HalfType type, const uint16_t* src, float* dst, size_t count, cudaStream_t stream) {
  if (count == 0) return;
  if (type == HalfType::BF16)
    from_half_kernel<__nv_bfloat16>
        <<<flat_blocks(count), 256, 0, stream>>>(reinterpret_cast<const __nv_bfloat16*>(src), dst, count);
  else
    from_half_kernel<__half><<<flat_blocks(count), 256, 0, stream>>>(reinterpret_cast<const __half*>(src), dst, count);
  check_launch("widen 16 bits");
}

}  // namespace wallfacer::runtime::cuda
