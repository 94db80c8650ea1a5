// The whole-step cost (cost_model.hpp, docs/cost-model.md "The whole step"): the timed ranks'
// step templates are unrolled to a few layers and timed like any schedule; where each added layer
// adds the same time, the step is extended to the model's depth, otherwise every layer is timed.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/core/log.hpp>
#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/schedule/step.hpp>
#include <wallfacer/schedule/strategy.hpp>

namespace wallfacer {
namespace {

// Layers unrolled to test periodicity: the step of n+1 layers minus the step of n, for the last
// two n, must agree to this relative tolerance for the extension to be used.
constexpr int kProbeLayers = 4;
constexpr double kPeriodTolerance = 1e-9;

}  // namespace

CostBreakdown CostModel::evaluate_step(const Plan& plan) const {
  WF_ASSERT(plan.scope == Scope::Step, "evaluate_step needs a plan of step scope");
  const Workload& w = plan.workload;
  StepBuilder builder(plan);
  // The ranks the attention cost would time, within the same op budget counted on templates.
  std::vector<StepTemplate> templates;
  Schedule attention;  // the timed ranks' attention programs, for memory and the attention time
  build_timed(plan, attention);
  TokenSetPool pool;
  for (const RankProgram& program : attention.ranks)
    templates.push_back(builder.build_template(program.rank, pool));

  auto time_layers = [&](int layers) {
    Schedule s;
    s.dims = builder.dims();
    s.flow_sets = builder.flow_sets();
    s.tokens = pool;
    for (const StepTemplate& t : templates)
      s.ranks.push_back(unroll(t, layers));
    CostBreakdown c = evaluate_times(plan, s);
    c.volume = comm_volume(s);
    return c;
  };

  CostBreakdown cost;
  const int L = w.layers;
  if (L <= kProbeLayers) {
    cost = time_layers(L);
    cost.layers_timed = L;
  } else {
    const CostBreakdown a = time_layers(kProbeLayers - 2), b = time_layers(kProbeLayers - 1),
                        c = time_layers(kProbeLayers);
    const double d1 = b.step_ms - a.step_ms, d2 = c.step_ms - b.step_ms;
    const double df = c.forward_ms - b.forward_ms;
    if (std::abs(d1 - d2) <= kPeriodTolerance * c.step_ms &&
        std::abs((b.forward_ms - a.forward_ms) - df) <= kPeriodTolerance * c.step_ms) {
      const int more = L - kProbeLayers;
      cost = c;
      cost.step_ms = c.step_ms + more * d2;
      cost.forward_ms = c.forward_ms + more * df;
      cost.compute_ms = c.compute_ms + more * (c.compute_ms - b.compute_ms);
      auto extend = [&](int64_t CommVolume::*field) {
        cost.volume.*field = c.volume.*field + more * (c.volume.*field - b.volume.*field);
      };
      for (auto field :
           {&CommVolume::p2p_forward, &CommVolume::p2p_backward, &CommVolume::collective_forward,
            &CommVolume::collective_backward, &CommVolume::messages_forward, &CommVolume::messages_backward})
        extend(field);
      cost.exposed_comm_ms = std::max(0.0, c.exposed_comm_ms + more * (d2 - (c.compute_ms - b.compute_ms)));
      cost.layers_timed = kProbeLayers;
    } else {
      WF_LOG_DEBUG("cost", "{}: layers not periodic ({} vs {} ms per layer), timing all {}", to_string(plan.strategy),
                   d1, d2, L);
      cost = time_layers(L);
      cost.layers_timed = L;
    }
  }
  cost.backward_ms = cost.step_ms - cost.forward_ms;
  cost.memory = step_memory(plan, attention);
  // The attention alone: its own schedule's step, once per layer.
  const CostBreakdown layer = evaluate_times(plan, attention);
  cost.attention_ms = layer.step_ms * L;
  cost.attention_flops = layer.attention_flops;
  cost.model_flops = step_model_flops(w);
  const double step_s = cost.step_ms * 1e-3;
  const double peak = kernel_peak_tflops(topology_.gpu(), w.dtype) * 1e12;
  cost.tokens_per_s = step_s > 0 ? double(w.seq) * w.batch / step_s : 0;
  cost.mfu = step_s > 0 ? cost.model_flops / (step_s * plan.num_ranks() * peak) : 0;
  return cost;
}

}  // namespace wallfacer
