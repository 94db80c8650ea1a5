// DeepSpeed-Ulysses (docs/algorithms.md §4): all-to-all sequence -> head, full attention over all N
// tokens for h / S heads, all-to-all back. The context engine with u = S and a single context
// member. Each pass is one attention call over the whole sequence, as DeepSpeed-Ulysses makes one
// FlashAttention call: the cost model prices an op at its own shape and mask, so cutting the pass
// into tiles would price kernel calls the framework never makes.
#include <fmt/format.h>

#include "strategies/common.hpp"
#include "strategies/context_parallel.hpp"
#include "strategies/strategy_impl.hpp"

namespace wallfacer::detail {

ContextConfig ulysses_config(const StrategyParams& params) {
  ContextConfig cfg;
  cfg.u = std::max(1, params.sequence_parallel);
  cfg.c = cfg.w = 1;
  cfg.zigzag = false;
  cfg.ring_groups = false;
  return cfg;
}

namespace {

class UlyssesImpl final : public StrategyImpl {
 public:
  UlyssesImpl() : StrategyImpl(StrategyKind::Ulysses) {}
  Feasibility own_feasibility(const StrategyParams& params, const Workload& workload, int) const override {
    return context_feasibility(ulysses_config(params), workload);
  }
  std::vector<CommGroup> groups(const StrategyParams& params, int ranks) const override {
    return context_groups(ulysses_config(params), params, ranks);
  }
  std::vector<FlowSet> flow_sets(const Plan& plan) const override { return {}; }
  RankProgram build_rank(const Plan& plan, int rank, TokenSetPool& pool, BuildMode mode) const override {
    return build_context_rank(ulysses_config(plan.params), plan, rank, pool, mode);
  }
};

}  // namespace

std::unique_ptr<StrategyImpl> make_ulysses_impl() {
  return std::make_unique<UlyssesImpl>();
}

}  // namespace wallfacer::detail
