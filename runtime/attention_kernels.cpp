// CPU attention kernels: Q K^T and P V style products go through OpenBLAS GEMM tile by tile, the
// softmax row work runs in SIMD (float, several ISAs picked at load time) or plain scalar code
// (double, where accuracy matters more than speed). Layouts and semantics: attention_kernels.hpp.
#include <wallfacer/runtime/attention_kernels.hpp>

#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/core/log.hpp>

// The SIMD helpers pass 64-byte vectors between always-inlined functions only; the ABI note GCC
// prints for the non-AVX512 clones is irrelevant.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace wallfacer::kernels {
namespace {

// ---- OpenBLAS threads ------------------------------------------------------------------------

std::once_flag g_blas_threads_once;
std::once_flag g_blas_core_once;

// This process's rank as the MPI launcher (Open MPI, MPICH/PMI, PMIx, Slurm) set it in the
// environment before MPI is initialised; -1 outside a launcher.
int launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    if (const char* value = std::getenv(name); value != nullptr && *value != '\0') return std::atoi(value);
  }
  return -1;
}

void ensure_blas_threads_once() {
  std::call_once(g_blas_threads_once, [] {
    if (std::getenv("OPENBLAS_NUM_THREADS") == nullptr) openblas_set_num_threads(1);
  });
  std::call_once(g_blas_core_once, [] {
    const std::string fix = blas_core_fix();
    // Every MPI process would print the same line; rank 0 speaks for them.
    if (!fix.empty() && launcher_rank() <= 0)
      WF_LOG_WARN("runtime",
                  "OpenBLAS uses its generic {} kernels on this CPU (a model it does not know); GEMM runs "
                  "several times slower. Set {} to use the vector kernels.",
                  openblas_get_corename(), fix);
  });
}

// ---- GEMM (row-major) -------------------------------------------------------------------------

CBLAS_TRANSPOSE blas_trans(bool t) {
  return t ? CblasTrans : CblasNoTrans;
}

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
          int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, blas_trans(ta), blas_trans(tb), static_cast<blasint>(m), static_cast<blasint>(n),
              static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
              static_cast<blasint>(ldc));
}

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, blas_trans(ta), blas_trans(tb), static_cast<blasint>(m), static_cast<blasint>(n),
              static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
              static_cast<blasint>(ldc));
}

// ---- float row operations (SIMD) ---------------------------------------------------------------
// GCC vector extensions at 16 lanes; target_clones compiles each row function for AVX-512, AVX2
// and baseline x86-64 and picks one at load time, so the build needs no -march flag.

using f32x16 = float __attribute__((vector_size(64)));
using i32x16 = int32_t __attribute__((vector_size(64)));
constexpr int64_t kLanes = 16;

#define WF_SIMD_CLONES __attribute__((target_clones("avx512f", "arch=haswell", "default")))

inline __attribute__((always_inline)) f32x16 splat(float c) {
  return f32x16{} + c;
}

inline __attribute__((always_inline)) f32x16 load(const float* p) {
  f32x16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline __attribute__((always_inline)) void store(float* p, f32x16 v) {
  std::memcpy(p, &v, sizeof v);
}

// Bit reinterpretation between the float and int vectors. memcpy rather than std::bit_cast: GCC
// 12's UBSan reports a false null-pointer load for bit_cast on vector types; both compile to
// nothing.
inline __attribute__((always_inline)) i32x16 int_bits(f32x16 v) {
  i32x16 r;
  std::memcpy(&r, &v, sizeof r);
  return r;
}

inline __attribute__((always_inline)) f32x16 float_bits(i32x16 v) {
  f32x16 r;
  std::memcpy(&r, &v, sizeof r);
  return r;
}

// exp(x) to about 2 ulp (Cephes expf polynomial). x < -87 (including -inf) gives exactly 0, which
// is how masked scores vanish; x is clamped at 88 so n + 127 stays a valid exponent.
inline __attribute__((always_inline)) f32x16 exp16(f32x16 x) {
  const i32x16 underflow = x < splat(-87.0f);
  x = underflow ? splat(-87.0f) : x;
  x = x > splat(88.0f) ? splat(88.0f) : x;
  const f32x16 magic = splat(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
  const f32x16 t = x * splat(1.44269504088896341f) + magic;
  const f32x16 n = t - magic;
  const i32x16 ni = int_bits(t) - int_bits(magic);
  f32x16 r = x - n * splat(0.693359375f);
  r = r - n * splat(-2.12194440e-4f);
  f32x16 y = splat(1.9875691500e-4f);
  y = y * r + splat(1.3981999507e-3f);
  y = y * r + splat(8.3334519073e-3f);
  y = y * r + splat(4.1665795894e-2f);
  y = y * r + splat(1.6666665459e-1f);
  y = y * r + splat(5.0000001201e-1f);
  y = y * (r * r) + r + splat(1.0f);
  const i32x16 pow2 = (ni + 127) << 23;
  y = y * float_bits(pow2);
  return underflow ? splat(0.0f) : y;
}

// Loads the last n % 16 elements padded with `fill`, so the tail runs through the same code.
inline __attribute__((always_inline)) f32x16 load_tail(const float* p, int64_t count, float fill) {
  float buf[kLanes];
  for (int64_t j = 0; j < kLanes; ++j)
    buf[j] = j < count ? p[j] : fill;
  return load(buf);
}

inline __attribute__((always_inline)) void store_tail(float* p, int64_t count, f32x16 v) {
  float buf[kLanes];
  store(buf, v);
  for (int64_t j = 0; j < count; ++j)
    p[j] = buf[j];
}

inline __attribute__((always_inline)) float hsum(f32x16 v) {
  float s = 0;
  for (int64_t j = 0; j < kLanes; ++j)
    s += v[j];
  return s;
}

WF_SIMD_CLONES float row_max(const float* s, int64_t n) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  f32x16 m = splat(neg_inf);
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    const f32x16 v = load(s + j);
    m = v > m ? v : m;
  }
  if (j < n) {
    const f32x16 v = load_tail(s + j, n - j, neg_inf);
    m = v > m ? v : m;
  }
  float r = neg_inf;
  for (int64_t l = 0; l < kLanes; ++l)
    r = std::max(r, m[l]);
  return r;
}

// s[j] = exp(s[j] - shift); returns the sum. shift must be finite.
WF_SIMD_CLONES float exp_shift_sum(float* s, int64_t n, float shift) {
  const f32x16 sh = splat(shift);
  f32x16 acc = splat(0.0f);
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    const f32x16 e = exp16(load(s + j) - sh);
    store(s + j, e);
    acc += e;
  }
  if (j < n) {
    const f32x16 e = exp16(load_tail(s + j, n - j, -std::numeric_limits<float>::infinity()) - sh);
    store_tail(s + j, n - j, e);
    acc += e;
  }
  return hsum(acc);
}

// p[j] = p[j] * (dp[j] - d): dS from P, dP and D.
WF_SIMD_CLONES void softmax_grad(float* p, const float* dp, int64_t n, float d) {
  const f32x16 dv = splat(d);
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    store(p + j, load(p + j) * (load(dp + j) - dv));
  for (; j < n; ++j)
    p[j] = p[j] * (dp[j] - d);
}

// ---- double row operations (scalar, exact libm exp) ----------------------------------------------

double row_max(const double* s, int64_t n) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < n; ++j)
    m = std::max(m, s[j]);
  return m;
}

double exp_shift_sum(double* s, int64_t n, double shift) {
  double sum = 0;
  for (int64_t j = 0; j < n; ++j)
    sum += (s[j] = std::exp(s[j] - shift));
  return sum;
}

void softmax_grad(double* p, const double* dp, int64_t n, double d) {
  for (int64_t j = 0; j < n; ++j)
    p[j] = p[j] * (dp[j] - d);
}

// ---- geometry --------------------------------------------------------------------------------

template <typename T>
constexpr T neg_inf() {
  return -std::numeric_limits<T>::infinity();
}

template <typename T>
struct Geometry {
  int heads, kv_heads, d;
  int64_t q_stride, kv_stride;
  T scale;
  bool causal;
  int64_t tile_q, tile_k;
  std::vector<int> kv_of_head;  // local kv head index of each local query head
};

template <typename T>
Geometry<T> resolve(const AttnShape& s) {
  WF_ASSERT(s.heads > 0 && s.kv_heads > 0 && s.head_dim > 0 && s.group > 0, "attention shape must be positive");
  Geometry<T> g{};
  g.heads = s.heads;
  g.kv_heads = s.kv_heads;
  g.d = s.head_dim;
  g.q_stride = s.q_row_stride ? s.q_row_stride : int64_t{s.heads} * s.head_dim;
  g.kv_stride = s.kv_row_stride ? s.kv_row_stride : int64_t{s.kv_heads} * s.head_dim;
  WF_ASSERT(g.q_stride >= int64_t{s.heads} * s.head_dim, "q row stride smaller than heads * head_dim");
  WF_ASSERT(g.kv_stride >= int64_t{s.kv_heads} * s.head_dim, "kv row stride smaller than kv_heads * head_dim");
  g.scale = static_cast<T>(s.scale != 0 ? s.scale : 1.0 / std::sqrt(static_cast<double>(s.head_dim)));
  g.causal = s.causal;
  g.tile_q = s.tile_q > 0 ? s.tile_q : kDefaultTileQ;
  g.tile_k = s.tile_k > 0 ? s.tile_k : kDefaultTileK;
  g.kv_of_head.resize(s.heads);
  for (int h = 0; h < s.heads; ++h) {
    const int kv = (s.q_head_offset + h) / s.group - s.kv_head_offset;
    WF_ASSERT(kv >= 0 && kv < s.kv_heads, "query head maps to a kv head outside the stored range");
    g.kv_of_head[h] = kv;
  }
  return g;
}

int64_t position(const int64_t* pos, int64_t row) {
  return pos ? pos[row] : row;
}

// Smallest and largest global position of each tile of `tile` rows.
struct PosRange {
  int64_t lo, hi;
};

std::vector<PosRange> tile_ranges(const int64_t* pos, int64_t rows, int64_t tile) {
  std::vector<PosRange> out;
  for (int64_t r0 = 0; r0 < rows; r0 += tile) {
    PosRange pr{position(pos, r0), position(pos, r0)};
    for (int64_t r = r0; r < std::min(rows, r0 + tile); ++r) {
      pr.lo = std::min(pr.lo, position(pos, r));
      pr.hi = std::max(pr.hi, position(pos, r));
    }
    out.push_back(pr);
  }
  return out;
}

enum class TileMask { kEmpty, kNone, kPartial };

// Trailing columns of a causal tile whose keys come after every query of the tile are masked in
// every row; dropping them halves the wasted work on diagonal blocks with ascending positions.
int64_t visible_cols(const int64_t* k_pos, int64_t k0, int64_t cols, int64_t q_hi) {
  while (cols > 0 && position(k_pos, k0 + cols - 1) > q_hi)
    --cols;
  return cols;
}

TileMask classify(bool causal, PosRange q, PosRange k) {
  if (!causal || k.hi <= q.lo) return TileMask::kNone;
  if (k.lo > q.hi) return TileMask::kEmpty;
  return TileMask::kPartial;
}

// Sets masked scores (key after query) to -inf in a rows x cols tile.
template <typename T>
void apply_causal_mask(T* s, int64_t rows, int64_t cols, const int64_t* q_pos, int64_t q0, const int64_t* k_pos,
                       int64_t k0) {
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t qp = position(q_pos, q0 + i);
    T* row = s + i * cols;
    for (int64_t j = 0; j < cols; ++j)
      if (position(k_pos, k0 + j) > qp) row[j] = neg_inf<T>();
  }
}

// Reused per thread so a kernel call allocates nothing once warm.
template <typename T>
struct Scratch {
  std::vector<T> s, dp, o, m, l;
};

template <typename T>
Scratch<T>& scratch() {
  thread_local Scratch<T> sc;
  return sc;
}

// Merges the partial row (o_b * b_scale, lse_b) into (o_a, lse_a) with the stable log-sum-exp
// merge; an empty partial (lse_b = -inf) leaves the accumulator unchanged.
template <typename T>
void merge_row(T* o_a, T* lse_a, const T* o_b, T lse_b, T b_scale, int d) {
  if (lse_b == neg_inf<T>()) return;
  if (*lse_a == neg_inf<T>()) {
    for (int c = 0; c < d; ++c)
      o_a[c] = o_b[c] * b_scale;
    *lse_a = lse_b;
    return;
  }
  const T hi = std::max(*lse_a, lse_b);
  const T lse = hi + std::log1p(std::exp(-std::abs(*lse_a - lse_b)));
  const T wa = std::exp(*lse_a - lse);
  const T wb = std::exp(lse_b - lse) * b_scale;
  for (int c = 0; c < d; ++c)
    o_a[c] = wa * o_a[c] + wb * o_b[c];
  *lse_a = lse;
}

// ---- forward ---------------------------------------------------------------------------------

// Online softmax over one score tile: turns row i of s into exp(s - m_new), rescales the running
// sum l and output rows o (ld d) when the running max m grows. Rows masked so far become 0.
template <typename T>
void online_softmax_tile(T* s, int64_t rows, int64_t cols, T* m, T* l, T* o, int d) {
  for (int64_t i = 0; i < rows; ++i) {
    T* row = s + i * cols;
    const T m_new = std::max(m[i], row_max(row, cols));
    if (m_new == neg_inf<T>()) {
      std::fill(row, row + cols, T{0});
      continue;
    }
    const T sum = exp_shift_sum(row, cols, m_new);
    if (m[i] != m_new) {
      const T alpha = std::exp(m[i] - m_new);  // 0 when m[i] = -inf
      l[i] *= alpha;
      for (int c = 0; c < d; ++c)
        o[i * d + c] *= alpha;
      m[i] = m_new;
    }
    l[i] += sum;
  }
}

// One query tile of one head against every key tile, merged into the accumulator at the end.
template <typename T>
void forward_query_tile(const Geometry<T>& g, const QueryBlock<T>& q, const KeyBlock<T>& kv, int h, int64_t q0,
                        int64_t rows, PosRange q_range, const std::vector<PosRange>& k_ranges, T* acc_o, T* acc_lse,
                        int64_t acc_stride, int64_t lse_stride) {
  Scratch<T>& sc = scratch<T>();
  const int d = g.d;
  const int kvh = g.kv_of_head[h];
  sc.m.assign(rows, neg_inf<T>());
  sc.l.assign(rows, T{0});
  sc.o.assign(rows * d, T{0});
  sc.s.resize(rows * g.tile_k);
  const T* q_tile = q.q + q0 * g.q_stride + int64_t{h} * d;
  for (size_t kt = 0; kt < k_ranges.size(); ++kt) {
    const TileMask mask = classify(g.causal, q_range, k_ranges[kt]);
    if (mask == TileMask::kEmpty) continue;
    const int64_t k0 = static_cast<int64_t>(kt) * g.tile_k;
    int64_t cols = std::min(g.tile_k, kv.rows - k0);
    if (mask == TileMask::kPartial) cols = visible_cols(kv.pos, k0, cols, q_range.hi);
    const int64_t kv_off = k0 * g.kv_stride + int64_t{kvh} * d;
    gemm(false, true, rows, cols, d, g.scale, q_tile, g.q_stride, kv.k + kv_off, g.kv_stride, T{0}, sc.s.data(), cols);
    if (mask == TileMask::kPartial) apply_causal_mask(sc.s.data(), rows, cols, q.pos, q0, kv.pos, k0);
    online_softmax_tile(sc.s.data(), rows, cols, sc.m.data(), sc.l.data(), sc.o.data(), d);
    gemm(false, false, rows, d, cols, T{1}, sc.s.data(), cols, kv.v + kv_off, g.kv_stride, T{1}, sc.o.data(), d);
  }
  for (int64_t i = 0; i < rows; ++i) {
    if (sc.l[i] == T{0}) continue;  // fully masked row: accumulator unchanged
    const T lse_b = sc.m[i] + std::log(sc.l[i]);
    merge_row(acc_o + (q0 + i) * acc_stride + int64_t{h} * d, acc_lse + int64_t{h} * lse_stride + q0 + i,
              sc.o.data() + i * d, lse_b, T{1} / sc.l[i], d);
  }
}

// ---- backward --------------------------------------------------------------------------------

// Contribution of one (query tile, key tile) pair of one head to dQ, dK and dV.
template <typename T>
void backward_tile(const Geometry<T>& g, const QueryBlock<T>& q, const KeyBlock<T>& kv, const BackwardInputs<T>& in,
                   int64_t lse_stride, int h, int64_t q0, int64_t rows, int64_t k0, int64_t cols, TileMask mask, T* dq,
                   T* dk, T* dv) {
  Scratch<T>& sc = scratch<T>();
  const int d = g.d;
  const int64_t q_off = q0 * g.q_stride + int64_t{h} * d;
  const int64_t kv_off = k0 * g.kv_stride + int64_t{g.kv_of_head[h]} * d;
  const T* lse = in.lse + int64_t{h} * lse_stride + q0;
  const T* D = in.D + int64_t{h} * lse_stride + q0;
  T* p = sc.s.data();
  T* dp = sc.dp.data();
  gemm(false, true, rows, cols, d, g.scale, q.q + q_off, g.q_stride, kv.k + kv_off, g.kv_stride, T{0}, p, cols);
  if (mask == TileMask::kPartial) apply_causal_mask(p, rows, cols, q.pos, q0, kv.pos, k0);
  for (int64_t i = 0; i < rows; ++i) {
    if (lse[i] == neg_inf<T>()) {
      std::fill(p + i * cols, p + (i + 1) * cols, T{0});
    } else {
      exp_shift_sum(p + i * cols, cols, lse[i]);
    }
  }
  gemm(true, false, cols, d, rows, T{1}, p, cols, in.dO + q_off, g.q_stride, T{1}, dv + kv_off, g.kv_stride);
  gemm(false, true, rows, cols, d, T{1}, in.dO + q_off, g.q_stride, kv.v + kv_off, g.kv_stride, T{0}, dp, cols);
  for (int64_t i = 0; i < rows; ++i)
    softmax_grad(p + i * cols, dp + i * cols, cols, D[i]);
  gemm(false, false, rows, d, cols, g.scale, p, cols, kv.k + kv_off, g.kv_stride, T{1}, dq + q_off, g.q_stride);
  gemm(true, false, cols, d, rows, g.scale, p, cols, q.q + q_off, g.q_stride, T{1}, dk + kv_off, g.kv_stride);
}

}  // namespace

// ---- public entry points ---------------------------------------------------------------------

std::string blas_description() {
  return fmt::format("{} (kernels: {}, threads: {})", openblas_get_config(), openblas_get_corename(),
                     openblas_get_num_threads());
}

std::string blas_core_fix() {
  // OpenBLAS falls back to these SSE-era kernel sets for x86 models missing from its CPU table
  // (0.3.21 does not know Emerald Rapids, for one); they leave AVX2/AVX-512 units idle.
  static const char* const kGeneric[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom", "Katmai"};
  const std::string core = openblas_get_corename();
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return {};
  if (std::find(std::begin(kGeneric), std::end(kGeneric), core) == std::end(kGeneric)) return {};
  if (__builtin_cpu_supports("avx512f")) return "OPENBLAS_CORETYPE=SkylakeX";
  if (__builtin_cpu_supports("avx2")) return "OPENBLAS_CORETYPE=Haswell";
  return {};
}

void use_default_blas_threads() {
  ensure_blas_threads_once();
}

void set_blas_threads(int threads) {
  std::call_once(g_blas_threads_once, [] {});
  openblas_set_num_threads(std::max(1, threads));
}

template <typename T>
void reset_accumulator(T* acc_o, T* acc_lse, int64_t rows, int heads, int head_dim, int64_t row_stride,
                       int64_t lse_stride) {
  const int64_t stride = row_stride ? row_stride : int64_t{heads} * head_dim;
  const int64_t lstride = lse_stride ? lse_stride : rows;
  for (int64_t i = 0; i < rows; ++i)
    std::fill(acc_o + i * stride, acc_o + i * stride + int64_t{heads} * head_dim, T{0});
  for (int h = 0; h < heads; ++h)
    std::fill(acc_lse + h * lstride, acc_lse + h * lstride + rows, neg_inf<T>());
}

template <typename T>
void attention_forward(const QueryBlock<T>& q, const KeyBlock<T>& kv, const AttnShape& shape, T* acc_o, T* acc_lse,
                       int64_t acc_row_stride, int64_t lse_stride) {
  if (q.rows == 0 || kv.rows == 0) return;
  ensure_blas_threads_once();
  const Geometry<T> g = resolve<T>(shape);
  const int64_t acc_stride = acc_row_stride ? acc_row_stride : int64_t{g.heads} * g.d;
  const int64_t lstride = lse_stride ? lse_stride : q.rows;
  const std::vector<PosRange> q_ranges = tile_ranges(q.pos, q.rows, g.tile_q);
  const std::vector<PosRange> k_ranges = tile_ranges(kv.pos, kv.rows, g.tile_k);
  for (int h = 0; h < g.heads; ++h) {
    for (size_t qt = 0; qt < q_ranges.size(); ++qt) {
      const int64_t q0 = static_cast<int64_t>(qt) * g.tile_q;
      forward_query_tile(g, q, kv, h, q0, std::min(g.tile_q, q.rows - q0), q_ranges[qt], k_ranges, acc_o, acc_lse,
                         acc_stride, lstride);
    }
  }
}

template <typename T>
void attention_backward(const QueryBlock<T>& q, const KeyBlock<T>& kv, const BackwardInputs<T>& in,
                        const AttnShape& shape, T* dq, T* dk, T* dv) {
  if (q.rows == 0 || kv.rows == 0) return;
  ensure_blas_threads_once();
  const Geometry<T> g = resolve<T>(shape);
  const int64_t lstride = in.lse_stride ? in.lse_stride : q.rows;
  const std::vector<PosRange> q_ranges = tile_ranges(q.pos, q.rows, g.tile_q);
  const std::vector<PosRange> k_ranges = tile_ranges(kv.pos, kv.rows, g.tile_k);
  Scratch<T>& sc = scratch<T>();
  sc.s.resize(g.tile_q * g.tile_k);
  sc.dp.resize(g.tile_q * g.tile_k);
  // Key tiles outside, query tiles inside: the dK and dV rows of a key tile stay in cache.
  for (int h = 0; h < g.heads; ++h) {
    for (size_t kt = 0; kt < k_ranges.size(); ++kt) {
      const int64_t k0 = static_cast<int64_t>(kt) * g.tile_k;
      for (size_t qt = 0; qt < q_ranges.size(); ++qt) {
        const TileMask mask = classify(g.causal, q_ranges[qt], k_ranges[kt]);
        if (mask == TileMask::kEmpty) continue;
        const int64_t q0 = static_cast<int64_t>(qt) * g.tile_q;
        int64_t cols = std::min(g.tile_k, kv.rows - k0);
        if (mask == TileMask::kPartial) cols = visible_cols(kv.pos, k0, cols, q_ranges[qt].hi);
        backward_tile(g, q, kv, in, lstride, h, q0, std::min(g.tile_q, q.rows - q0), k0, cols, mask, dq, dk, dv);
      }
    }
  }
}

template <typename T>
void backward_prep(const T* o, const T* dO, int64_t rows, int heads, int head_dim, int64_t row_stride, T* D,
                   int64_t lse_stride) {
  const int64_t stride = row_stride ? row_stride : int64_t{heads} * head_dim;
  const int64_t lstride = lse_stride ? lse_stride : rows;
  for (int64_t i = 0; i < rows; ++i) {
    for (int h = 0; h < heads; ++h) {
      const T* orow = o + i * stride + int64_t{h} * head_dim;
      const T* grow = dO + i * stride + int64_t{h} * head_dim;
      double sum = 0;  // fp64 accumulation: D feeds every dS of the row
      for (int c = 0; c < head_dim; ++c)
        sum += static_cast<double>(orow[c]) * grow[c];
      D[h * lstride + i] = static_cast<T>(sum);
    }
  }
}

template <typename T>
void merge_partial(T* o_a, T* lse_a, const T* o_b, const T* lse_b, int64_t rows, int heads, int head_dim,
                   int64_t row_stride, int64_t lse_stride) {
  const int64_t stride = row_stride ? row_stride : int64_t{heads} * head_dim;
  const int64_t lstride = lse_stride ? lse_stride : rows;
  for (int h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t off = i * stride + int64_t{h} * head_dim;
      merge_row(o_a + off, lse_a + h * lstride + i, o_b + off, lse_b[h * lstride + i], T{1}, head_dim);
    }
  }
}

#define WF_INSTANTIATE_KERNELS(T)                                                                                 \
  template void reset_accumulator<T>(T*, T*, int64_t, int, int, int64_t, int64_t);                                \
  template void attention_forward<T>(const QueryBlock<T>&, const KeyBlock<T>&, const AttnShape&, T*, T*, int64_t, \
                                     int64_t);                                                                    \
  template void attention_backward<T>(const QueryBlock<T>&, const KeyBlock<T>&, const BackwardInputs<T>&,         \
                                      const AttnShape&, T*, T*, T*);                                              \
  template void backward_prep<T>(const T*, const T*, int64_t, int, int, int64_t, T*, int64_t);                    \
  template void merge_partial<T>(T*, T*, const T*, const T*, int64_t, int, int, int64_t, int64_t);

WF_INSTANTIATE_KERNELS(float)
WF_INSTANTIATE_KERNELS(double)

}  // namespace wallfacer::kernels
