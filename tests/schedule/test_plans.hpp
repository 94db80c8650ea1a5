// Small workloads and hand-built plans for schedule tests (no topology needed), plus helpers
// that compare programs and sum their work.
#pragma once

#include <initializer_list>
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

// A tensor parallel degree and a pipeline parallel degree.
struct Split {
  int tensor = 1, pipeline = 1;
};
// visit(plan, split) for each split in turn and every feasible parameter set of every strategy
// on `ranks` ranks under it (the sequence-parallel part enumerated on the heads of one tensor
// slice), placed by hand_plan.
template <typename Visit>
void for_each_split_plan(const Workload& workload, int ranks, std::initializer_list<Split> splits, Visit&& visit) {
  for (const Split& split : splits) {
    Workload slice = workload;
    slice.heads /= split.tensor;
    slice.kv_heads /= split.tensor;
    for (StrategyKind kind : all_strategies())
      for (StrategyParams params : enumerate_params(kind, slice, ranks / (split.tensor * split.pipeline))) {
        params.tensor_parallel = split.tensor;
        params.pipeline_parallel = split.pipeline;
        if (check_feasible(kind, params, workload, ranks).ok) visit(hand_plan(kind, params, workload), split);
      }
  }
}

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
