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
  const DoubleRingKnobs& k = knobs_of<DoubleRingKnobs>(StrategyKind::DoubleRing, params);
  ContextConfig cfg;
  cfg.u = std::max(1, k.ulysses);
  cfg.c = std::max(1, params.sequence_parallel / cfg.u);
  cfg.w = std::max(1, k.window);
  cfg.zigzag = causal;
  return cfg;
}

namespace {

class DoubleRingImpl final : public StrategyImpl {
 public:
  DoubleRingImpl() : StrategyImpl(StrategyKind::DoubleRing) {}
  Feasibility own_feasibility(const StrategyParams& params, const Workload& workload, int) const override {
    const DoubleRingKnobs& k = knobs<DoubleRingKnobs>(params);
    const int u = k.ulysses, S = params.sequence_parallel;
    if (u < 1 || S % u != 0)
      return {false, fmt::format("Ulysses degree {} does not divide sequence parallel degree {}", u, S)};
    if (k.window < 1 || (S / u) % k.window != 0)
      return {false, fmt::format("context ring of {} ranks not divisible into windows of {}", S / u, k.window)};
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
          for (ContextPlacement placement : {ContextPlacement::HeadFirst, ContextPlacement::ContextFirst}) {
            if (u == 1 && placement == ContextPlacement::ContextFirst) continue;  // same GPUs as head-first
            out.push_back({.sequence_parallel = S, .data_parallel = D, .knobs = DoubleRingKnobs{u, w, placement}});
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
                             knobs<DoubleRingKnobs>(params).placement == ContextPlacement::ContextFirst);
  }
  std::vector<FlowSet> flow_sets(const Plan& plan) const override {
    return context_flow_sets(double_ring_config(plan.params, plan.workload.causal), plan);
  }
  RankProgram build_rank(const Plan& plan, int rank, TokenSetPool& pool, BuildMode mode) const override {
    return build_context_rank(double_ring_config(plan.params, plan.workload.causal), plan, rank, pool, mode);
  }
};

}  // namespace

std::unique_ptr<StrategyImpl> make_double_ring_impl() {
  return std::make_unique<DoubleRingImpl>();
}

}  // namespace wallfacer::detail
