// Naive single-process attention in fp64: the independent reference that `wallfacer run --check`
// and the tests compare every strategy against. Materialises the full score matrix per head, so
// it is meant for test sizes only.
#pragma once

#include <cstdint>
#include <vector>

namespace wallfacer::reference {

struct Shape {
  int batch = 1;
  int64_t seq = 0;
  int heads = 0, kv_heads = 0, head_dim = 0;  // heads % kv_heads == 0 (GQA group = heads / kv_heads)
  bool causal = true;                         // token i (position i) sees keys 0 .. i
  double scale = 0;                           // 0 means 1/sqrt(head_dim)
};

struct Outputs {
  std::vector<double> o, lse, dq, dk, dv;  // o/dq [B,N,h,d], lse [B,h,N], dk/dv [B,N,h_kv,d]
};

// q, dO: [B,N,h,d]; k, v: [B,N,h_kv,d]. An empty dO skips the backward pass (dq, dk, dv stay
// empty). Throws InputError when a size does not match the shape.
Outputs attention(const Shape& shape, const std::vector<double>& q, const std::vector<double>& k,
                  const std::vector<double>& v, const std::vector<double>& dO);

}  // namespace wallfacer::reference
