// Small workloads the whole-step tests share: a few layers of a model whose heads and widths split
// over tensor-parallel degrees up to 4, with 1 MiB gradient buckets so that layers hold several.
#pragma once

#include "schedule/test_plans.hpp"

namespace wallfacer::testing {

inline Workload small_step_workload() {
  Workload w = small_workload(64, 8, 4, true, 2, 4);
  w.layers = 2;
  w.ffn = 48;
  w.vocab = 64;
  w.grad_bucket_MiB = 1;
  return w;
}

}  // namespace wallfacer::testing
