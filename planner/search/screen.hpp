// Internal to the topology scheduler: a closed-form step-time estimate per candidate, from its
// strategy parameters alone (no plan, no schedule). On large clusters the heuristic search builds
// schedules only for the candidates this estimate ranks best; the ranking itself always comes from
// the schedule-based cost model.
#pragma once

#include <optional>

#include <wallfacer/cost/calibration.hpp>
#include <wallfacer/plan/plan.hpp>
#include <wallfacer/topology/topology.hpp>

namespace wallfacer::detail {

// Estimated forward + backward milliseconds of one attention layer (docs/algorithms.md §10.2, §10.4).
// All-reduces as `all_reduce` where given, else the cheaper of ring and tree (the plan's rule).
double screen_estimate_ms(StrategyKind strategy, const StrategyParams& params, const Workload& workload,
                          const Topology& topology, const Calibration& calibration,
                          std::optional<AllReduceAlgorithm> all_reduce = std::nullopt);

}  // namespace wallfacer::detail
