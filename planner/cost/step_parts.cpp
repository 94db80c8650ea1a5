// Where the step time goes on one rank (step_parts.hpp, docs/cost-model.md "Where the step goes").
#include "step_parts.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

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
// transfer that runs, and forward compute.
constexpr int kCompute = 0, kForwardCompute = 1 + kNumCommTiers, kCategories = kForwardCompute + 1;

// The ops of each stream that run (a positive duration, an end), in program order, which is
// their order in time: a stream runs its ops one after the other. Gathered in one pass so that
// each stream's edges are read off its own list, not by scanning every op once per stream.
using OpsByStream = std::array<std::vector<uint32_t>, kNumStreams>;

template <typename Duration>
void gather_ops_by_stream(const ProgramView& program, const Duration& duration, const std::vector<double>& end,
                          OpsByStream& ops) {
  for (std::vector<uint32_t>& list : ops)
    list.clear();
  for (size_t i = 0; i < program.size(); ++i)
    if (duration(i) > 0 && end[i] >= 0) ops[size_t(program.op(i).stream)].push_back(uint32_t(i));
}

// The start and end edges of one stream's ops (`ops`, in program order). A start computed as end
// minus duration may fall an ulp before the previous end; it is taken at that end, so each
// stream's edges come sorted and the streams merge as they are visited. (Copying them out to sort
// took a third of pricing a 16,384-GPU step, most of it touching fresh memory for millions of
// edges.)
class StreamEdges {
 public:
  StreamEdges(const ProgramView& program, const std::vector<double>& duration, const std::vector<double>& end,
              const std::vector<uint32_t>& ops, Stream stream, TierClassifier& tiers)
      : program_(program), duration_(duration), end_(end), ops_(ops), stream_(stream), tiers_(tiers) {
    start_next(0, 0);
  }
  bool done() const { return done_; }
  const Edge& head() const { return head_; }
  void pop() {
    if (head_.delta > 0)
      head_ = {op_end_, -1, head_.category, op_};
    else
      start_next(next_, op_end_);
  }

 private:
  // The start edge of this stream's `from`-th op, not before `previous`.
  void start_next(size_t from, double previous) {
    if (from == ops_.size()) {
      done_ = true;
      return;
    }
    const size_t i = ops_[from];
    // Only rounding may put a start before the previous end: a stream runs one op at a time.
    WF_ASSERT(end_[i] - duration_[i] >= previous - 1e-9 * std::max(1.0, previous),
              "two ops of one stream overlap in a timeline");
    const double start = std::max(end_[i] - duration_[i], previous);
    int category = 0;
    if (stream_ == Stream::Compute)
      category = program_.op(i).phase == Phase::Forward ? kForwardCompute : kCompute;
    else
      category = 1 + int(tiers_.of(program_.op(i), program_.program()));
    op_ = i;
    next_ = from + 1;
    op_end_ = std::max(end_[i], start);
    head_ = {start, +1, category, i};
  }
  const ProgramView& program_;
  const std::vector<double>& duration_;
  const std::vector<double>& end_;
  const std::vector<uint32_t>& ops_;
  const Stream stream_;
  TierClassifier& tiers_;
  size_t op_ = 0, next_ = 0;
  double op_end_ = 0;
  Edge head_{};
  bool done_ = false;
};

// Kept per thread: a search sweeps columns of a million ops many times over.
OpsByStream& ops_by_stream_buffer() {
  thread_local OpsByStream ops;
  return ops;
}

// Every op's start and end edge, visited in time order. The order of edges at one time does not
// matter to step_parts (only the stretches between distinct times count).
template <typename Visit>
void visit_edges_in_time_order(const ProgramView& program, const std::vector<double>& duration,
                               const std::vector<double>& end, TierClassifier& tiers, Visit&& visit) {
  OpsByStream& ops = ops_by_stream_buffer();
  gather_ops_by_stream(
      program, [&](size_t i) { return duration[i]; }, end, ops);
  std::vector<StreamEdges> streams;
  streams.reserve(kNumStreams);
  for (int s = 0; s < kNumStreams; ++s)
    if (!ops[size_t(s)].empty()) streams.emplace_back(program, duration, end, ops[size_t(s)], Stream(s), tiers);
  for (;;) {
    StreamEdges* first = nullptr;
    for (StreamEdges& stream : streams)
      if (!stream.done() && (!first || stream.head().at < first->head().at)) first = &stream;
    if (!first) return;
    visit(first->head());
    first->pop();
  }
}

struct Window {
  double start = 0, end = 0;
};

// One transfer stream's windows in time order (its ops in program order): each op's from its
// start to its end (it moves data), or with `posted` from when it is ready (its stream's previous
// op and its dependencies done) to its end: the window in which its kernel holds SMs, waiting for
// its other ends included. Starts are taken no earlier than the previous end, as StreamEdges does.
template <typename Duration>
class StreamWindows {
 public:
  StreamWindows(const ProgramView& program, const Duration& duration, const std::vector<double>& end,
                const std::vector<uint32_t>& ops, bool posted)
      : program_(program), duration_(duration), end_(end), ops_(ops), posted_(posted) {
    advance();
  }
  bool done() const { return done_; }
  const Window& head() const { return head_; }
  void advance() {
    if (next_ == ops_.size()) {
      done_ = true;
      return;
    }
    const size_t i = ops_[next_++];
    const double previous = head_.end;
    WF_ASSERT(end_[i] - duration_(i) >= previous - 1e-9 * std::max(1.0, previous),
              "two ops of one stream overlap in a timeline");
    double start = std::max(end_[i] - duration_(i), previous);
    if (posted_) start = std::min(start, ready(i, previous));
    head_ = {start, std::max(end_[i], start)};
  }

 private:
  double ready(size_t i, double previous) const {
    double at = previous;
    for (const int32_t* d = program_.deps_begin(i); d != program_.deps_end(i); ++d)
      if (end_[size_t(*d)] >= 0) at = std::max(at, end_[size_t(*d)]);
    return at;
  }
  const ProgramView& program_;
  const Duration& duration_;
  const std::vector<double>& end_;
  const std::vector<uint32_t>& ops_;
  const bool posted_;
  size_t next_ = 0;
  Window head_{};
  bool done_ = false;
};

// The union of the transfer streams' windows, as disjoint windows in time order.
template <typename Duration>
class WindowUnion {
 public:
  WindowUnion(const ProgramView& program, const Duration& duration, const std::vector<double>& end,
              const OpsByStream& ops, bool posted) {
    streams_.reserve(kNumStreams);
    for (int s = 0; s < kNumStreams; ++s)
      if (Stream(s) != Stream::Compute && !ops[size_t(s)].empty())
        streams_.emplace_back(program, duration, end, ops[size_t(s)], posted);
    advance();
  }
  bool done() const { return done_; }
  const Window& head() const { return head_; }
  void advance() {
    StreamWindows<Duration>* first = earliest();
    if (!first) {
      done_ = true;
      return;
    }
    head_ = first->head();
    first->advance();
    for (StreamWindows<Duration>* next = earliest(); next && next->head().start <= head_.end; next = earliest()) {
      head_.end = std::max(head_.end, next->head().end);
      next->advance();
    }
  }
  // How long [from, to] overlaps the union. Windows are consumed as far as they end by `to`:
  // successive calls ask of later stretches.
  double overlap(double from, double to) {
    double sum = 0;
    while (!done_ && head_.end <= from)
      advance();
    while (!done_ && head_.start < to) {
      sum += std::min(to, head_.end) - std::max(from, head_.start);
      if (head_.end > to) break;
      advance();
    }
    return sum;
  }

 private:
  StreamWindows<Duration>* earliest() {
    StreamWindows<Duration>* first = nullptr;
    for (StreamWindows<Duration>& stream : streams_)
      if (!stream.done() && (!first || stream.head().start < first->head().start)) first = &stream;
    return first;
  }
  std::vector<StreamWindows<Duration>> streams_;
  Window head_{};
  bool done_ = false;
};

// Each compute op that runs, in time order, with how long a transfer of its rank moves beside it
// and how long transfers are only posted beside it: visit(op, forward, moving_s, waiting_s).
// Transfers move inside their posted windows, so the wait is what the posted windows cover
// beyond the moving ones.
template <typename Duration, typename Visit>
void visit_compute_under_comm(const ProgramView& program, const Duration& duration, const std::vector<double>& end,
                              Visit&& visit) {
  OpsByStream& ops = ops_by_stream_buffer();
  gather_ops_by_stream(program, duration, end, ops);
  WindowUnion<Duration> moving(program, duration, end, ops, false), posted(program, duration, end, ops, true);
  double previous = 0;
  for (const uint32_t i : ops[size_t(Stream::Compute)]) {
    WF_ASSERT(end[i] - duration(i) >= previous - 1e-9 * std::max(1.0, previous),
              "two ops of one stream overlap in a timeline");
    const double start = std::max(end[i] - duration(i), previous);
    previous = std::max(end[i], start);
    const double moving_s = moving.overlap(start, previous);
    const double waiting_s = std::max(0.0, posted.overlap(start, previous) - moving_s);
    visit(size_t(i), program.op(i).phase == Phase::Forward, moving_s, waiting_s);
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
  visit_edges_in_time_order(program, duration, end, tiers, [&](const Edge& edge) {
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
  const auto seconds = [&](size_t i) { return duration[i]; };
  visit_compute_under_comm(program, seconds, end, [&](size_t op, bool forward, double moving_s, double waiting_s) {
    (forward ? under.forward_moving_s : under.moving_s) += moving_s;
    (forward ? under.forward_waiting_s : under.waiting_s) += waiting_s;
    if (by_op) under.moving_by_op[op] = moving_s, under.waiting_by_op[op] = waiting_s;
  });
  return under;
}

double ComputeUnderComm::slowdown_s(double kept, bool forward_only) const {
  const double moving = forward_moving_s + (forward_only ? 0 : moving_s);
  const double waiting = forward_waiting_s + (forward_only ? 0 : waiting_s);
  return added_s(moving, waiting, kept);
}

double ComputeUnderComm::added_s(double moving_s, double waiting_s, double kept) {
  return (1 - kept) * moving_s + (1 / kept - 1) * waiting_s;
}

std::vector<double> lengthened(const ProgramView& program, const std::vector<double>& duration, bool by_template,
                               const std::vector<double>& end, double kept, double* added) {
  by_template = by_template && program.flat();
  *added = 0;
  if (!by_template) {
    std::vector<double> seconds = duration;
    const auto of_op = [&](size_t i) { return duration[i]; };
    visit_compute_under_comm(program, of_op, end, [&](size_t op, bool, double moving_s, double waiting_s) {
      const double more = ComputeUnderComm::added_s(moving_s, waiting_s, kept);
      seconds[op] += more;
      *added += more;
    });
    return seconds;
  }
  // By template op: each copy lasts its template op's duration; a template op is lengthened by
  // the mean of what its copies gain.
  std::vector<double> more(duration.size(), 0.0), copies(duration.size(), 0.0);
  const auto of_template = [&](size_t i) { return duration[program.origin(i)]; };
  visit_compute_under_comm(program, of_template, end, [&](size_t op, bool, double moving_s, double waiting_s) {
    more[program.origin(op)] += ComputeUnderComm::added_s(moving_s, waiting_s, kept);
  });
  for (size_t i = 0; i < program.size(); ++i)
    copies[program.origin(i)] += 1;
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
