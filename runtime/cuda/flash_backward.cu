// The tensor-core backward for 16-bit inputs (bf16 or fp16, fp32 accumulation), FlashAttention-2
// style on mma.sync.m16n8k16, from O's lse and D = rowsum(dO * O) (launch_backward_prep_half). A
// block of 4 warps owns 64 keys of one kv head (16 keys per warp, K and V in shared memory for
// the whole walk) and walks the query tiles of every query head of its GQA group, bringing Q, dO,
// lse and D in by cp.async two tiles deep. Per tile each warp forms S^T = K Q^T, P^T =
// exp(S^T - lse), dV += P^T dO, dP^T = V dO^T, dS^T = P^T (dP^T - D) and dK += dS^T Q in
// registers, which is why the block needs no atomics for dK and dV; dS^T then goes through shared
// memory so that the warps can share dQ += dS K by query rows, added to global memory with fp32
// atomics (other key blocks add to the same rows). Causal with contiguous positions: the walk
// starts at the first query tile that sees the block's keys, only tiles crossing the diagonal test
// each element. Index arithmetic: flash_layout.hpp.
#include <cmath>

#include "device_kernels.hpp"
#include "flash_kernels.hpp"
#include "flash_mma.cuh"

namespace wallfacer::runtime::cuda {
namespace {

using namespace flash;

template <typename T, int HD>
struct BackwardSmem {
  static constexpr int BN = BackwardTiles<HD>::kBlockN, BQ = BackwardTiles<HD>::kBlockQ, S = BackwardTiles<HD>::kStages;
  T *k, *v, *q, *dO, *dS;
  float *lse, *D;
  __device__ static BackwardSmem carve(unsigned char* base) {
    BackwardSmem s;
    s.k = reinterpret_cast<T*>(base);
    s.v = s.k + BN * HD;
    s.q = s.v + BN * HD;
    s.dO = s.q + S * BQ * HD;
    s.dS = s.dO + S * BQ * HD;
    s.lse = reinterpret_cast<float*>(s.dS + BN * BQ);
    s.D = s.lse + S * BQ;
    return s;
  }
};

// Which (query head, query tile) a step of the block's walk handles.
struct WalkStep {
  int head;
  int64_t m0;
};
__device__ __forceinline__ WalkStep walk_step(int it, int h_first, int tiles_per_head, int t_begin, int block_q) {
  return {h_first + it / tiles_per_head, int64_t(t_begin + it % tiles_per_head) * block_q};
}

// P^T for one warp's 16 keys x kBlockQ queries from the scores S^T: exp(S^T scale - lse), zero where
// masked and for rows whose lse is -inf (they saw no key).
template <int BQ>
__device__ __forceinline__ void probabilities(float (&st)[BQ / 8][4], const FlashGeometry& g, const float* s_lse,
                                              bool masked, int64_t key0, int64_t m0, const int64_t* q_pos,
                                              const int64_t* k_pos, int lane) {
#pragma unroll
  for (int j = 0; j < BQ / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const Coord c = mma_c_coord(lane, e);
      const float l = s_lse[j * 8 + c.col];
      const float l2 = l == -INFINITY ? INFINITY : l * 1.4426950408889634f;
      float p = fast_exp2(st[j][e] * g.scale_log2 - l2);
      if (masked) {
        const int64_t key = key0 + c.row, query = m0 + j * 8 + c.col;
        bool live = key < g.k_rows;
        if (live && g.causal && query < g.q_rows) live = (k_pos ? k_pos[key] : key) <= (q_pos ? q_pos[query] : query);
        if (!live) p = 0.0f;
      }
      st[j][e] = p;
    }
}

// acc (16 x N, N = 8 * N8) += A (16 x 16 * KC, in C layout as `c`) times B stored [k][n] at tile
// address b_tile (cols columns, swizzled), rows from b_row0, columns from b_col0.
template <typename Ty, int KC, int N8>
__device__ __forceinline__ void mma_c_times_kn(float (&acc)[N8][4], const float (&c)[2 * KC][4], uint32_t b_tile,
                                               int b_row0, int b_col0, int cols, int lane) {
#pragma unroll
  for (int kc = 0; kc < KC; ++kc) {
    uint32_t a[4];
#pragma unroll
    for (int r = 0; r < 4; ++r)
      a[r] = Ty::pack(c[p_to_a_tile(kc, r)][p_to_a_first_elem(r)], c[p_to_a_tile(kc, r)][p_to_a_first_elem(r) + 1]);
#pragma unroll
    for (int np = 0; np < N8 / 2; ++np) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, ldsm_address(b_tile, ldsm_b_kn(lane), b_row0 + kc * 16, b_col0 + np * 16, cols));
      Ty::mma(acc[2 * np], a, b[0], b[1]);
      Ty::mma(acc[2 * np + 1], a, b[2], b[3]);
    }
  }
}

// acc (16 x N) = A (16 rows from a_row0 of a tile stored [m][k]) times B^T (N rows of a tile stored
// [n][k]); both tiles D columns wide.
template <typename Ty, int D, int N8>
__device__ __forceinline__ void mma_rows_times_rows(float (&acc)[N8][4], uint32_t a_tile, int a_row0, uint32_t b_tile,
                                                    int lane) {
#pragma unroll
  for (int j = 0; j < N8; ++j)
    acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
#pragma unroll 1
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t a[4];
    ldmatrix_x4(a, ldsm_address(a_tile, ldsm_a_rowmajor(lane), a_row0, kk * 16, D));
#pragma unroll
    for (int np = 0; np < N8 / 2; ++np) {
      uint32_t b[4];
      ldmatrix_x4(b, ldsm_address(b_tile, ldsm_b_nk(lane), np * 16, kk * 16, D));
      Ty::mma(acc[2 * np], a, b[0], b[1]);
      Ty::mma(acc[2 * np + 1], a, b[2], b[3]);
    }
  }
}

// dQ rows of this tile += scale * dS K, shared by the warps as (16-row, 64-column) pieces.
template <typename Ty, int D>
__device__ __forceinline__ void add_dq(const FlashGeometry& g, uint32_t ds_tile, uint32_t k_tile, int64_t m0, int h,
                                       float* dq, int warp, int lane) {
  constexpr int BN = BackwardTiles<D>::kBlockN, BQ = BackwardTiles<D>::kBlockQ;
  for (int item = warp; item < (BQ / 16) * (D / 64); item += BackwardTiles<D>::kWarps) {
    const int rt = item / (D / 64), ch = item % (D / 64);
    float acc[8][4];
#pragma unroll
    for (int j = 0; j < 8; ++j)
      acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
#pragma unroll
    for (int kc = 0; kc < BN / 16; ++kc) {
      uint32_t a[4];
      ldmatrix_x4_trans(a, ldsm_address(ds_tile, ldsm_a_km(lane), kc * 16, rt * 16, BQ));
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, ldsm_address(k_tile, ldsm_b_kn(lane), kc * 16, ch * 64 + np * 16, D));
        Ty::mma(acc[2 * np], a, b[0], b[1]);
        Ty::mma(acc[2 * np + 1], a, b[2], b[3]);
      }
    }
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const Coord c = mma_c_coord(lane, e);
        const int64_t row = m0 + rt * 16 + c.row;
        if (row < g.q_rows)
          atomicAdd(dq + row * g.o_stride + int64_t(h) * D + ch * 64 + j * 8 + c.col, acc[j][e] * g.scale);
      }
  }
}

template <typename Ty, int D>
__global__ void __launch_bounds__(BackwardTiles<D>::kWarps * 32)
    flash_backward_kernel(FlashGeometry g, const typename Ty::T* q, const typename Ty::T* k, const typename Ty::T* v,
                          const typename Ty::T* dO, const float* lse, const float* Dsum, const int64_t* q_pos,
                          const int64_t* k_pos, float* dq, float* dk, float* dv) {
  using T = typename Ty::T;
  using Tiles = BackwardTiles<D>;
  constexpr int BN = Tiles::kBlockN, BQ = Tiles::kBlockQ, S = Tiles::kStages, kThreads = Tiles::kWarps * 32;
  extern __shared__ __align__(128) unsigned char smem[];
  const BackwardSmem<T, D> sm = BackwardSmem<T, D>::carve(smem);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t n0 = int64_t(blockIdx.x) * BN;
  const int kvh = blockIdx.y;
  const int h_first = q_heads_first(kvh, g.q_head_offset, g.kv_head_offset, g.group);
  const int h_last = q_heads_last(kvh, g.heads, g.q_head_offset, g.kv_head_offset, g.group);
  const bool contiguous = q_pos == nullptr && k_pos == nullptr;
  const int t_begin = g.causal && contiguous ? int(causal_query_begin(n0, g.q_rows, 0, 0) / BQ) : 0;
  const int tiles_per_head = int(ceil_div(g.q_rows, BQ)) - t_begin;
  const int iters = h_last > h_first && tiles_per_head > 0 ? (h_last - h_first) * tiles_per_head : 0;
  if (iters == 0) return;

  auto load_step = [&](int it) {
    const int stage = it % S;
    const WalkStep w = walk_step(it, h_first, tiles_per_head, t_begin, BQ);
    load_tile_async<BQ, D, kThreads>(sm.q + stage * BQ * D, q + int64_t(w.head) * D, w.m0, g.q_rows, g.q_stride, tid);
    load_tile_async<BQ, D, kThreads>(sm.dO + stage * BQ * D, dO + int64_t(w.head) * D, w.m0, g.q_rows, g.q_stride, tid);
    for (int i = tid; i < 2 * BQ; i += kThreads) {
      const int64_t row = w.m0 + i % BQ;
      const bool valid = row < g.q_rows;
      const float* src = (i < BQ ? lse : Dsum) + int64_t(w.head) * g.lse_stride + (valid ? row : 0);
      cp_async_4(shared_address((i < BQ ? sm.lse : sm.D) + stage * BQ + i % BQ), src, valid);
    }
  };
  const T* kh = k + int64_t(kvh) * D;
  const T* vh = v + int64_t(kvh) * D;
  load_tile_async<BN, D, kThreads>(sm.k, kh, n0, g.k_rows, g.kv_stride, tid);
  load_tile_async<BN, D, kThreads>(sm.v, vh, n0, g.k_rows, g.kv_stride, tid);
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < iters) load_step(s);
    cp_async_commit();
  }

  const uint32_t k_tile = shared_address(sm.k), v_tile = shared_address(sm.v), ds_tile = shared_address(sm.dS);
  float dk_acc[D / 8][4], dv_acc[D / 8][4];
#pragma unroll
  for (int j = 0; j < D / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      dk_acc[j][e] = dv_acc[j][e] = 0.0f;

  for (int it = 0; it < iters; ++it) {
    cp_async_wait<S - 2>();
    __syncthreads();  // step it has landed, and every warp is done with the stage loaded next and with dS
    if (it + S - 1 < iters) load_step(it + S - 1);
    cp_async_commit();
    const int stage = it % S;
    const WalkStep w = walk_step(it, h_first, tiles_per_head, t_begin, BQ);
    const uint32_t q_tile = shared_address(sm.q + stage * BQ * D), do_tile = shared_address(sm.dO + stage * BQ * D);
    const bool masked = !contiguous || block_needs_mask(g.causal, w.m0, n0, BN, g.k_rows, 0, 0);

    float st[BQ / 8][4];
    mma_rows_times_rows<Ty, D, BQ / 8>(st, k_tile, warp * 16, q_tile, lane);
    probabilities<BQ>(st, g, sm.lse + stage * BQ, masked, n0 + warp * 16, w.m0, q_pos, k_pos, lane);
    mma_c_times_kn<Ty, BQ / 16, D / 8>(dv_acc, st, do_tile, 0, 0, D, lane);
    float dpt[BQ / 8][4];
    mma_rows_times_rows<Ty, D, BQ / 8>(dpt, v_tile, warp * 16, do_tile, lane);
#pragma unroll
    for (int j = 0; j < BQ / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        dpt[j][e] = st[j][e] * (dpt[j][e] - sm.D[stage * BQ + j * 8 + mma_c_coord(lane, e).col]);
    mma_c_times_kn<Ty, BQ / 16, D / 8>(dk_acc, dpt, q_tile, 0, 0, D, lane);
#pragma unroll
    for (int j = 0; j < BQ / 8; ++j)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const Coord c = mma_c_coord(lane, 2 * r);
        *reinterpret_cast<uint32_t*>(sm.dS + swizzle(warp * 16 + c.row, j * 8 + c.col, BQ)) =
            Ty::pack(dpt[j][2 * r], dpt[j][2 * r + 1]);
      }
    __syncthreads();
    add_dq<Ty, D>(g, ds_tile, k_tile, w.m0, w.head, dq, warp, lane);
  }
  cp_async_wait<0>();

  // This block alone owns its keys of this kv head: plain read-modify-write adds into dK and dV.
#pragma unroll
  for (int j = 0; j < D / 8; ++j)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const Coord c = mma_c_coord(lane, 2 * r);
      const int64_t key = n0 + warp * 16 + c.row;
      if (key >= g.k_rows) continue;
      const int64_t off = key * g.dkv_stride + int64_t(kvh) * D + j * 8 + c.col;
      float2* pk = reinterpret_cast<float2*>(dk + off);
      float2* pv = reinterpret_cast<float2*>(dv + off);
      const float2 ok = *pk, ov = *pv;
      *pk = make_float2(ok.x + dk_acc[j][2 * r] * g.scale, ok.y + dk_acc[j][2 * r + 1] * g.scale);
      *pv = make_float2(ov.x + dv_acc[j][2 * r], ov.y + dv_acc[j][2 * r + 1]);
    }
}

template <typename Ty, int D>
void launch_backward(const FlashGeometry& g, const void* q, const void* k, const void* v, const void* dO,
                     const float* lse, const float* Dsum, const int64_t* q_pos, const int64_t* k_pos, float* dq,
                     float* dk, float* dv, cudaStream_t stream) {
  using T = typename Ty::T;
  constexpr int bytes = backward_shared_bytes<D>();
  auto kernel = flash_backward_kernel<Ty, D>;
  WF_FLASH_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  const dim3 grid(unsigned(ceil_div(g.k_rows, BackwardTiles<D>::kBlockN)), unsigned(g.kv_heads));
  kernel<<<grid, BackwardTiles<D>::kWarps * 32, bytes, stream>>>(g, static_cast<const T*>(q), static_cast<const T*>(k),
                                                                 static_cast<const T*>(v), static_cast<const T*>(dO),
                                                                 lse, Dsum, q_pos, k_pos, dq, dk, dv);
  WF_FLASH_CHECK(cudaGetLastError());
}

}  // namespace

bool launch_backward_half_tensor_cores(HalfType type, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                                       const uint16_t* dO, const float* lse, const float* D, const int64_t* q_pos,
                                       const int64_t* k_pos, int64_t q_rows, int64_t k_rows,
                                       const kernels::AttnShape& shape, float* dq, float* dk, float* dv,
                                       cudaStream_t stream) {
  if (!flash_supported(shape, q, k, v, dO)) return false;
  if (q_rows == 0 || k_rows == 0 || shape.heads == 0 || shape.kv_heads == 0) return true;
  const FlashGeometry g = flash_geometry(shape, q_rows, k_rows);
  const bool bf16 = type == HalfType::BF16;
  if (shape.head_dim == 64) {
    if (bf16)
      launch_backward<Bf16, 64>(g, q, k, v, dO, lse, D, q_pos, k_pos, dq, dk, dv, stream);
    else
      launch_backward<Fp16, 64>(g, q, k, v, dO, lse, D, q_pos, k_pos, dq, dk, dv, stream);
  } else {
    if (bf16)
      launch_backward<Bf16, 128>(g, q, k, v, dO, lse, D, q_pos, k_pos, dq, dk, dv, stream);
    else
      launch_backward<Fp16, 128>(g, q, k, v, dO, lse, D, q_pos, k_pos, dq, dk, dv, stream);
  }
  return true;
}

}  // namespace wallfacer::runtime::cuda
