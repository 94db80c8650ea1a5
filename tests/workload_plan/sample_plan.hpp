// A plan with every feature the file format has: a GQA workload, WallFacer parameters, ranks on
// two nodes with NICs, several group kinds, a prediction with doubles that need all 17 digits,
// and names that must be quoted in YAML.
#pragma once

#include <string>

#include <wallfacer/plan/plan.hpp>

namespace wallfacer::testing {

inline Workload gqa_workload() {
  Workload w;
  w.model = "llama-3-8b";
  w.layers = 32;
  w.hidden = 4096;
  w.heads = 32;
  w.kv_heads = 8;
  w.head_dim = 128;
  w.ffn = 14336;
  w.vocab = 128256;
  w.gated_ffn = true;
  w.seq = 131072;
  w.batch = 2;
  w.dtype = DType::BF16;
  w.causal = true;
  w.zero_stage = 2;
  return w;
}

// 8 ranks on `nodes` x (8 / nodes) GPUs; WallFacer C = 2: 4 teams of 2, sub-rings of length 2.
inline Plan sample_plan(int nodes = 2, const std::string& topology_name = "two-node",
                        const std::string& hash = "0f3a9c21d4e5b687") {
  Plan plan;
  plan.topology_name = topology_name;
  plan.topology_hash = hash;
  plan.topology_nodes = nodes;
  plan.workload = gqa_workload();
  plan.strategy = StrategyKind::WallFacer;
  plan.params.sequence_parallel = 8;
  plan.params.data_parallel = 1;
  plan.params.knobs = WallFacerKnobs{.team = 2, .placement = TeamPlacement::CollectIntra};
  const int per_node = 8 / nodes;
  for (int r = 0; r < 8; ++r) {
    const int node = r / per_node, local = r % per_node;
    plan.ranks.push_back({r, r, node, local, "n" + std::to_string(node) + "/nic" + std::to_string(local)});
  }
  for (int t = 0; t < 4; ++t)
    plan.groups.push_back({"team" + std::to_string(t), GroupKind::Team, {2 * t, 2 * t + 1}});
  plan.groups.push_back({"subring.g0.a0", GroupKind::SubRing, {0, 2}});
  plan.groups.push_back({"subring.g0.a1", GroupKind::SubRing, {3, 1}});
  plan.groups.push_back({"world", GroupKind::World, {0, 1, 2, 3, 4, 5, 6, 7}});
  Prediction p;
  p.forward_ms = 0.1;
  p.backward_ms = 1.0 / 3.0;
  p.step_ms = 12345.678901234567;
  p.p2p_bytes_forward = 9007199254740993;  // 2^53 + 1: not representable as a double
  p.p2p_bytes_backward = 3;
  p.collective_bytes_forward = 0;
  p.collective_bytes_backward = 1 << 30;
  p.memory_GiB = 71.25e-300;
  p.mfu = 0.4567891234567891;
  plan.prediction = p;
  return plan;
}

}  // namespace wallfacer::testing
