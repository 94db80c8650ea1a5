// Internal to the cost model: where the step time goes on one rank (StepParts, cost_model.hpp),
// from the op end times of its timeline, and which link tier each transfer runs on.
#pragma once

#include <unordered_map>
#include <vector>

#include <wallfacer/cost/cost_model.hpp>
#include "timeline.hpp"

namespace wallfacer::detail {

// The tier of a transfer: the slowest kind of link on its route (a collective: on any route from
// the member to another member; a group spanning nodes is Network). Cached per GPU pair and group.
class TierClassifier {
 public:
  TierClassifier(const Topology& topology, const Plan& plan) : topology_(topology), plan_(plan) {}
  CommTier of(const Op& op, const RankProgram& program);

 private:
  CommTier route_tier(int src_rank, int dst_rank);
  CommTier group_tier(int group, int rank);
  const Topology& topology_;
  const Plan& plan_;
  std::unordered_map<uint64_t, CommTier> pairs_, groups_;
};

// Splits [0, step_s] of `program`'s timeline (its ops' durations and ends) into compute, exposed
// transfers by tier and idle time. Load imbalance is its compute above `mean_compute_s` (the
// timed ranks' mean) plus the idle time up to how much more compute the busiest timed rank has
// (`busiest_compute_s`): the time it waits for a busier rank.
StepParts step_parts(const ProgramView& program, const std::vector<double>& duration, const std::vector<double>& end,
                     double step_s, double mean_compute_s, double busiest_compute_s, TierClassifier& tiers);

}  // namespace wallfacer::detail
