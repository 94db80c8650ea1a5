// A tensor-core forward for 16-bit inputs (bf16 or fp16, fp32 accumulation) through WMMA, in the
// FlashAttention-2 order: a block of 4 warps owns 64 query rows and walks the keys in tiles of 64;
// S = Q K^T and O += P V run on tensor cores (16x16x16 fragments), the online softmax runs on
// CUDA cores over S in shared memory, P is rounded to the input type before P V (its row sums are
// taken over the rounded values, so O / l stays consistent). O is kept in shared memory in fp32,
// because WMMA does not say which accumulator element holds which row, and the softmax rescales
// rows. head_dim 64 or 128; other sizes use the CUDA-core kernel of attention.cu. Superseded by
// the mma.sync forward of flash_forward.cu, kept for comparison (wallfacer_gpu_kernels
// --forward wmma).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "device_kernels.hpp"

namespace wallfacer::runtime::cuda {
namespace {

using namespace nvcuda;

constexpr int kBlockM = 64;  // query rows per block (16 per warp)
constexpr int kBlockN = 64;  // keys per tile
constexpr int kThreads = 128;

template <typename H>
__device__ inline H to_half(float x);
template <>
__device__ inline __nv_bfloat16 to_half<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ inline __half to_half<__half>(float x) {
  return __float2half_rn(x);
}
__device__ inline float widen(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
__device__ inline float widen(__half x) {
  return __half2float(x);
}

struct WmmaGeometry {
  int64_t q_rows = 0, k_rows = 0;
  int heads = 0, group = 1, q_head_offset = 0, kv_head_offset = 0;
  int64_t q_stride = 0, kv_stride = 0;
  bool causal = false;
  float scale = 1;
};

template <int D>
constexpr size_t shared_bytes() {
  return size_t(kBlockM * D + 2 * kBlockN * D + kBlockM * kBlockN) * 2 +
         size_t(kBlockM * kBlockN + kBlockM * D + 2 * kBlockM) * 4;
}

// One tile of scores for a warp's 16 rows: S = Q K^T into sS (fp32, row-major, ld kBlockN).
template <typename H, int D>
__device__ void warp_scores(const H* sQ, const H* sK, float* sS, int warp) {
  for (int j = 0; j < kBlockN / 16; ++j) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
    wmma::fill_fragment(c, 0.0f);
    for (int kk = 0; kk < D / 16; ++kk) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, H, wmma::row_major> a;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, H, wmma::col_major> b;
      wmma::load_matrix_sync(a, sQ + warp * 16 * D + kk * 16, D);
      wmma::load_matrix_sync(b, sK + j * 16 * D + kk * 16, D);  // K row-major is K^T column-major
      wmma::mma_sync(c, a, b, c);
    }
    wmma::store_matrix_sync(sS + warp * 16 * kBlockN + j * 16, c, kBlockN, wmma::mem_row_major);
  }
}

// O (fp32 in sO, ld D) += P (sP, ld kBlockN) V (sV, ld D) for a warp's 16 rows.
template <typename H, int D>
__device__ void warp_accumulate(const H* sP, const H* sV, float* sO, int warp) {
  for (int j = 0; j < D / 16; ++j) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
    wmma::load_matrix_sync(c, sO + warp * 16 * D + j * 16, D, wmma::mem_row_major);
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, H, wmma::row_major> a;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, H, wmma::row_major> b;
      wmma::load_matrix_sync(a, sP + warp * 16 * kBlockN + kk * 16, kBlockN);
      wmma::load_matrix_sync(b, sV + kk * 16 * D + j * 16, D);
      wmma::mma_sync(c, a, b, c);
    }
    wmma::store_matrix_sync(sO + warp * 16 * D + j * 16, c, D, wmma::mem_row_major);
  }
}

template <typename H, int D>
__global__ void __launch_bounds__(kThreads)
    wmma_forward_kernel(WmmaGeometry g, const H* q, const H* k, const H* v, const int64_t* q_pos, const int64_t* k_pos,
                        float* o, float* lse) {
  extern __shared__ __align__(128) unsigned char smem[];
  H* sQ = reinterpret_cast<H*>(smem);
  H* sK = sQ + kBlockM * D;
  H* sV = sK + kBlockN * D;
  H* sP = sV + kBlockN * D;
  float* sS = reinterpret_cast<float*>(sP + kBlockM * kBlockN);
  float* sO = sS + kBlockM * kBlockN;
  float* sM = sO + kBlockM * D;
  float* sL = sM + kBlockM;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t q0 = int64_t(blockIdx.x) * kBlockM;
  const int h = blockIdx.y;
  const int kvh = (g.q_head_offset + h) / g.group - g.kv_head_offset;
  const H zero = to_half<H>(0.0f);
  for (int idx = tid; idx < kBlockM * D; idx += kThreads) {
    const int64_t i = q0 + idx / D;
    sQ[idx] = i < g.q_rows ? q[i * g.q_stride + int64_t(h) * D + idx % D] : zero;
    sO[idx] = 0;
  }
  for (int r = tid; r < kBlockM; r += kThreads) {
    sM[r] = -INFINITY;
    sL[r] = 0;
  }
  __syncthreads();

  // With contiguous positions the causal mask ends the key walk at the block's last query.
  int64_t n_end = g.k_rows;
  if (g.causal && q_pos == nullptr && k_pos == nullptr && q0 + kBlockM < n_end) n_end = q0 + kBlockM;
  // Softmax work: two lanes per row, 32 columns each.
  const int row = warp * 16 + lane / 2, half = lane % 2;
  const int64_t i = q0 + row;
  const int64_t qp = i < g.q_rows ? (q_pos ? q_pos[i] : i) : 0;
  for (int64_t n0 = 0; n0 < n_end; n0 += kBlockN) {
    for (int idx = tid; idx < kBlockN * D; idx += kThreads) {
      const int64_t j = n0 + idx / D;
      const int64_t off = j * g.kv_stride + int64_t(kvh) * D + idx % D;
      sK[idx] = j < g.k_rows ? k[off] : zero;
      sV[idx] = j < g.k_rows ? v[off] : zero;
    }
    __syncthreads();
    warp_scores<H, D>(sQ, sK, sS, warp);
    __syncwarp();
    float* srow = sS + row * kBlockN;
    float mx = -INFINITY;
    for (int c = half * 32; c < half * 32 + 32; ++c) {
      const int64_t j = n0 + c;
      const bool live = i < g.q_rows && j < g.k_rows && (!g.causal || (k_pos ? k_pos[j] : j) <= qp);
      const float s = live ? srow[c] * g.scale : -INFINITY;
      srow[c] = s;
      mx = fmaxf(mx, s);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    const float m_old = sM[row];
    const float m_new = fmaxf(m_old, mx);
    float sum = 0;
    for (int c = half * 32; c < half * 32 + 32; ++c) {
      const float s = srow[c];
      const H p = to_half<H>(s == -INFINITY ? 0.0f : __expf(s - m_new));
      sP[row * kBlockN + c] = p;
      sum += widen(p);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    const float factor = m_old == -INFINITY ? 0.0f : __expf(m_old - m_new);
    for (int d = half * (D / 2); d < (half + 1) * (D / 2); ++d)
      sO[row * D + d] *= factor;
    __syncwarp();
    if (half == 0) {
      sL[row] = sL[row] * factor + sum;
      sM[row] = m_new;
    }
    __syncwarp();
    warp_accumulate<H, D>(sP, sV, sO, warp);
    __syncthreads();  // sK and sV are overwritten next
  }
  for (int idx = tid; idx < kBlockM * D; idx += kThreads) {
    const int r = idx / D;
    const int64_t qi = q0 + r;
    if (qi < g.q_rows) o[qi * int64_t(g.heads) * D + int64_t(h) * D + idx % D] = sL[r] > 0 ? sO[idx] / sL[r] : 0.0f;
  }
  for (int r = tid; r < kBlockM; r += kThreads) {
    const int64_t qi = q0 + r;
    if (qi < g.q_rows) lse[int64_t(h) * g.q_rows + qi] = sL[r] > 0 ? sM[r] + logf(sL[r]) : -INFINITY;
  }
}

template <typename H, int D>
void launch(const WmmaGeometry& g, const void* q, const void* k, const void* v, const int64_t* q_pos,
            const int64_t* k_pos, float* o, float* lse, cudaStream_t stream) {
  constexpr size_t bytes = shared_bytes<D>();
  auto kernel = wmma_forward_kernel<H, D>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("tensor-core forward: shared memory opt-in failed: ") + cudaGetErrorString(e));
  const dim3 grid(unsigned((g.q_rows + kBlockM - 1) / kBlockM), unsigned(g.heads));
  kernel<<<grid, kThreads, bytes, stream>>>(g, static_cast<const H*>(q), static_cast<const H*>(k),
                                            static_cast<const H*>(v), q_pos, k_pos, o, lse);
  e = cudaGetLastError();
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("tensor-core forward: kernel launch failed: ") + cudaGetErrorString(e));
}

}  // namespace

bool launch_forward_half_wmma(HalfType type, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                              const int64_t* q_pos, const int64_t* k_pos, int64_t q_rows, int64_t k_rows,
                              const kernels::AttnShape& shape, float* o, float* lse, cudaStream_t stream) {
  if (shape.head_dim != 64 && shape.head_dim != 128) return false;
  if (q_rows == 0 || shape.heads == 0) return true;
  WmmaGeometry g;
  g.q_rows = q_rows;
  g.k_rows = k_rows;
  g.heads = shape.heads;
  g.group = shape.group;
  g.q_head_offset = shape.q_head_offset;
  g.kv_head_offset = shape.kv_head_offset;
  g.q_stride = shape.q_row_stride > 0 ? shape.q_row_stride : int64_t(shape.heads) * shape.head_dim;
  g.kv_stride = shape.kv_row_stride > 0 ? shape.kv_row_stride : int64_t(shape.kv_heads) * shape.head_dim;
  g.causal = shape.causal;
  g.scale = float(shape.scale > 0 ? shape.scale : 1.0 / std::sqrt(double(shape.head_dim)));
  const bool bf16 = type == HalfType::BF16;
  if (shape.head_dim == 64) {
    if (bf16)
      launch<__nv_bfloat16, 64>(g, q, k, v, q_pos, k_pos, o, lse, stream);
    else
      launch<__half, 64>(g, q, k, v, q_pos, k_pos, o, lse, stream);
  } else {
    if (bf16)
      launch<__nv_bfloat16, 128>(g, q, k, v, q_pos, k_pos, o, lse, stream);
    else
      launch<__half, 128>(g, q, k, v, q_pos, k_pos, o, lse, stream);
  }
  return true;
}

}  // namespace wallfacer::runtime::cuda
