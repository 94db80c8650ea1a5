// CPU attention kernels: blockwise forward with online softmax into an (O, lse) accumulator, the
// FlashAttention-2 backward (dQ, dK, dV from O, lse, dO and D = rowsum(dO * O)), the stable lse
// merge of partial results, causal and full masks by global token position, and GQA. Float for
// the fast path (tiles through OpenBLAS SGEMM), double for the fp64 mode. These are the numerical
// reference of every runtime backend.
//
// Layouts (row-major; rows may be strided, see AttnShape and the stride arguments):
//   q, o, dO, dq:  [rows][heads][head_dim]     (one batch element; callers loop over batch)
//   k, v, dk, dv:  [rows][kv_heads][head_dim]
//   lse, D:        [heads][rows]
// Positions: q_pos[i] / k_pos[j] are the global token positions of row i / j (for the mask);
// a null pos pointer means positions 0 .. rows-1. Positions need not be sorted (zigzag, striped).
// Heads: q points at the first query head of the range being computed (global index
// q_head_offset) and k/v at the first stored kv head (global index kv_head_offset); query head j
// of the global numbering reads kv head j / group.
// Threads: each call runs on the calling thread (scratch is thread-local, so calls from several
// threads may run at once). On first use the kernels set OpenBLAS to one thread unless
// OPENBLAS_NUM_THREADS is set (the MPI runtime runs one rank per core); see set_blas_threads.
// Details, tiling and measured throughput: docs/kernels.md.
#pragma once

#include <cstdint>
#include <string>

namespace wallfacer::kernels {

template <typename T>
struct QueryBlock {
  const T* q = nullptr;
  const int64_t* pos = nullptr;
  int64_t rows = 0;
};

template <typename T>
struct KeyBlock {
  const T* k = nullptr;
  const T* v = nullptr;
  const int64_t* pos = nullptr;
  int64_t rows = 0;
};

// Default tile: 128 query rows x 512 key rows (tuned on one Xeon core, docs/kernels.md).
inline constexpr int kDefaultTileQ = 128;
inline constexpr int kDefaultTileK = 512;

struct AttnShape {
  int heads = 0;     // query heads in the block (the head range being computed)
  int kv_heads = 0;  // kv heads stored in k/v rows
  int head_dim = 0;
  int q_head_offset = 0;   // global index of the first query head (for GQA mapping)
  int kv_head_offset = 0;  // global index of the first kv head stored in k/v
  int group = 1;           // query heads per kv head (heads_total / kv_heads_total)
  // Row strides in elements (heads * head_dim of the storing buffer); 0 means dense
  // (heads * head_dim for q, dO, dq; kv_heads * head_dim for k, v, dk, dv).
  int64_t q_row_stride = 0, kv_row_stride = 0;
  bool causal = false;
  double scale = 0;  // 0 means 1/sqrt(head_dim)
  // Tile sizes (query rows x key rows per GEMM tile); 0 picks the tuned default. Results do not
  // depend on them beyond rounding; tests vary them to exercise the tile-skipping logic.
  int tile_q = 0, tile_k = 0;
};

// Sets an empty accumulator: o = 0 and lse = -inf for `rows` rows of `heads` heads.
template <typename T>
void reset_accumulator(T* acc_o, T* acc_lse, int64_t rows, int heads, int head_dim, int64_t row_stride,
                       int64_t lse_stride);

// Sets OpenBLAS to the kernels' default thread count (1, or OPENBLAS_NUM_THREADS) unless it was
// set already; idempotent and cheap. Every caller of OpenBLAS must make it first: a GEMM run on
// OpenBLAS's own threads while other ranks' threads call it too splits its work differently from
// call to call, so its sums, and the losses of a training run, change in the last bits.
void use_default_blas_threads();

// Overrides the OpenBLAS thread count used by the kernels (default 1, or OPENBLAS_NUM_THREADS).
void set_blas_threads(int threads);

// The OpenBLAS build, the kernel set it picked for this CPU and its thread count (for logs).
std::string blas_description();

// OpenBLAS picks its kernels once at load time from a CPU model table; on a model it does not
// know it falls back to generic SSE kernels, several times slower. Returns the environment
// setting that fixes this ("OPENBLAS_CORETYPE=SkylakeX" or "...=Haswell"), or "" when the kernel
// set is fine or OPENBLAS_CORETYPE is already set. The kernels log a warning once when non-empty.
std::string blas_core_fix();

// Forward of one block, merged into the accumulator: acc_o [q rows][heads][d] holds the
// normalised partial output so far and acc_lse [heads][q rows] its log-sum-exp (-inf when empty).
// A fully masked row keeps its accumulator unchanged. acc_row_stride: elements between acc_o rows
// (0 = heads*head_dim); lse_stride: elements between heads in acc_lse (0 = q.rows).
template <typename T>
void attention_forward(const QueryBlock<T>& q, const KeyBlock<T>& kv, const AttnShape& shape, T* acc_o, T* acc_lse,
                       int64_t acc_row_stride, int64_t lse_stride);

// Backward inputs of one query block: dO, and the final (global) lse and D of its rows.
template <typename T>
struct BackwardInputs {
  const T* dO = nullptr;   // [q rows][heads][d], same stride as q
  const T* lse = nullptr;  // [heads][q rows] with stride lse_stride
  const T* D = nullptr;    // [heads][q rows] with stride lse_stride
  int64_t lse_stride = 0;  // 0 = q.rows
};

// Backward of one block with the final (global) lse and D. Adds into dq [q rows][heads][d] (row
// stride q_row_stride) and dk, dv [kv rows][kv_heads][d] (row stride kv_row_stride). Rows whose
// lse is -inf contribute nothing.
template <typename T>
void attention_backward(const QueryBlock<T>& q, const KeyBlock<T>& kv, const BackwardInputs<T>& in,
                        const AttnShape& shape, T* dq, T* dk, T* dv);

// D[h][i] = sum_d dO[i][h][d] * O[i][h][d]. row_stride 0 = heads*head_dim, lse_stride 0 = rows.
template <typename T>
void backward_prep(const T* o, const T* dO, int64_t rows, int heads, int head_dim, int64_t row_stride, T* D,
                   int64_t lse_stride);

// Stable merge of a partial (o_b, lse_b) into (o_a, lse_a) for `rows` rows of `heads` heads
// (both with the same strides; 0 = dense). An empty side (lse = -inf) leaves the other unchanged.
template <typename T>
void merge_partial(T* o_a, T* lse_a, const T* o_b, const T* lse_b, int64_t rows, int heads, int head_dim,
                   int64_t row_stride, int64_t lse_stride);

}  // namespace wallfacer::kernels
