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

// How long a rank's compute runs while its communication kernels hold SMs, from its timeline run at
// full speed: while a transfer moves data (from its start to its end), and while transfers are
// only posted (from when the rank reaches one, its stream's previous op and its dependencies
// done, until it starts: waiting for its other ends). Seconds, the forward's apart, and (with
// `by_op`) by compute op.
struct ComputeUnderComm {
  double moving_s = 0, waiting_s = 0;                  // backward compute (and any outside the forward)
  double forward_moving_s = 0, forward_waiting_s = 0;  // forward compute
  std::vector<double> moving_by_op, waiting_by_op;     // by op of the program (0 but for compute ops)
  // What running compute at `kept` of its speed while a transfer is posted adds to it: a moving
  // transfer lasts what its links make it last, so the compute under it does (1 - kept) of that
  // time's work less and finishes it after, at full speed; a wait ends when the other end posts,
  // which that rank does after compute slowed alike, so the wait stretches with the compute under
  // it, which takes 1 / kept as long. `forward_only`: the forward's share.
  double slowdown_s(double kept, bool forward_only = false) const;
  // The same for compute that ran `moving_s` beside moving transfers and `waiting_s` beside
  // transfers only posted (one op's share, or the totals).
  static double added_s(double moving_s, double waiting_s, double kept);
};
ComputeUnderComm compute_under_comm(const ProgramView& program, const std::vector<double>& duration,
                                    const std::vector<double>& end, bool by_op = false);

// A program's durations with each compute op lengthened by what ComputeUnderComm puts beside it in
// the timeline whose op ends are `end`, at `kept` of the speed; `added` receives the total. As
// given: by op, or (`by_template`, a flat program) by template op, each lengthened by the mean
// over its copies (so that the copies of one layer's op, which repeat in the layers' regime, keep
// one duration and a step composed from a few layers stays exact).
std::vector<double> lengthened(const ProgramView& program, const std::vector<double>& duration, bool by_template,
                               const std::vector<double>& end, double kept, double* added);

}  // namespace wallfacer::detail
