// Small workloads and hand-built plans for schedule tests (no topology needed), plus helpers
// that compare programs and sum their work.
#pragma once

#include <string>
#include <vector>

#include <wallfacer/plan/plan.hpp>
#include <wallfacer/schedule/schedule.hpp>
#include <wallfacer/schedule/strategy.hpp>

namespace wallfacer::testing {

Workload small_workload(int64_t seq, int heads, int kv_heads, bool causal, int batch = 1, int head_dim = 4);
// A plan with rank r on GPU r and the strategy's canonical groups.
Plan hand_plan(StrategyKind kind, const StrategyParams& params, const Workload& workload);
StrategyParams seq_params(int S, int D = 1);

// Structural equality of two programs whose token ids come from different pools.
bool same_program(const RankProgram& a, const TokenSetPool& pa, const RankProgram& b, const TokenSetPool& pb,
                  std::string* why);

struct Totals {
  double fwd_flops = 0, bwd_flops = 0;
  int64_t fwd_p2p = 0, bwd_p2p = 0;    // bytes sent
  int64_t fwd_coll = 0, bwd_coll = 0;  // collective bytes sent (weight-gradient all-reduce excluded)
};
Totals totals(const RankProgram& program);

}  // namespace wallfacer::testing
