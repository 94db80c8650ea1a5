// Naive fp64 attention: full score matrix per (batch, head), softmax, P V; backward through the
// softmax Jacobian. Deliberately shares nothing with the blockwise kernels.
#include <wallfacer/runtime/reference_attention.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include <wallfacer/core/errors.hpp>

namespace wallfacer::reference {
namespace {

void check_size(const char* name, const std::vector<double>& v, size_t expected) {
  if (v.size() != expected)
    throw InputError(fmt::format("reference attention: {} has {} elements, expected {}", name, v.size(), expected));
}

// Index helpers for [B,N,heads,d] tensors.
struct Layout {
  int64_t seq;
  int heads, d;
  size_t at(int b, int64_t i, int h) const {
    return ((static_cast<size_t>(b) * seq + i) * heads + h) * static_cast<size_t>(d);
  }
};

double dot(const double* a, const double* b, int d) {
  double s = 0;
  for (int c = 0; c < d; ++c)
    s += a[c] * b[c];
  return s;
}

// Softmax probabilities P [N][N] of one (batch, head); fills lse (-inf for a row with no key).
std::vector<double> probabilities(const Shape& sh, double scale, const double* q, const double* k, const Layout& ql,
                                  const Layout& kl, int b, int h, int kvh, double* lse_row) {
  const int64_t n = sh.seq;
  std::vector<double> p(static_cast<size_t>(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    double* row = p.data() + i * n;
    const int64_t last = sh.causal ? i : n - 1;
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j <= last; ++j) {
      row[j] = scale * dot(q + ql.at(b, i, h), k + kl.at(b, j, kvh), sh.head_dim);
      m = std::max(m, row[j]);
    }
    if (last < 0) {
      lse_row[i] = -std::numeric_limits<double>::infinity();
      continue;
    }
    double sum = 0;
    for (int64_t j = 0; j <= last; ++j)
      sum += (row[j] = std::exp(row[j] - m));
    for (int64_t j = 0; j <= last; ++j)
      row[j] /= sum;
    lse_row[i] = m + std::log(sum);
  }
  return p;
}

// Everything one (batch, head) pass needs: inputs, layouts, the head pair and the outputs.
struct HeadPass {
  const Shape& sh;
  const std::vector<double>&q, &k, &v, &dO;
  Layout ql, kl;
  double scale;
  int b, h, kvh;
  Outputs& out;
};

void forward_head(const HeadPass& hp, const std::vector<double>& p) {
  const int64_t n = hp.sh.seq;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int c = 0; c < hp.sh.head_dim; ++c)
        hp.out.o[hp.ql.at(hp.b, i, hp.h) + c] += p[i * n + j] * hp.v[hp.kl.at(hp.b, j, hp.kvh) + c];
}

// dS = P * (dP - sum_j P dP): the softmax Jacobian applied to dP = dO V^T.
void backward_head(const HeadPass& hp, const std::vector<double>& p) {
  const int64_t n = hp.sh.seq;
  const int d = hp.sh.head_dim;
  std::vector<double> dp(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const size_t qi = hp.ql.at(hp.b, i, hp.h);
    const double* g = hp.dO.data() + qi;
    double pdp = 0;
    for (int64_t j = 0; j < n; ++j) {
      dp[j] = dot(g, hp.v.data() + hp.kl.at(hp.b, j, hp.kvh), d);
      pdp += p[i * n + j] * dp[j];
    }
    for (int64_t j = 0; j < n; ++j) {
      const size_t kj = hp.kl.at(hp.b, j, hp.kvh);
      const double pij = p[i * n + j];
      const double ds = pij * (dp[j] - pdp) * hp.scale;
      for (int c = 0; c < d; ++c) {
        hp.out.dv[kj + c] += pij * g[c];
        hp.out.dq[qi + c] += ds * hp.k[kj + c];
        hp.out.dk[kj + c] += ds * hp.q[qi + c];
      }
    }
  }
}

}  // namespace

Outputs attention(const Shape& sh, const std::vector<double>& q, const std::vector<double>& k,
                  const std::vector<double>& v, const std::vector<double>& dO) {
  if (sh.batch <= 0 || sh.seq < 0 || sh.heads <= 0 || sh.kv_heads <= 0 || sh.head_dim <= 0 ||
      sh.heads % sh.kv_heads != 0)
    throw InputError(fmt::format("reference attention: bad shape B={} N={} h={} h_kv={} d={}", sh.batch, sh.seq,
                                 sh.heads, sh.kv_heads, sh.head_dim));
  const Layout ql{sh.seq, sh.heads, sh.head_dim}, kl{sh.seq, sh.kv_heads, sh.head_dim};
  const size_t q_elems = ql.at(sh.batch, 0, 0), kv_elems = kl.at(sh.batch, 0, 0);
  check_size("q", q, q_elems);
  check_size("k", k, kv_elems);
  check_size("v", v, kv_elems);
  const bool backward = !dO.empty();
  if (backward) check_size("dO", dO, q_elems);
  const double scale = sh.scale != 0 ? sh.scale : 1.0 / std::sqrt(static_cast<double>(sh.head_dim));
  const int group = sh.heads / sh.kv_heads;

  Outputs out;
  out.o.assign(q_elems, 0.0);
  out.lse.assign(static_cast<size_t>(sh.batch) * sh.heads * sh.seq, 0.0);
  if (backward) {
    out.dq.assign(q_elems, 0.0);
    out.dk.assign(kv_elems, 0.0);
    out.dv.assign(kv_elems, 0.0);
  }
  for (int b = 0; b < sh.batch; ++b) {
    for (int h = 0; h < sh.heads; ++h) {
      const HeadPass hp{sh, q, k, v, dO, ql, kl, scale, b, h, h / group, out};
      double* lse_row = out.lse.data() + (static_cast<size_t>(b) * sh.heads + h) * sh.seq;
      const std::vector<double> p = probabilities(sh, scale, q.data(), k.data(), ql, kl, b, h, hp.kvh, lse_row);
      forward_head(hp, p);
      if (backward) backward_head(hp, p);
    }
  }
  return out;
}

}  // namespace wallfacer::reference
