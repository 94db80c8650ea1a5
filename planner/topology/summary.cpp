// The figures `wallfacer topo show` prints: device counts, link classes, best and worst GPU
// pairs inside and across nodes, bisection bandwidth. Built on the public Topology interface.
#include <algorithm>
#include <map>
#include <tuple>

#include <wallfacer/topology/topology.hpp>

namespace wallfacer {
namespace {

// Higher bandwidth first, then lower latency.
bool better(const PairFigure& a, const PairFigure& b) {
  if (a.bandwidth_GBps != b.bandwidth_GBps) return a.bandwidth_GBps > b.bandwidth_GBps;
  return a.latency_us < b.latency_us;
}

void consider(const Topology& topology, int src, int dst, std::optional<PairFigure>& best,
              std::optional<PairFigure>& worst) {
  const Route& route = topology.route(src, dst);
  const PairFigure figure{src, dst, route.bottleneck_GBps, route.latency_us};
  if (!best || better(figure, *best)) best = figure;
  if (!worst || better(*worst, figure)) worst = figure;
}

std::vector<std::vector<int>> gpus_by_node(const Topology& topology) {
  std::vector<std::vector<int>> out(topology.num_nodes());
  for (int g = 0; g < topology.num_gpus(); ++g)
    out[topology.node_of_gpu(g)].push_back(g);
  return out;
}

}  // namespace

TopologySummary summarize(const Topology& topology) {
  TopologySummary summary;
  std::map<DeviceKind, int> counts;
  for (const Device& device : topology.devices())
    ++counts[device.kind];
  summary.device_counts.assign(counts.begin(), counts.end());

  std::map<std::tuple<LinkKind, double>, LinkClass> classes;
  for (const Link& link : topology.links()) {
    LinkClass& c = classes[{link.kind, link.bandwidth_GBps}];
    if (c.count++ == 0) c = LinkClass{link.kind, link.bandwidth_GBps, link.latency_us, 1};
  }
  for (const auto& [key, c] : classes)
    summary.link_classes.push_back(c);

  const auto by_node = gpus_by_node(topology);
  const int nodes = topology.num_nodes();
  // Compact-form nodes are copies of one another; explicit-form nodes may all differ.
  const int intra_nodes = topology.fabric().type == "explicit" ? nodes : 1;
  for (int n = 0; n < intra_nodes; ++n)
    for (int a : by_node[n])
      for (int b : by_node[n])
        if (a != b) consider(topology, a, b, summary.intra_best, summary.intra_worst);

  std::vector<int> sampled;
  if (nodes <= 16) {
    for (int n = 0; n < nodes; ++n)
      sampled.push_back(n);
  } else {
    sampled = {0, 1, nodes / 2, nodes - 1};
  }
  for (int na : sampled)
    for (int nb : sampled)
      if (na != nb)
        for (int a : by_node[na])
          for (int b : by_node[nb])
            consider(topology, a, b, summary.inter_best, summary.inter_worst);

  summary.bisection_GBps = topology.bisection_bandwidth_GBps();
  return summary;
}

}  // namespace wallfacer
