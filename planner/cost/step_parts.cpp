// Where the step time goes on one rank (step_parts.hpp, docs/cost-model.md "Where the step goes").
#include "step_parts.hpp"

#include <algorithm>
#include <array>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/topology/topology.hpp>

namespace wallfacer {

const char* to_string(CommTier tier) {
  switch (tier) {
    case CommTier::NvLink:
      return "nvlink";
    case CommTier::Pcie:
      return "pcie";
    case CommTier::Network:
      return "network";
  }
  return "?";
}

namespace detail {
namespace {

CommTier tier_of_link(LinkKind kind) {
  switch (kind) {
    case LinkKind::NvLink:
      return CommTier::NvLink;
    case LinkKind::Pcie:
    case LinkKind::CpuBus:
      return CommTier::Pcie;
    case LinkKind::Network:
      return CommTier::Network;
  }
  return CommTier::Network;
}

uint64_t pair_key(int a, int b) {
  return uint64_t(uint32_t(a)) << 32 | uint32_t(b);
}

// One boundary of an op's interval: +1 at its start, -1 at its end, for a category.
struct Edge {
  double at;
  int delta;
  int category;
  size_t op;  // the op it bounds
};
// The categories: compute (the backward's, and anything outside the forward), 1 + tier for a
// transfer that runs, a transfer posted and not finished (from when its rank reaches it, waiting
// for its other ends included: the window in which its kernel holds SMs), and forward compute.
constexpr int kCompute = 0, kPosted = 1 + kNumCommTiers, kForwardCompute = kPosted + 1,
              kCategories = kForwardCompute + 1;

// The start and end edges of one stream's ops in program order, which is their order in time: a
// stream runs its ops one after the other. A start computed as end minus duration may fall an ulp
// before the previous end; it is taken at that end, so each stream's edges come sorted and the
// streams merge as they are visited. (Copying them out to sort took a third of pricing a
// 16,384-GPU step, most of it touching fresh memory for millions of edges.) `posted`: a transfer
// stream's posted windows instead, each from when the op is ready (its stream's previous op and
// its dependencies done) to its end.
class StreamEdges {
 public:
  StreamEdges(const ProgramView& program, const std::vector<double>& duration, const std::vector<double>& end,
              Stream stream, TierClassifier* tiers, bool posted = false)
      : program_(program), duration_(duration), end_(end), stream_(stream), tiers_(tiers), posted_(posted) {
    start_next(0, 0);
  }
  bool done() const { return done_; }
  const Edge& head() const { return head_; }
  void pop() {
    if (head_.delta > 0)
      head_ = {op_end_, -1, head_.category, op_};
    else
      start_next(op_ + 1, op_end_);
  }

 private:
  // The start edge of the first op from `from` on this stream that runs, not before `previous`.
  void start_next(size_t from, double previous) {
    for (size_t i = from; i < program_.size(); ++i) {
      const Op& op = program_.op(i);
      if (op.stream != stream_ || duration_[i] <= 0 || end_[i] < 0) continue;
      // Only rounding may put a start before the previous end: a stream runs one op at a time.
      WF_ASSERT(end_[i] - duration_[i] >= previous - 1e-9 * std::max(1.0, previous),
                "two ops of one stream overlap in a timeline");
      double start = std::max(end_[i] - duration_[i], previous);
      int category = kPosted;
      if (posted_)
        start = std::min(start, ready(i, previous));
      else if (stream_ == Stream::Compute)
        category = op.phase == Phase::Forward ? kForwardCompute : kCompute;
      else
        category = 1 + (tiers_ ? int(tiers_->of(op, program_.program())) : 0);
      op_ = i;
      op_end_ = std::max(end_[i], start);
      head_ = {start, +1, category, i};
      return;
    }
    done_ = true;
  }
  // When op i is ready to run: its stream's previous op ended at `previous`, and its dependencies
  // have ended (those that ran).
  double ready(size_t i, double previous) const {
    double at = previous;
    for (const int32_t* d = program_.deps_begin(i); d != program_.deps_end(i); ++d)
      if (end_[size_t(*d)] >= 0) at = std::max(at, end_[size_t(*d)]);
    return at;
  }
  const ProgramView& program_;
  const std::vector<double>& duration_;
  const std::vector<double>& end_;
  const Stream stream_;
  TierClassifier* tiers_;  // none: every transfer counts as the first tier
  const bool posted_;
  size_t op_ = 0;
  double op_end_ = 0;
  Edge head_{};
  bool done_ = false;
};

// Every op's start and end edge, visited in time order. The order of edges at one time does not
// matter to step_parts (only the stretches between distinct times count).
// `posted`: the transfer streams' posted windows too. Without `tiers` every transfer is of the first.
template <typename Visit>
void visit_edges_in_time_order(const ProgramView& program, const std::vector<double>& duration,
                               const std::vector<double>& end, TierClassifier* tiers, bool posted, Visit&& visit) {
  std::vector<StreamEdges> streams;
  streams.reserve(2 * kNumStreams);
  for (int s = 0; s < kNumStreams; ++s) {
    streams.emplace_back(program, duration, end, Stream(s), tiers);
    if (posted && Stream(s) != Stream::Compute) streams.emplace_back(program, duration, end, Stream(s), tiers, true);
  }
  for (;;) {
    StreamEdges* first = nullptr;
    for (StreamEdges& stream : streams)
      if (!stream.done() && (!first || stream.head().at < first->head().at)) first = &stream;
    if (!first) return;
    visit(first->head());
    first->pop();
  }
}

}  // namespace

CommTier TierClassifier::route_tier(int src_rank, int dst_rank) {
  const int src = plan_.ranks[size_t(src_rank)].gpu, dst = plan_.ranks[size_t(dst_rank)].gpu;
  auto [it, fresh] = pairs_.try_emplace(pair_key(src, dst), CommTier::NvLink);
  if (!fresh || src == dst) return it->second;
  CommTier worst = CommTier::NvLink;
  const Route& route = topology_.route(src, dst);
  for (const Hop& hop : route.hops)
    worst = std::max(worst, tier_of_link(topology_.links()[size_t(hop.link)].kind));
  return it->second = worst;
}

CommTier TierClassifier::group_tier(int group, int rank) {
  auto [it, fresh] = groups_.try_emplace(pair_key(group, rank), CommTier::NvLink);
  if (!fresh) return it->second;
  const std::vector<int>& members = plan_.groups[size_t(group)].ranks;
  const int node = plan_.ranks[size_t(rank)].node;
  const bool spans_nodes =
      std::any_of(members.begin(), members.end(), [&](int member) { return plan_.ranks[size_t(member)].node != node; });
  CommTier worst = spans_nodes ? CommTier::Network : CommTier::NvLink;
  for (size_t m = 0; !spans_nodes && m < members.size(); ++m)
    worst = std::max(worst, route_tier(rank, members[m]));
  return it->second = worst;
}

CommTier TierClassifier::of(const Op& op, const RankProgram& program) {
  if (op.kind == OpKind::Send) return route_tier(program.rank, op.peer);
  if (op.kind == OpKind::Recv) return route_tier(op.peer, program.rank);
  if (op.coll < 0) return CommTier::NvLink;
  return group_tier(program.collectives[size_t(op.coll)].group, program.rank);
}

StepParts step_parts(const ProgramView& program, const std::vector<double>& duration, const std::vector<double>& end,
                     double step_s, double mean_compute_s, double busiest_compute_s, TierClassifier& tiers) {
  StepParts parts;
  int running[kCategories] = {};
  double compute_s = 0, idle_s = 0, hidden_s = 0, exposed_s[kNumCommTiers] = {};
  double at = 0;
  // Each stretch between two edges goes to compute when compute runs, else to the slowest tier
  // that runs, else to idle; so the stretches sum to the step.
  auto account = [&](double until) {
    until = std::min(until, step_s);
    if (until <= at) return;
    const double length = until - at;
    const bool any_transfer = running[1] + running[2] + running[3] > 0;
    if (running[kCompute] + running[kForwardCompute] > 0) {
      compute_s += length;
      if (any_transfer) hidden_s += length;
    } else if (any_transfer) {
      const int slowest = running[3] > 0 ? 2 : running[2] > 0 ? 1 : 0;
      exposed_s[slowest] += length;
    } else {
      idle_s += length;
    }
    at = until;
  };
  visit_edges_in_time_order(program, duration, end, &tiers, false, [&](const Edge& edge) {
    account(edge.at);
    running[edge.category] += edge.delta;
  });
  account(step_s);
  // Imbalance: compute above the mean, and waiting up to the busiest rank's extra compute (the
  // critical rank often is a light one waiting for a heavy one at a collective).
  const double balanced_s = std::min(compute_s, mean_compute_s);
  const double waiting_for_busier_s = std::min(idle_s, std::max(0.0, busiest_compute_s - compute_s));
  idle_s -= waiting_for_busier_s;
  parts.compute_ms = balanced_s * 1e3;
  parts.imbalance_ms = (compute_s - balanced_s + waiting_for_busier_s) * 1e3;
  for (int t = 0; t < kNumCommTiers; ++t)
    parts.exposed_ms[t] = exposed_s[t] * 1e3;
  parts.idle_ms = idle_s * 1e3;
  parts.hidden_ms = hidden_s * 1e3;
  return parts;
}

ComputeUnderComm compute_under_comm(const ProgramView& program, const std::vector<double>& duration,
                                    const std::vector<double>& end, bool by_op) {
  ComputeUnderComm under;
  if (by_op) {
    under.moving_by_op.assign(program.size(), 0.0);
    under.waiting_by_op.assign(program.size(), 0.0);
  }
  int running[kCategories] = {};
  size_t computing = 0;  // the compute op that runs, when one does (a stream runs one at a time)
  double at = 0;
  visit_edges_in_time_order(program, duration, end, nullptr, true, [&](const Edge& edge) {
    const double length = edge.at - at;
    const bool forward = running[kForwardCompute] > 0;
    if (length > 0 && (forward || running[kCompute] > 0)) {
      if (running[1] > 0) {
        (forward ? under.forward_moving_s : under.moving_s) += length;
        if (by_op) under.moving_by_op[computing] += length;
      } else if (running[kPosted] > 0) {
        (forward ? under.forward_waiting_s : under.waiting_s) += length;
        if (by_op) under.waiting_by_op[computing] += length;
      }
    }
    at = std::max(at, edge.at);
    running[edge.category] += edge.delta;
    if ((edge.category == kCompute || edge.category == kForwardCompute) && edge.delta > 0) computing = edge.op;
  });
  return under;
}

double ComputeUnderComm::slowdown_s(double kept, bool forward_only) const {
  const double moving = forward_moving_s + (forward_only ? 0 : moving_s);
  const double waiting = forward_waiting_s + (forward_only ? 0 : waiting_s);
  return (1 - kept) * moving + (1 / kept - 1) * waiting;
}

double ComputeUnderComm::added_s(size_t op, double kept) const {
  return (1 - kept) * moving_by_op[op] + (1 / kept - 1) * waiting_by_op[op];
}

std::vector<double> lengthened(const ProgramView& program, const std::vector<double>& duration, bool by_template,
                               const std::vector<double>& end, double kept, double* added) {
  by_template = by_template && program.flat();
  std::vector<double> seconds(program.size());
  for (size_t i = 0; i < seconds.size(); ++i)
    seconds[i] = duration[by_template ? program.origin(i) : i];
  const ComputeUnderComm under = compute_under_comm(program, seconds, end, true);
  *added = 0;
  if (!by_template) {
    for (size_t i = 0; i < seconds.size(); ++i) {
      const double more = under.added_s(i, kept);
      seconds[i] += more;
      *added += more;
    }
    return seconds;
  }
  std::vector<double> more(duration.size(), 0.0), copies(duration.size(), 0.0);
  for (size_t i = 0; i < seconds.size(); ++i) {
    more[program.origin(i)] += under.added_s(i, kept);
    copies[program.origin(i)] += 1;
  }
  std::vector<double> result = duration;
  for (size_t t = 0; t < result.size(); ++t)
    if (copies[t] > 0) {
      result[t] += more[t] / copies[t];
      *added += more[t];
    }
  return result;
}

}  // namespace detail

void count_transfers(const Topology& topology, const Plan& plan, const Schedule& schedule, StepParts& parts) {
  detail::TierClassifier tiers(topology, plan);
  double counts[kNumCommTiers] = {};
  for (const RankProgram& program : schedule.ranks)
    for (const Op& op : program.ops)
      if (op.stream != Stream::Compute && op.kind != OpKind::Recv) counts[int(tiers.of(op, program))] += 1;
  for (int t = 0; t < kNumCommTiers; ++t)
    parts.transfers_per_layer[t] = schedule.ranks.empty() ? 0 : counts[t] / double(schedule.ranks.size());
}

}  // namespace wallfacer
