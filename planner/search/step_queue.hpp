// The keys of the whole step's queue (search.cpp, price_steps; docs/cost-model.md "The whole
// step"): what a candidate's key is, when it prunes the candidate, and the reason the ranking
// gives for a pruned one.
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <optional>
#include <string>

#include <wallfacer/cost/cost_model.hpp>

namespace wallfacer::detail {

struct QueuedStep {
  double key = 0;
  size_t order = 0;    // rank in compute-bound order: ties keep it
  bool timed = false;  // the key is the timed bound
};

// Whether `q` prunes its candidate at `step`, the step it must beat: the compute bound at the
// step, the timed bound only above it, so that a candidate building the same schedule as the best
// one is still priced (and merged with it).
inline bool beyond(const QueuedStep& q, double step) {
  return q.timed ? q.key > step : q.key >= step;
}

// Where a step priced with a stop at `stop_ms` (CostModel::evaluate_step) rises above it while
// groups of programs were left to time: the first latest end past it and how many groups that
// took. The same for a pricing stopped at any higher stop, or not stopped: a pricing times its
// groups in one order, so the first ones agree. But a pricing stopped at a higher stop may have
// stopped at that group on its latest end with its compute at full speed, never timed slowed
// (CostBreakdown::stopped_at_full_speed); that end, which every pricing knows, is given where it
// is past `stop_ms` (`at_full_speed`). None when only the last group (the whole step) is past the
// stop, or nothing is.
struct ColumnsAbove {
  size_t columns = 0;
  double latest_ms = 0;
  bool at_full_speed = false;
};
inline std::optional<ColumnsAbove> columns_above(const CostBreakdown& cost, double stop_ms) {
  const std::vector<double>& ends = cost.latest_ends_ms;
  const std::vector<double>& full_speed = cost.latest_full_speed_ends_ms;
  const size_t before_last = cost.stopped ? ends.size() : ends.empty() ? 0 : ends.size() - 1;
  for (size_t k = 0; k < before_last; ++k) {
    if (!(ends[k] > stop_ms)) continue;
    if (k < full_speed.size() && full_speed[k] > stop_ms) return ColumnsAbove{k + 1, full_speed[k], true};
    return ColumnsAbove{k + 1, ends[k], false};
  }
  return std::nullopt;
}

// The reason a pruned candidate is listed with, at its key.
// `synchronisation`: an untimed key is the synchronisation stream's bound, not the compute's.
inline std::string pruned_reason(const QueuedStep& q, bool pipelined, bool synchronisation) {
  if (!q.timed)
    return fmt::format("{} alone takes {:.3f} ms, above the best step",
                       synchronisation ? "its gradient and weight synchronisation" : "compute", q.key);
  return fmt::format("{} alone takes {:.3f} ms, above the best step",
                     pipelined ? "the pipeline column of its busiest rank" : "its busiest rank", q.key);
}
inline std::string pruned_reason(const ColumnsAbove& above, bool pipelined) {
  return fmt::format("{} of its timed {} alone take{} {:.3f} ms{}, above the best step", above.columns,
                     pipelined ? "pipeline columns" : "ranks", above.columns == 1 ? "s" : "", above.latest_ms,
                     !above.at_full_speed ? ""
                     : above.columns == 1 ? " with its compute at full speed"
                                          : " with the last one's compute at full speed");
}

}  // namespace wallfacer::detail
