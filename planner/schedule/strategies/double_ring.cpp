// LoongTrain double-ring attention (docs/algorithms.md §7), optionally under a Ulysses stage of
// degree u (LoongTrain's 2D head x context parallelism). The context ring of c = S / u ranks is
// cut into c / w windows of w consecutive ranks; an inner ring runs over each window while the
// block held at the start of the outer step moves to the next window, and backward dK,dV
// accumulators use their own intra- and inter-window flows. The loops live in ring.cpp.
#include <fmt/format.h>

#include "strategies/common.hpp"
#include "strategies/context_parallel.hpp"
#include "strategies/strategy_impl.hpp"

namespace wallfacer::detail {

ContextConfig double_ring_config(const StrategyParams& params, bool causal) {
  ContextConfig cfg;
  cfg.u = std::max(1, params.ulysses);
  cfg.c = std::max(1, params.sequence_parallel / cfg.u);
  cfg.w = std::max(1, params.window);
  cfg.zigzag = causal;
  return cfg;
}

namespace {

class DoubleRingImpl final : public StrategyImpl {
 public:
  Feasibility feasible(const StrategyParams& params, const Workload& workload, int ranks) const override {
    Feasibility generic = generic_feasibility(params, workload, ranks);
    if (!generic.ok) return generic;
    const int u = params.ulysses, S = params.sequence_parallel;
    if (u < 1 || S % u != 0)
      return {false, fmt::format("Ulysses degree {} does not divide sequence parallel degree {}", u, S)};
    if (params.window < 1 || (S / u) % params.window != 0)
      return {false, fmt::format("context ring of {} ranks not divisible into windows of {}", S / u, params.window)};
    if (params.placement != Placement::Default && params.placement != Placement::HeadFirst &&
        params.placement != Placement::ContextFirst)
      return {false, fmt::format("placement {} does not apply to double-ring", to_string(params.placement))};
    return context_feasibility(double_ring_config(params, workload.causal), workload);
  }
  std::vector<StrategyParams> enumerate(const Workload& workload, int ranks) const override {
    std::vector<StrategyParams> out;
    for (int D : data_parallel_splits(workload, ranks)) {
      const int S = ranks / D;
      for (int u : divisors(S)) {
        const int c = S / u;
        for (int w : divisors(c)) {
          if (w == 1 || w == c) continue;  // a flat ring either way
          for (Placement placement : {Placement::HeadFirst, Placement::ContextFirst}) {
            if (u == 1 && placement == Placement::ContextFirst) continue;  // same GPUs as head-first
            StrategyParams p;
            p.data_parallel = D;
            p.sequence_parallel = S;
            p.ulysses = u;
            p.window = w;
            p.placement = u == 1 ? Placement::Default : placement;
            out.push_back(p);
          }
        }
      }
    }
    return out;
  }
  std::vector<CommGroup> groups(const StrategyParams& params, int ranks) const override {
    return context_groups(double_ring_config(params, true), params, ranks);
  }
  std::vector<int> positions(const StrategyParams& params, int ranks) const override {
    return context_positions(double_ring_config(params, true), params, ranks,
                             params.placement == Placement::ContextFirst);
  }
  std::vector<FlowSet> flow_sets(const Plan& plan) const override {
    return context_flow_sets(double_ring_config(plan.params, plan.workload.causal), plan);
  }
  RankProgram build_rank(const Plan& plan, int rank, TokenSetPool& pool) const override {
    return build_context_rank(double_ring_config(plan.params, plan.workload.causal), plan, rank, pool);
  }
};

}  // namespace

std::unique_ptr<StrategyImpl> make_double_ring_impl() {
  return std::make_unique<DoubleRingImpl>();
}

}  // namespace wallfacer::detail
