// A one-layer workload with hand-picked shapes, and a plan for it that needs no topology, for tests
// that need exact small sizes rather than a model preset.
#pragma once

#include <cstdint>

#include <wallfacer/plan/plan.hpp>
#include <wallfacer/plan/workload.hpp>
#include <wallfacer/schedule/strategy.hpp>

namespace wallfacer::test {

struct WorkloadShape {
  int64_t seq = 0;
  int heads = 1, kv_heads = 1, head_dim = 8, batch = 1;
  bool causal = true;
  DType dtype = DType::BF16;
  int64_t vocab = 128;
};

inline Workload synthetic_workload(const WorkloadShape& shape) {
  Workload w;
  w.model = "test";
  w.layers = 1;
  w.heads = shape.heads;
  w.kv_heads = shape.kv_heads;
  w.head_dim = shape.head_dim;
  w.hidden = int64_t(shape.heads) * shape.head_dim;
  w.ffn = 4 * w.hidden;
  w.vocab = shape.vocab;
  w.seq = shape.seq;
  w.batch = shape.batch;
  w.dtype = shape.dtype;
  w.causal = shape.causal;
  return w;
}

// Rank r on GPU r of one node of topology "none", with the strategy's canonical groups.
inline Plan topology_free_plan(StrategyKind kind, const StrategyParams& params, const Workload& workload) {
  Plan plan;
  plan.topology_name = "none";
  plan.topology_nodes = 1;
  plan.workload = workload;
  plan.strategy = kind;
  plan.params = params;
  const int P = params.sequence_parallel * params.data_parallel * params.tensor_parallel * params.pipeline_parallel;
  for (int r = 0; r < P; ++r)
    plan.ranks.push_back(RankSlot{r, r, 0, r, ""});
  plan.groups = make_groups(kind, params, P);
  return plan;
}

}  // namespace wallfacer::test
