// The candidates a search tries (enumerate.hpp).
#include "enumerate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/schedule/strategy.hpp>

namespace wallfacer::detail {
namespace {

// The workload one tensor slice sees.
Workload tensor_slice_workload(Workload w, int T) {
  w.heads /= T;
  w.kv_heads /= T;
  w.hidden = int64_t(w.heads) * w.head_dim;
  return w;
}

// The candidate of `plan` under the rules of its strategy, and the dtype problem if any.
Candidate checked(Plan plan, int ranks, const std::string& dtype_problem) {
  Candidate c;
  const Feasibility rules = check_feasible(plan.strategy, plan.params, plan.workload, ranks);
  c.reason = !rules.ok ? rules.reason : dtype_problem;
  c.plan = std::move(plan);
  return c;
}

// Interleaved 1F1B (docs/step.md): a step search takes every pipelined candidate again with each
// further count of virtual stages that divides its stage's layers and whose Pp divides its
// micro-batches, under the same rules.
void add_virtual_stages(std::vector<Candidate>& candidates, const SearchOptions& options, int ranks,
                        const std::string& dtype_problem) {
  if (options.scope != Scope::Step) return;
  const size_t plain = candidates.size();
  for (size_t i = 0; i < plain; ++i)
    for (int v : options.virtual_stages) {
      const Plan& p = candidates[i].plan;
      const int Pp = p.params.pipeline_parallel;
      if (!candidates[i].reason.empty() || v <= 1 || Pp <= 1) continue;
      if (p.workload.layers % (Pp * v) != 0 || p.workload.microbatches % Pp != 0) continue;
      Plan interleaved = p;
      interleaved.params.virtual_stages = v;
      candidates.push_back(checked(std::move(interleaved), ranks, dtype_problem));
    }
}

}  // namespace

bool tensor_slice_fits(const Workload& workload, int T) {
  return workload.heads % T == 0 && workload.kv_heads % T == 0;
}

std::vector<Candidate> enumerate_candidates(const Topology& topology, const Workload& workload,
                                            const SearchOptions& options, int ranks) {
  std::string dtype_problem = dtype_issue(topology.gpu(), workload.dtype);
  if (dtype_problem.empty() && workload.fp8_linear && topology.gpu().peak_fp8_tflops <= 0)
    dtype_problem = fmt::format("{} has no fp8 peak in topology '{}' (peak_fp8_tflops); drop --fp8-linear",
                                topology.gpu().name, topology.name());
  std::vector<StrategyKind> strategies =
      options.strategy ? std::vector<StrategyKind>{*options.strategy} : all_strategies();
  std::vector<Candidate> candidates;
  for (int Pp : options.pipeline_degrees)
    for (int T : options.tensor_degrees)
      for (StrategyKind strategy : strategies) {
        if (T < 1 || Pp < 1 || ranks % (T * Pp) != 0 || workload.layers % Pp != 0) continue;
        // Pipeline stages split the model's layers: one attention layer has none to split (every
        // stage would compute the same blocks).
        if (Pp > 1 && options.scope != Scope::Step) continue;
        if (T > 1 && !tensor_slice_fits(workload, T)) continue;
        const Workload slice = T == 1 ? workload : tensor_slice_workload(workload, T);
        for (StrategyParams params : enumerate_params(strategy, slice, ranks / (T * Pp))) {
          params.tensor_parallel = T;
          params.pipeline_parallel = Pp;
          if (options.sequence_parallel > 0 && params.sequence_parallel != options.sequence_parallel) continue;
          if (options.data_parallel > 0 && params.data_parallel != options.data_parallel) continue;
          Plan plan;
          plan.strategy = strategy;
          plan.params = params;
          plan.workload = workload;
          if (Pp > 1 && options.auto_microbatches)
            plan.workload.microbatches = std::max(1, workload.batch / params.data_parallel);
          plan.topology_name = topology.name();
          candidates.push_back(checked(std::move(plan), ranks, dtype_problem));
        }
      }
  add_virtual_stages(candidates, options, ranks, dtype_problem);
  return candidates;
}

}  // namespace wallfacer::detail
