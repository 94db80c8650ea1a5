// The tensor-core forward for 16-bit inputs (bf16 or fp16, fp32 accumulation), FlashAttention-2
// style on mma.sync.m16n8k16: a block of 8 warps owns 128 query rows (16 per warp, Q in registers
// for the whole walk) and walks the keys in tiles of 64, brought into swizzled shared memory by
// cp.async two tiles deep, so the next tile loads while this one is computed. S = Q K^T and
// O += P V stay in registers (P goes from the accumulators of S into the A operand of P V without
// leaving them), the online softmax runs on the accumulators in base 2 with the scale folded in.
// Under the causal mask with contiguous positions the walk ends at the block's last query and only
// tiles crossing the diagonal test each element; with explicit positions every element is tested.
// Index arithmetic: flash_layout.hpp (checked on the CPU by tests/cuda/flash_layout_test.cpp).
#include <cmath>

#include "device_kernels.hpp"
#include "flash_kernels.hpp"
#include "flash_mma.cuh"

namespace wallfacer::runtime::cuda {
namespace {

using namespace flash;

// Masks (to -inf) the scores of one warp's 16 x kBlockN tile that fall outside the keys or the
// causal mask; row_pos are the thread's two query positions.
template <int BN>
__device__ __forceinline__ void mask_scores(float (&s)[BN / 8][4], const FlashGeometry& g, const int64_t* k_pos,
                                            int64_t n0, int lane, const int64_t (&row_pos)[2]) {
#pragma unroll
  for (int j = 0; j < BN / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const Coord c = mma_c_coord(lane, e);
      const int64_t key = n0 + j * 8 + c.col;
      bool live = key < g.k_rows;
      if (live && g.causal) live = (k_pos ? k_pos[key] : key) <= row_pos[e >> 1];
      if (!live) s[j][e] = -INFINITY;
    }
}

// One row pair of the online softmax: turns the thread's scores into probabilities against the
// new running max, and rescales the running sum and the output accumulators.
template <int BN, int D>
__device__ __forceinline__ void online_softmax(float (&s)[BN / 8][4], float (&acc)[D / 8][4], float (&m_run)[2],
                                               float (&l_run)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = m_run[r];
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
      mx = fmaxf(mx, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
    mx = quad_max(mx);
    // A row with no live key so far keeps max -inf; 0 then stands in so that exp2 gives 0, not NaN.
    const float base = mx == -INFINITY ? 0.0f : mx;
    const float factor = fast_exp2(m_run[r] - base);
    m_run[r] = mx;
    float sum = 0;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      s[j][2 * r] = fast_exp2(s[j][2 * r] - base);
      s[j][2 * r + 1] = fast_exp2(s[j][2 * r + 1] - base);
      sum += s[j][2 * r] + s[j][2 * r + 1];
    }
    l_run[r] = l_run[r] * factor + sum;  // the thread's share; the quad's shares are summed at the end
#pragma unroll
    for (int d = 0; d < D / 8; ++d) {
      acc[d][2 * r] *= factor;
      acc[d][2 * r + 1] *= factor;
    }
  }
}

template <typename Ty, int D>
__global__ void __launch_bounds__(ForwardTiles::kWarps * 32)
    flash_forward_kernel(FlashGeometry g, const typename Ty::T* q, const typename Ty::T* k, const typename Ty::T* v,
                         const int64_t* q_pos, const int64_t* k_pos, float* o, float* lse) {
  using T = typename Ty::T;
  constexpr int BM = ForwardTiles::kBlockM, BN = ForwardTiles::kBlockN, S = ForwardTiles::kStages;
  constexpr int kThreads = ForwardTiles::kWarps * 32;
  extern __shared__ __align__(128) unsigned char smem[];
  T* sQ = reinterpret_cast<T*>(smem);
  T* sK = sQ + BM * D;
  T* sV = sK + S * BN * D;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  // Causal blocks late in the sequence have the most work: start them first.
  const int64_t m0 = int64_t(g.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x) * BM;
  const int h = blockIdx.y;
  const int kvh = kv_head_of(h, g.q_head_offset, g.kv_head_offset, g.group);
  const T* qh = q + int64_t(h) * D;
  const T* kh = k + int64_t(kvh) * D;
  const T* vh = v + int64_t(kvh) * D;
  const bool contiguous = q_pos == nullptr && k_pos == nullptr;
  const int64_t n_end = g.causal && contiguous ? causal_key_end(m0, BM, g.q_rows, g.k_rows, 0, 0) : g.k_rows;
  const int n_tiles = int(ceil_div(n_end, BN));

  auto load_kv = [&](int tile) {
    const int stage = tile % S;
    load_tile_async<BN, D, kThreads>(sK + stage * BN * D, kh, int64_t(tile) * BN, g.k_rows, g.kv_stride, tid);
    load_tile_async<BN, D, kThreads>(sV + stage * BN * D, vh, int64_t(tile) * BN, g.k_rows, g.kv_stride, tid);
  };
  load_tile_async<BM, D, kThreads>(sQ, qh, m0, g.q_rows, g.q_stride, tid);
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < n_tiles) load_kv(s);
    cp_async_commit();
  }

  int64_t row_pos[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t row = m0 + warp * 16 + lane_group(lane) + 8 * r;
    row_pos[r] = row < g.q_rows ? (q_pos ? q_pos[row] : row) : 0;
  }
  const uint32_t sQa = shared_address(sQ), sKa = shared_address(sK), sVa = shared_address(sV);
  uint32_t qf[D / 16][4];
  float acc[D / 8][4];
#pragma unroll
  for (int d = 0; d < D / 8; ++d)
    acc[d][0] = acc[d][1] = acc[d][2] = acc[d][3] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};

  for (int t = 0; t < n_tiles; ++t) {
    cp_async_wait<S - 2>();
    __syncthreads();  // tile t has landed, and every warp is done with the stage loaded next
    if (t == 0) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
        ldmatrix_x4(qf[kk], ldsm_address(sQa, ldsm_a_rowmajor(lane), warp * 16, kk * 16, D));
    }
    if (t + S - 1 < n_tiles) load_kv(t + S - 1);
    cp_async_commit();
    const uint32_t k_stage = sKa + uint32_t((t % S) * BN * D * 2), v_stage = sVa + uint32_t((t % S) * BN * D * 2);

    float s[BN / 8][4];
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
      s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
      for (int np = 0; np < BN / 16; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, ldsm_address(k_stage, ldsm_b_nk(lane), np * 16, kk * 16, D));
        Ty::mma(s[2 * np], qf[kk], b[0], b[1]);
        Ty::mma(s[2 * np + 1], qf[kk], b[2], b[3]);
      }
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        s[j][e] *= g.scale_log2;
    const int64_t n0 = int64_t(t) * BN;
    if (!contiguous || block_needs_mask(g.causal, m0, n0, BN, g.k_rows, 0, 0))
      mask_scores<BN>(s, g, k_pos, n0, lane, row_pos);
    online_softmax<BN, D>(s, acc, m_run, l_run);

#pragma unroll
    for (int kc = 0; kc < BN / 16; ++kc) {
      uint32_t a[4];
#pragma unroll
      for (int r = 0; r < 4; ++r)
        a[r] = Ty::pack(s[p_to_a_tile(kc, r)][p_to_a_first_elem(r)], s[p_to_a_tile(kc, r)][p_to_a_first_elem(r) + 1]);
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, ldsm_address(v_stage, ldsm_b_kn(lane), kc * 16, dp * 16, D));
        Ty::mma(acc[2 * dp], a, b[0], b[1]);
        Ty::mma(acc[2 * dp + 1], a, b[2], b[3]);
      }
    }
  }
  cp_async_wait<0>();

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float l = quad_sum(l_run[r]);
    const int64_t row = m0 + warp * 16 + lane_group(lane) + 8 * r;
    if (row >= g.q_rows) continue;
    const float inv = l > 0 ? 1.0f / l : 0.0f;
    float* orow = o + row * g.o_stride + int64_t(h) * D + lane_in_group(lane) * 2;
#pragma unroll
    for (int d = 0; d < D / 8; ++d)
      *reinterpret_cast<float2*>(orow + d * 8) = make_float2(acc[d][2 * r] * inv, acc[d][2 * r + 1] * inv);
    if (lane_in_group(lane) == 0)
      lse[int64_t(h) * g.lse_stride + row] = l > 0 ? (m_run[r] + log2f(l)) * 0.69314718055994531f : -INFINITY;
  }
}

template <typename Ty, int D>
void launch_forward(const FlashGeometry& g, const void* q, const void* k, const void* v, const int64_t* q_pos,
                    const int64_t* k_pos, float* o, float* lse, cudaStream_t stream) {
  using T = typename Ty::T;
  constexpr int bytes = forward_shared_bytes<D>();
  auto kernel = flash_forward_kernel<Ty, D>;
  WF_FLASH_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  const dim3 grid(unsigned(ceil_div(g.q_rows, ForwardTiles::kBlockM)), unsigned(g.heads));
  kernel<<<grid, ForwardTiles::kWarps * 32, bytes, stream>>>(g, static_cast<const T*>(q), static_cast<const T*>(k),
                                                             static_cast<const T*>(v), q_pos, k_pos, o, lse);
  WF_FLASH_CHECK(cudaGetLastError());
}

}  // namespace

bool launch_forward_half_tensor_cores(HalfType type, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                                      const int64_t* q_pos, const int64_t* k_pos, int64_t q_rows, int64_t k_rows,
                                      const kernels::AttnShape& shape, float* o, float* lse, cudaStream_t stream) {
  if (!flash_supported(shape, q, k, v)) return false;
  if (q_rows == 0 || shape.heads == 0) return true;
  const FlashGeometry g = flash_geometry(shape, q_rows, k_rows);
  const bool bf16 = type == HalfType::BF16;
  if (shape.head_dim == 64) {
    if (bf16)
      launch_forward<Bf16, 64>(g, q, k, v, q_pos, k_pos, o, lse, stream);
    else
      launch_forward<Fp16, 64>(g, q, k, v, q_pos, k_pos, o, lse, stream);
  } else {
    if (bf16)
      launch_forward<Bf16, 128>(g, q, k, v, q_pos, k_pos, o, lse, stream);
    else
      launch_forward<Fp16, 128>(g, q, k, v, q_pos, k_pos, o, lse, stream);
  }
  return true;
}

}  // namespace wallfacer::runtime::cuda
