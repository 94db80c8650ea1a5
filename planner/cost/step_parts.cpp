// Where the step time goes on one rank (step_parts.hpp, docs/cost-model.md "Where the step goes").
#include "step_parts.hpp"

#include <algorithm>
#include <iterator>

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

// One boundary of an op's interval: +1 at its start, -1 at its end, for a category (0 compute,
// 1 + tier for transfers).
struct Edge {
  double at;
  int delta;
  int category;
};

// Every op's start and end edge, sorted by time. The order of edges at one time does not matter to
// step_parts (only the stretches between distinct times count), so any sort by time gives its
// result. A stream runs its ops one after the other in program order, so its edges come nearly
// sorted (a start computed as end minus duration may fall an ulp before the previous end): each
// stream's are sorted by insertion, in about linear time, and the four streams merged.
std::vector<Edge> sorted_edges(const ProgramView& program, const std::vector<double>& duration,
                               const std::vector<double>& end, TierClassifier& tiers) {
  std::vector<Edge> streams[kNumStreams];
  for (size_t i = 0; i < program.size(); ++i) {
    const Op& op = program.op(i);
    if (duration[i] <= 0 || end[i] < 0) continue;
    const int category = op.stream == Stream::Compute ? 0 : 1 + int(tiers.of(op, program.program()));
    std::vector<Edge>& edges = streams[int(op.stream)];
    edges.push_back({end[i] - duration[i], +1, category});
    edges.push_back({end[i], -1, category});
  }
  auto earlier = [](const Edge& a, const Edge& b) { return a.at < b.at; };
  for (std::vector<Edge>& edges : streams)
    for (size_t i = 1; i < edges.size(); ++i)
      for (size_t j = i; j > 0 && earlier(edges[j], edges[j - 1]); --j)
        std::swap(edges[j], edges[j - 1]);
  std::vector<Edge> low, high, all;
  std::merge(streams[0].begin(), streams[0].end(), streams[1].begin(), streams[1].end(), std::back_inserter(low),
             earlier);
  std::merge(streams[2].begin(), streams[2].end(), streams[3].begin(), streams[3].end(), std::back_inserter(high),
             earlier);
  all.reserve(low.size() + high.size());
  std::merge(low.begin(), low.end(), high.begin(), high.end(), std::back_inserter(all), earlier);
  return all;
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
  const std::vector<Edge> edges = sorted_edges(program, duration, end, tiers);
  int running[1 + kNumCommTiers] = {};
  double compute_s = 0, idle_s = 0, hidden_s = 0, exposed_s[kNumCommTiers] = {};
  double at = 0;
  // Each stretch between two edges goes to compute when compute runs, else to the slowest tier
  // that runs, else to idle; so the stretches sum to the step.
  auto account = [&](double until) {
    until = std::min(until, step_s);
    if (until <= at) return;
    const double length = until - at;
    const bool any_transfer = running[1] + running[2] + running[3] > 0;
    if (running[0] > 0) {
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
  for (const Edge& edge : edges) {
    account(edge.at);
    running[edge.category] += edge.delta;
  }
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
