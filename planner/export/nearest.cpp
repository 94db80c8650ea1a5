// The nearest plan a target can express: the planner's own search on the same topology,
// workload, scope, GPU count and tensor degree, keeping the fastest feasible candidate the
// target's check accepts.
#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/topology/topology.hpp>
#include "export_impl.hpp"

namespace wallfacer {

std::optional<Candidate> nearest_expressible_plan(const Plan& plan, ExportTarget target, const Topology& topology,
                                                  const CostModel& model) {
  SearchOptions options;
  options.ranks = plan.num_ranks();
  options.scope = plan.scope;
  options.tensor_degrees = {plan.params.tensor_parallel};
  const SearchResult result = search_plans(topology, plan.workload, model, options);
  for (const Candidate& candidate : result.candidates)
    if (candidate.feasible && check_export(candidate.plan, target).expressible) return candidate;
  return std::nullopt;
}

}  // namespace wallfacer
