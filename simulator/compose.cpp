#include "compose.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_map>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/core/log.hpp>
#include <wallfacer/schedule/ring_channels.hpp>
#include <wallfacer/schedule/step.hpp>

namespace wallfacer::sim {

namespace {

// About how many activities the replay of rank 0's program of `layers` layers runs: one per
// compute op and point-to-point transfer, and a collective's transfers and merged-step delays
// (collective_steps.hpp) bounded the same way the expansion bounds them, one per ring channel.
double rank0_activities(const Plan& plan, const Topology& topology, int layers, int max_ring_steps) {
  const Schedule schedule = StepBuilder(plan).build({0}, layers);
  const RankProgram& program = schedule.ranks.front();
  double total = 0;
  std::unordered_map<int, int> channels_of;  // by group
  for (const Op& op : program.ops) {
    if (op.kind == OpKind::Recv) continue;
    if (!is_collective(op.kind)) {
      total += 1;
      continue;
    }
    const CollectiveSpec& spec = program.collectives[size_t(op.coll)];
    const double p = double(plan.groups[size_t(spec.group)].ranks.size());
    if (op.kind == OpKind::AllReduce && spec.algorithm == AllReduceAlgorithm::Tree) {
      total += 4;  // a member's tree edges, up and down
      continue;
    }
    const double steps = op.kind == OpKind::AllReduce ? 2 * (p - 1) : p - 1;
    const bool merged = max_ring_steps > 0 && steps > max_ring_steps;
    auto [known, fresh] = channels_of.try_emplace(spec.group, 1);
    if (fresh) known->second = ring_channels(plan, spec.group, topology).count();
    const double channels = op.kind == OpKind::AllToAll ? 1 : known->second;
    total += channels * (merged ? 2.0 * max_ring_steps : steps);  // a merged step waits on a timer first
  }
  return total;
}

// Composition replays the step's non-repeating part (F) three times and a layer six times; the
// full replay F once and a layer n times. Compose where that is less work.
bool composition_pays_off(const Plan& plan, const Topology& topology, const SimOptions& options) {
  const int stages = plan.params.pipeline_parallel;
  const double one = rank0_activities(plan, topology, stages, options.max_ring_steps);
  const double layer = std::max(0.0, rank0_activities(plan, topology, 2 * stages, options.max_ring_steps) - one);
  const double fixed = std::max(0.0, one - layer);
  const double n = double(plan.workload.layers / stages);
  const bool pays_off = 3 * fixed + 6 * layer < fixed + n * layer;
  WF_LOG_INFO("simulator",
              "rank 0 runs about {:.0f} activities a layer and {:.0f} in the rest of the step: {} layers {}", layer,
              fixed, n, pays_off ? "are composed where they repeat" : "are replayed (composing would cost more)");
  return pays_off;
}

}  // namespace

bool composes_step(const Plan& plan, const Topology& topology, const SimOptions& options) {
  if (plan.scope != Scope::Step || options.composition == SimOptions::Composition::Never || options.step_layers != 0)
    return false;
  const bool regular_nodes = topology.gpus_per_node() * topology.num_nodes() == topology.num_gpus();
  if (!regular_nodes || plan.workload.layers / plan.params.pipeline_parallel <= kComposeReplays) return false;
  return options.composition == SimOptions::Composition::Always || composition_pays_off(plan, topology, options);
}

bool repeats_exactly(const SimResult& one, const SimResult& two, const SimResult& three, std::string& why) {
  constexpr double kClockMs = 1e-6;  // SimGrid's event dates, in ms
  auto same_increment = [&](const char* what, double a, double b, double c) {
    const double gap = std::abs((c - b) - (b - a));
    if (gap <= 4 * kClockMs + 1e-12 * std::abs(c)) return true;
    why = fmt::format("{}: the second layer adds {:.6f} ms, the third {:.6f} ms", what, b - a, c - b);
    return false;
  };
  if (!same_increment("step", one.step_ms, two.step_ms, three.step_ms) ||
      !same_increment("forward", one.forward_ms, two.forward_ms, three.forward_ms))
    return false;
  if (three.activities - two.activities != two.activities - one.activities ||
      three.transfers - two.transfers != two.transfers - one.transfers) {
    why = "activity counts";
    return false;
  }
  for (size_t r = 0; r < three.ranks.size(); ++r) {
    const RankStats &a = one.ranks[r], &b = two.ranks[r], &c = three.ranks[r];
    const std::string rank = fmt::format("rank {}", r);
    if (!same_increment((rank + " compute").c_str(), a.compute_ms, b.compute_ms, c.compute_ms) ||
        !same_increment((rank + " communication").c_str(), a.comm_ms, b.comm_ms, c.comm_ms) ||
        !same_increment((rank + " idle").c_str(), a.idle_ms, b.idle_ms, c.idle_ms))
      return false;
  }
  return true;
}

namespace {

// Extends a quantity measured at `few` and `more` layers to the composed step's layers.
struct Extension {
  double per_layer_steps = 0;  // (layers - few) / (more - few)
  double operator()(double at_few, double at_more) const { return at_few + per_layer_steps * (at_more - at_few); }
  int64_t operator()(int64_t at_few, int64_t at_more) const {
    return at_few + int64_t(std::llround(per_layer_steps * double(at_more - at_few)));
  }
};

std::vector<RankStats> compose_ranks(const SimResult& few, const SimResult& more, const Extension& extend,
                                     double step_ms) {
  std::vector<RankStats> ranks;
  for (size_t r = 0; r < more.ranks.size(); ++r) {
    const RankStats& a = few.ranks[r];
    const RankStats& b = more.ranks[r];
    RankStats stats;
    stats.rank = b.rank;
    stats.compute_ms = extend(a.compute_ms, b.compute_ms);
    stats.comm_ms = extend(a.comm_ms, b.comm_ms);
    // Busy time (computing or communicating) grows by layer as the others do; idle is the rest.
    const double busy_ms = extend(few.step_ms - a.idle_ms, more.step_ms - b.idle_ms);
    stats.idle_ms = std::max(0.0, step_ms - busy_ms);
    ranks.push_back(stats);
  }
  return ranks;
}

// Each resource's bytes grow by layer; its utilisation is bytes / (bandwidth x step), and the
// longer replay gives bandwidth x its step as bytes / utilisation. Both lists hold every resource
// in resource order, as summarize_links() walks them.
void compose_links(const SimResult& few, const SimResult& more, const Extension& extend, double step_ms, int keep,
                   SimResult& out) {
  WF_ASSERT(few.busiest_links.size() == more.busiest_links.size(), "both replays list every resource");
  std::vector<LinkStats> all;
  for (size_t i = 0; i < more.busiest_links.size(); ++i) {
    const LinkStats& l = more.busiest_links[i];
    LinkStats link = l;
    link.bytes = extend(few.busiest_links[i].bytes, l.bytes);
    link.utilization =
        l.bytes > 0 && step_ms > 0 ? l.utilization * (link.bytes / l.bytes) * (more.step_ms / step_ms) : 0.0;
    all.push_back(link);
  }
  for (const LinkClassStats& c : more.link_classes) {
    LinkClassStats stats = c;
    stats.bytes = 0;
    stats.mean_utilization = stats.max_utilization = 0;
    for (const LinkStats& l : all) {
      if (l.kind != c.kind) continue;
      stats.bytes += l.bytes;
      stats.mean_utilization += l.utilization;
      stats.max_utilization = std::max(stats.max_utilization, l.utilization);
    }
    stats.mean_utilization /= std::max(1, c.links);
    out.link_classes.push_back(stats);
  }
  std::vector<LinkStats> used;
  for (const LinkStats& l : all)
    if (l.bytes > 0) used.push_back(l);
  // Stable on resource order, as a replay's own summary.
  std::stable_sort(used.begin(), used.end(),
                   [](const LinkStats& a, const LinkStats& b) { return a.utilization > b.utilization; });
  if (keep > 0 && used.size() > size_t(keep)) used.resize(size_t(keep));
  out.busiest_links = std::move(used);
}

}  // namespace

SimResult compose_step(const SimResult& few, const SimResult& more, int layers, int busiest_links) {
  WF_ASSERT(more.layers > few.layers && few.layers > 0, "a composed step needs two replays of different depth");
  WF_ASSERT(few.ranks.size() == more.ranks.size(), "both replays have the plan's ranks");
  const Extension extend{double(layers - few.layers) / double(more.layers - few.layers)};
  SimResult out;
  out.step_ms = extend(few.step_ms, more.step_ms);
  out.forward_ms = extend(few.forward_ms, more.forward_ms);
  out.backward_ms = out.step_ms - out.forward_ms;
  out.activities = extend(few.activities, more.activities);
  out.transfers = extend(few.transfers, more.transfers);
  out.ranks = compose_ranks(few, more, extend, out.step_ms);
  compose_links(few, more, extend, out.step_ms, busiest_links, out);
  out.layers = layers;
  out.composed_from = {few.layers, more.layers};
  return out;
}

}  // namespace wallfacer::sim
