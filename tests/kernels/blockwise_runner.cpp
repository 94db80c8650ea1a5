// Blockwise driver for the kernel tests: slices the inputs the way an executor would (query
// blocks, key blocks, head ranges, permuted token storage) and calls the public kernel API.
#include "blockwise_runner.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

#include <wallfacer/runtime/attention_kernels.hpp>

namespace wallfacer::kernel_test {
namespace {

template <typename T>
std::vector<T> permute_rows(const std::vector<double>& src, const std::vector<int64_t>& perm, int64_t width) {
  std::vector<T> out(src.size());
  for (size_t r = 0; r < perm.size(); ++r)
    for (int64_t c = 0; c < width; ++c)
      out[r * width + c] = static_cast<T>(src[perm[r] * width + c]);
  return out;
}

template <typename T>
std::vector<double> unpermute_rows(const std::vector<T>& src, const std::vector<int64_t>& perm, int64_t width) {
  std::vector<double> out(src.size());
  for (size_t r = 0; r < perm.size(); ++r)
    for (int64_t c = 0; c < width; ++c)
      out[perm[r] * width + c] = static_cast<double>(src[r * width + c]);
  return out;
}

// Everything the per-block calls share, in storage (permuted) order.
template <typename T>
struct Problem {
  reference::Shape sh;
  int64_t n, qw, kw;  // rows, q row width, kv row width
  int group;
  std::vector<int64_t> pos;
  std::vector<T> q, k, v, dO, o, lse, dq, dk, dv, D;
};

struct HeadRange {
  int h0, h1, kv0, kv1;
};

template <typename T>
kernels::AttnShape block_shape(const Problem<T>& p, const HeadRange& hr, const Blocking& b) {
  kernels::AttnShape s;
  s.heads = hr.h1 - hr.h0;
  s.kv_heads = hr.kv1 - hr.kv0;
  s.head_dim = p.sh.head_dim;
  s.q_head_offset = hr.h0;
  s.kv_head_offset = hr.kv0;
  s.group = p.group;
  s.q_row_stride = p.qw;
  s.kv_row_stride = p.kw;
  s.causal = p.sh.causal;
  s.tile_q = b.tile_q;
  s.tile_k = b.tile_k;
  return s;
}

template <typename T>
void forward_block(Problem<T>& p, const HeadRange& hr, const Blocking& b, int64_t q0, int64_t q1, int64_t k0,
                   int64_t k1, T* acc_o, T* acc_lse) {
  const int d = p.sh.head_dim;
  kernels::QueryBlock<T> qb{p.q.data() + q0 * p.qw + hr.h0 * d, p.pos.data() + q0, q1 - q0};
  kernels::KeyBlock<T> kb{p.k.data() + k0 * p.kw + hr.kv0 * d, p.v.data() + k0 * p.kw + hr.kv0 * d, p.pos.data() + k0,
                          k1 - k0};
  kernels::attention_forward(qb, kb, block_shape(p, hr, b), acc_o + q0 * p.qw + hr.h0 * d, acc_lse + hr.h0 * p.n + q0,
                             p.qw, p.n);
}

template <typename T>
void backward_block(Problem<T>& p, const HeadRange& hr, const Blocking& b, int64_t q0, int64_t q1, int64_t k0,
                    int64_t k1) {
  const int d = p.sh.head_dim;
  const int64_t qo = q0 * p.qw + hr.h0 * d, ko = k0 * p.kw + hr.kv0 * d, lo = hr.h0 * p.n + q0;
  kernels::QueryBlock<T> qb{p.q.data() + qo, p.pos.data() + q0, q1 - q0};
  kernels::KeyBlock<T> kb{p.k.data() + ko, p.v.data() + ko, p.pos.data() + k0, k1 - k0};
  kernels::BackwardInputs<T> in{p.dO.data() + qo, p.lse.data() + lo, p.D.data() + lo, p.n};
  kernels::attention_backward(qb, kb, in, block_shape(p, hr, b), p.dq.data() + qo, p.dk.data() + ko, p.dv.data() + ko);
}

std::vector<HeadRange> head_ranges(const reference::Shape& sh, const std::vector<int>& bounds) {
  std::vector<int> hb = bounds.empty() ? std::vector<int>{0, sh.heads} : bounds;
  const int group = sh.heads / sh.kv_heads;
  std::vector<HeadRange> out;
  for (size_t i = 0; i + 1 < hb.size(); ++i)
    out.push_back({hb[i], hb[i + 1], hb[i] / group, (hb[i + 1] - 1) / group + 1});
  return out;
}

template <typename T>
void run_forward(Problem<T>& p, const Blocking& b, const std::vector<HeadRange>& heads) {
  std::mt19937 rng(b.seed);
  kernels::reset_accumulator(p.o.data(), p.lse.data(), p.n, p.sh.heads, p.sh.head_dim, 0, 0);
  std::vector<T> part_o(p.o.size()), part_lse(p.lse.size());
  for (size_t qi = 0; qi + 1 < b.q_bounds.size(); ++qi) {
    const int64_t q0 = b.q_bounds[qi], q1 = b.q_bounds[qi + 1];
    std::vector<size_t> order(b.k_bounds.size() - 1);
    std::iota(order.begin(), order.end(), 0);
    if (b.shuffle_key_blocks) std::shuffle(order.begin(), order.end(), rng);
    for (size_t ki : order) {
      for (const HeadRange& hr : heads) {
        T* acc_o = p.o.data();
        T* acc_lse = p.lse.data();
        if (b.via_partials) {
          kernels::reset_accumulator(part_o.data(), part_lse.data(), p.n, p.sh.heads, p.sh.head_dim, 0, 0);
          acc_o = part_o.data();
          acc_lse = part_lse.data();
        }
        forward_block(p, hr, b, q0, q1, b.k_bounds[ki], b.k_bounds[ki + 1], acc_o, acc_lse);
        if (b.via_partials) {
          const int d = p.sh.head_dim;
          const int64_t off = q0 * p.qw + hr.h0 * d, loff = hr.h0 * p.n + q0;
          kernels::merge_partial(p.o.data() + off, p.lse.data() + loff, part_o.data() + off, part_lse.data() + loff,
                                 q1 - q0, hr.h1 - hr.h0, d, p.qw, p.n);
        }
      }
    }
  }
}

}  // namespace

Inputs random_inputs(const reference::Shape& shape, uint32_t seed, double q_scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> dist(0.0, 1.0);
  const size_t qn = static_cast<size_t>(shape.batch) * shape.seq * shape.heads * shape.head_dim;
  const size_t kn = static_cast<size_t>(shape.batch) * shape.seq * shape.kv_heads * shape.head_dim;
  Inputs in{shape, std::vector<double>(qn), std::vector<double>(kn), std::vector<double>(kn), std::vector<double>(qn)};
  for (double& x : in.q)
    x = q_scale * dist(rng);
  for (double& x : in.k)
    x = dist(rng);
  for (double& x : in.v)
    x = dist(rng);
  for (double& x : in.dO)
    x = dist(rng);
  return in;
}

template <typename T>
reference::Outputs run_blockwise(const Inputs& in, const Blocking& b) {
  if (in.shape.batch != 1) throw std::invalid_argument("run_blockwise: batch must be 1");
  Problem<T> p;
  p.sh = in.shape;
  p.n = p.sh.seq;
  p.qw = int64_t{p.sh.heads} * p.sh.head_dim;
  p.kw = int64_t{p.sh.kv_heads} * p.sh.head_dim;
  p.group = p.sh.heads / p.sh.kv_heads;
  p.pos = b.permutation;
  if (p.pos.empty()) {
    p.pos.resize(p.n);
    std::iota(p.pos.begin(), p.pos.end(), 0);
  }
  p.q = permute_rows<T>(in.q, p.pos, p.qw);
  p.dO = permute_rows<T>(in.dO, p.pos, p.qw);
  p.k = permute_rows<T>(in.k, p.pos, p.kw);
  p.v = permute_rows<T>(in.v, p.pos, p.kw);
  p.o.resize(p.q.size());
  p.lse.resize(static_cast<size_t>(p.sh.heads) * p.n);
  p.D.resize(p.lse.size());
  p.dq.assign(p.q.size(), T{0});
  p.dk.assign(p.k.size(), T{0});
  p.dv.assign(p.k.size(), T{0});
  const std::vector<HeadRange> heads = head_ranges(p.sh, b.head_bounds);
  run_forward(p, b, heads);
  kernels::backward_prep(p.o.data(), p.dO.data(), p.n, p.sh.heads, p.sh.head_dim, 0, p.D.data(), 0);
  for (size_t qi = 0; qi + 1 < b.q_bounds.size(); ++qi)
    for (size_t ki = 0; ki + 1 < b.k_bounds.size(); ++ki)
      for (const HeadRange& hr : heads)
        backward_block(p, hr, b, b.q_bounds[qi], b.q_bounds[qi + 1], b.k_bounds[ki], b.k_bounds[ki + 1]);

  reference::Outputs out;
  out.o = unpermute_rows(p.o, p.pos, p.qw);
  out.dq = unpermute_rows(p.dq, p.pos, p.qw);
  out.dk = unpermute_rows(p.dk, p.pos, p.kw);
  out.dv = unpermute_rows(p.dv, p.pos, p.kw);
  out.lse.resize(p.lse.size());
  for (int h = 0; h < p.sh.heads; ++h)
    for (int64_t r = 0; r < p.n; ++r)
      out.lse[h * p.n + p.pos[r]] = static_cast<double>(p.lse[h * p.n + r]);
  return out;
}

template reference::Outputs run_blockwise<float>(const Inputs&, const Blocking&);
template reference::Outputs run_blockwise<double>(const Inputs&, const Blocking&);

double max_relative_error(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i]) continue;  // also equal infinities (empty rows)
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return std::numeric_limits<double>::infinity();
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return scale == 0 ? diff : diff / scale;
}

std::vector<int64_t> uneven_bounds(int64_t n, int count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int64_t> cuts(n - 1);
  std::iota(cuts.begin(), cuts.end(), 1);
  std::shuffle(cuts.begin(), cuts.end(), rng);
  cuts.resize(count - 1);
  cuts.push_back(0);
  cuts.push_back(n);
  std::sort(cuts.begin(), cuts.end());
  return cuts;
}

}  // namespace wallfacer::kernel_test
