// Bisection bandwidth: the maximum flow from one half of the nodes (of the GPUs over the node's
// own links, for one node) to the other, minimised over halvings. All halvings are tried when there are at most
// kMaxHalvings of them; otherwise the contiguous halving, which is the worst one for the compact
// form's fabrics because leaves take contiguous node ranges. Capacities are whole MB/s so that the
// push-relabel arithmetic is exact.
#include <boost/graph/push_relabel_max_flow.hpp>
#include <cmath>

#include "topology_impl.hpp"

namespace wallfacer {
namespace {

constexpr double kMaxHalvings = 128;

using FlowTraits = boost::adjacency_list_traits<boost::vecS, boost::vecS, boost::directedS>;
using FlowGraph = boost::adjacency_list<
    boost::vecS, boost::vecS, boost::directedS, boost::no_property,
    boost::property<boost::edge_capacity_t, int64_t,
                    boost::property<boost::edge_residual_capacity_t, int64_t,
                                    boost::property<boost::edge_reverse_t, FlowTraits::edge_descriptor>>>>;

class FlowNetwork {
 public:
  explicit FlowNetwork(size_t vertices) : graph_(vertices) {}

  // A one-way arc with capacity and its zero-capacity reverse; returns the arc.
  FlowGraph::edge_descriptor add_arc(size_t u, size_t v, int64_t capacity) {
    const auto forward = boost::add_edge(u, v, graph_).first;
    const auto backward = boost::add_edge(v, u, graph_).first;
    boost::put(boost::edge_capacity, graph_, forward, capacity);
    boost::put(boost::edge_capacity, graph_, backward, 0);
    boost::put(boost::edge_reverse, graph_, forward, backward);
    boost::put(boost::edge_reverse, graph_, backward, forward);
    return forward;
  }
  void set_capacity(FlowGraph::edge_descriptor arc, int64_t capacity) {
    boost::put(boost::edge_capacity, graph_, arc, capacity);
  }
  int64_t max_flow(size_t source, size_t sink) { return boost::push_relabel_max_flow(graph_, source, sink); }

 private:
  FlowGraph graph_;
};

double binomial(int n, int k) {
  double result = 1;
  for (int i = 1; i <= k; ++i)
    result = result * (n - k + i) / i;
  return result;
}

// Calls visit(in_first_half) for each split of `count` items into halves of count/2 and the rest.
// For even counts item 0 stays in the first half, since a split and its mirror give equal flows.
template <typename Visit>
void for_each_halving(int count, Visit&& visit) {
  const int half = count / 2;
  const bool pin_first = count % 2 == 0;
  if (binomial(count - (pin_first ? 1 : 0), half - (pin_first ? 1 : 0)) > kMaxHalvings) {
    std::vector<char> contiguous(count, 0);
    std::fill(contiguous.begin(), contiguous.begin() + half, 1);
    visit(contiguous);
    return;
  }
  const int offset = pin_first ? 1 : 0;
  std::vector<char> choose(count - offset, 0);
  std::fill(choose.begin(), choose.begin() + (half - offset), 1);
  std::vector<char> side(count, 0);
  do {
    if (pin_first) side[0] = 1;
    std::copy(choose.begin(), choose.end(), side.begin() + offset);
    visit(side);
  } while (std::prev_permutation(choose.begin(), choose.end()));
}

}  // namespace

double Topology::Impl::compute_bisection() const {
  const bool one_node = model.nodes.size() == 1;
  const int parts = one_node ? static_cast<int>(gpu_device.size()) : static_cast<int>(model.nodes.size());
  if (parts < 2) return 0.0;
  const size_t devices = model.devices.size();
  const size_t source = devices, sink = devices + 1;
  FlowNetwork network(devices + 2);
  int64_t total = 1;
  for (const Link& link : model.links) {
    // Inside one node the question is the node's own fabric, not loops through a switch outside.
    if (one_node && link.kind == LinkKind::Network) continue;
    const int64_t capacity = std::llround(link.bandwidth_GBps * 1000.0);
    network.add_arc(link.a, link.b, capacity);
    network.add_arc(link.b, link.a, capacity);
    total += 2 * capacity;
  }
  std::vector<FlowGraph::edge_descriptor> from_source, to_sink;
  for (int gpu : gpu_device) {
    from_source.push_back(network.add_arc(source, gpu, 0));
    to_sink.push_back(network.add_arc(gpu, sink, 0));
  }
  int64_t worst = std::numeric_limits<int64_t>::max();
  for_each_halving(parts, [&](const std::vector<char>& first_half) {
    for (size_t g = 0; g < gpu_device.size(); ++g) {
      const bool in_first = first_half[one_node ? g : static_cast<size_t>(gpu_node[g])] != 0;
      network.set_capacity(from_source[g], in_first ? total : 0);
      network.set_capacity(to_sink[g], in_first ? 0 : total);
    }
    worst = std::min(worst, network.max_flow(source, sink));
  });
  return static_cast<double>(worst) / 1000.0;
}

}  // namespace wallfacer
