// The whole-step cost (cost_model.hpp, docs/cost-model.md "The whole step"): the timed ranks'
// step templates are unrolled to every layer and timed like any schedule.
#include <fmt/format.h>

#include <algorithm>
#include <set>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/core/log.hpp>
#include <wallfacer/cost/compute_time.hpp>
#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/schedule/step.hpp>
#include <wallfacer/schedule/strategy.hpp>

namespace wallfacer {
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
    count_transfers(topology_, plan, s, c.parts);
    for (double& count : c.parts.transfers_per_layer)
      count /= layers;
    return c;
  };

  // Every layer is timed: a few timed layers extended linearly were tried, and the per-layer
  // increment of the list schedule keeps changing for many layers where the backward's gradient
  // buckets queue up behind the strategy's collectives (docs/cost-model.md).
  const int L = w.layers;
  CostBreakdown cost = time_layers(L);
  cost.layers_timed = L;
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

double CostModel::step_compute_bound_ms(const Plan& plan) const {
  StepBuilder builder(plan);
  ComputeTimer timer(topology_.gpu(), calibration_, plan.workload);
  const int L = plan.workload.layers;
  double busiest = 0;
  TokenSetPool pool;
  for (int rank : timed_ranks(plan)) {
    const StepTemplate t = builder.build_template(rank, pool);
    double seconds = 0;
    for (uint32_t i = 0; i < t.program.ops.size(); ++i) {
      const Op& op = t.program.ops[i];
      if (op.stream != Stream::Compute) continue;
      seconds += timer.seconds(op, pool) * (in_layer_section(t.sections, i) ? L : 1);
    }
    busiest = std::max(busiest, seconds);
  }
  return busiest * 1e3;
}

}  // namespace wallfacer
