// Internal to the topology component: the state behind Topology's pimpl, shared by topology.cpp
// (loading, validation, hashing), yaml*.cpp (the two file forms), routing.cpp,
// bisection.cpp and summary.cpp. Boost.Graph stays behind this header, which
// only those files include.
//
// Routing is hierarchical so that it scales to tens of thousands of GPUs without all-pairs
// tables: every node maps onto a small node template (one shared template for a compact-form
// file, one per node for an explicit one) searched by Dijkstra per local source, and the
// switches between nodes form a small fabric graph searched per source switch. Both searches
// are cached lazily; a route glues GPU -> NIC, NIC -> NIC and NIC -> GPU pieces together.
#pragma once

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <boost/graph/adjacency_list.hpp>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <wallfacer/topology/topology.hpp>
#include "route_cache.hpp"

namespace wallfacer::detail {

// Route cost compared lexicographically: latency in picoseconds (integers, so that equal-cost
// paths compare equal exactly), then hop count.
using RouteCost = std::pair<int64_t, int>;
inline constexpr RouteCost kUnreachable{std::numeric_limits<int64_t>::max(), std::numeric_limits<int>::max()};
int64_t latency_ps(double latency_us);

// ---- the model a reader produces ---------------------------------------------------------------

// Devices and links of one node, as ids into TopologyModel::devices / links. All nodes of a
// template list their devices and links in the same local order.
struct NodeMembers {
  int template_id = 0;
  std::vector<int> devices;
  std::vector<int> links;
};

struct TopologyModel {
  std::string source;  // file path or preset name, for messages
  std::string name, description;
  GpuModel gpu;
  FabricInfo fabric;
  std::vector<Device> devices;
  std::vector<Link> links;
  std::vector<int> device_lines;  // YAML line that defined each device (for messages)
  std::vector<int> link_lines;
  std::vector<NodeMembers> nodes;
  int gpu_line = 0;                      // a line to blame for whole-cluster problems
  std::vector<std::string> assumptions;  // what the file left out and the reader assumed

  int add_device(std::string name, DeviceKind kind, int node, int local_index, int line);
  int add_link(int a, int b, LinkKind kind, double bandwidth_GBps, double latency_us, bool full_duplex, int line);
};

// Readers (yaml*.cpp). Both throw InputError for anything invalid they can see in the
// file; whole-graph checks (reachability) happen in Topology::Impl::build.
TopologyModel read_compact_form(const std::string& source, const YAML::Node& root, std::optional<int> nodes_override);
TopologyModel read_explicit_form(const std::string& source, const YAML::Node& root);
// Parts common to both forms.
GpuModel read_gpu_model(const std::string& source, const YAML::Node& root);
void read_sources(const std::string& source, const YAML::Node& root);
void read_source_field(const std::string& source, const YAML::Node& parent);
// A link rate given as bandwidth_GBps (GB/s) or rate_Gbps (Gb/s, divided by 8); exactly one.
double read_rate(const std::string& source, const YAML::Node& parent, std::string_view what);
// A list of small non-negative integers each below `limit`, naming devices of `kind_label`.
std::vector<int> read_index_list(const std::string& source, const YAML::Node& parent, const std::string& key, int limit,
                                 std::string_view kind_label);
int read_index(const std::string& source, const YAML::Node& parent, const std::string& key, int limit,
               std::string_view kind_label);
// Bounds of the counts a topology file gives; beyond them a file is a mistake, and checking
// before anything is stamped out keeps a typo like `nodes: 1000000000000` from allocating.
constexpr int kMaxNodes = 65536;
constexpr int kMaxDevicesPerNode = 4096;  // GPUs, CPUs or NICs in one node
constexpr int kMaxParallelLinks = 1024;   // `links:` between one pair of devices
constexpr int kMaxSwitchCount = 1 << 20;  // leaf sizes, spines, radix
// An integer field in [minimum, maximum], with a message naming the field. Read as 64 bits, so
// values past 2^32 are refused rather than wrapped.
int read_int_in(const std::string& source, const YAML::Node& parent, const std::string& key, int64_t minimum,
                int64_t maximum);
double read_number_at_least(const std::string& source, const YAML::Node& parent, const std::string& key,
                            double minimum);
// A required sub-mapping `key` of `parent`, checked against `allowed` keys.
YAML::Node read_section(const std::string& source, const YAML::Node& parent, const std::string& key,
                        std::initializer_list<std::string_view> allowed);

// Compact form, network part (yaml_network.cpp): reads `network` (may be undefined)
// and adds the switches and links joining the nodes already in `model`.
struct NetworkShape {
  int nodes = 1;
  int nics_per_node = 0;
  double nic_GBps = 0;
  int nodes_line = 0;            // line of `nodes:` (0 when absent)
  bool nodes_from_flag = false;  // the node count came from --nodes
};
void add_compact_network(const std::string& source, const YAML::Node& root, const NetworkShape& shape,
                         TopologyModel& model);

// ---- graphs for routing ------------------------------------------------------------------------

// The device graph kept for whole-graph algorithms (connected components, max flow); vertex i
// is device i and each edge carries its link id.
struct EdgeLink {
  int link = -1;
};
using DeviceGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::undirectedS, boost::no_property, EdgeLink>;

// A directed view for route searches: two arcs per link.
struct Arc {
  int link = -1;        // link id in the owner's numbering (local for node templates)
  bool forward = true;  // traverses the link from its `a` end to its `b` end
  int64_t latency = 0;  // picoseconds
};
// Edge properties in a vector (not the default list) keep arc scans cache-friendly.
using ArcGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS, boost::no_property, Arc,
                                       boost::no_property, boost::vecS>;

// Routes start and end anywhere but pass only through vertices marked transit: a GPU does not
// forward traffic for others, and a NIC is an endpoint of the network, not a relay.
class RoutingGraph {
 public:
  int add_vertex(bool transit);
  void add_link(int u, int v, int link, int64_t latency);
  int num_vertices() const { return static_cast<int>(transit_.size()); }

  // Costs of the cheapest routes from `source` to every vertex (kUnreachable where none).
  std::vector<RouteCost> costs_from(int source) const;
  // Cheapest route from `source` to `target` given costs_from(source): appends its vertices
  // (source first) and hops. Among equal-cost predecessors, `pick(count, step)` chooses one.
  template <typename Pick>
  void trace(const std::vector<RouteCost>& costs, int source, int target, Pick&& pick, std::vector<int>& vertices,
             std::vector<Hop>& hops) const;

 private:
  ArcGraph arcs_;
  std::vector<char> transit_;
};

// A cached route piece inside one node template, from a GPU to its NIC, in local numbering.
struct LocalPath {
  std::vector<int> vertices;
  std::vector<Hop> hops;  // Hop::link is a local link index
};

struct NodeTemplate {
  RoutingGraph graph;
  std::vector<int> gpu_vertex;  // local vertex of local GPU i
  std::vector<int> nic_vertex;  // local vertex of local NIC i
  std::vector<int> nic_of_gpu;  // local NIC index serving local GPU i, -1 when none
  std::vector<LocalPath> gpu_to_nic;
  mutable std::vector<std::vector<RouteCost>> costs;  // per local source vertex, filled on demand

  const std::vector<RouteCost>& costs_from(int vertex) const;
};

// Switches outside the nodes, plus NICs that do not hang off exactly one switch.
struct Fabric {
  RoutingGraph graph;
  std::vector<int> vertex_of_device;  // -1 for devices outside the fabric graph
  std::vector<int> device_of_vertex;
  mutable std::vector<std::vector<RouteCost>> costs;  // per source vertex, filled on demand

  const std::vector<RouteCost>& costs_from(int vertex) const;
};

// Where a NIC's traffic enters the fabric graph: through its single link to a switch, or the
// NIC itself when it is a fabric vertex. entry -1: the NIC has no network link.
struct NicEntry {
  int entry = -1;
  int uplink = -1;
  int port = 0;  // the NIC's place among the NICs entering at the same vertex, in device order
};

}  // namespace wallfacer::detail

namespace wallfacer {

struct Topology::Impl {
  detail::TopologyModel model;
  std::string source_text;
  std::string hash;

  detail::DeviceGraph graph;
  std::vector<int> gpu_device;  // global GPU index -> device id
  std::vector<int> gpu_node;
  std::vector<int> gpu_local;
  std::vector<int> gpu_nic;  // NIC device id per GPU, -1 when none
  int gpus_per_node = 0;
  std::vector<detail::NodeTemplate> templates;
  detail::Fabric fabric;
  std::vector<detail::NicEntry> nic_entry;  // indexed by device id (NICs only)

  // Routes computed so far (route_cache.hpp: lookups without a lock, so that the search's
  // pricing threads share it); filled under `lazy_mutex`. Sized in build() for the GPU count.
  std::unique_ptr<detail::RouteCache> routes;
  // Guards what is filled on first use: the routes above, the Dijkstra costs compute_route fills
  // in the templates and the fabric, and the two below.
  mutable std::mutex lazy_mutex;
  mutable std::optional<double> bisection;
  mutable std::unordered_map<std::string, int> device_by_name;

  // Builds graphs, templates and the fabric from `model`, checks reachability, hashes.
  void build(detail::TopologyModel m);

  // routing.cpp
  void build_templates();
  void build_fabric();
  void assign_nics();
  Route compute_route(int src_gpu, int dst_gpu) const;
  void append_local(int node, int local_src_vertex, int local_dst_vertex, Route& route) const;
  void append_gpu_to_nic(int gpu, bool reverse, Route& route) const;
  void append_fabric(int src_nic, int dst_nic, uint64_t ecmp_hash, Route& route) const;

  // topology.cpp
  void check_reachability() const;  // the three checks below
  void check_components() const;
  void check_node_routes() const;
  void check_nic_entries() const;
  std::string compute_hash() const;

  // bisection.cpp
  double compute_bisection() const;
};

}  // namespace wallfacer

namespace wallfacer::detail {

template <typename Pick>
void RoutingGraph::trace(const std::vector<RouteCost>& costs, int source, int target, Pick&& pick,
                         std::vector<int>& vertices, std::vector<Hop>& hops) const {
  // Walk back from the target over arcs that are tight (cost[u] + w == cost[v]) and allowed
  // (u may relay, or is the source), then reverse the piece.
  const size_t first_vertex = vertices.size();
  const size_t first_hop = hops.size();
  thread_local std::vector<ArcGraph::edge_descriptor> candidates;
  int v = target;
  int step = 0;
  while (v != source) {
    candidates.clear();
    if (costs[v].second == 1) {
      // One hop from the source: only the source has zero hops, so scan its arcs instead of v's
      // (a spine's in-degree is the number of leaves).
      for (auto [it, end] = boost::out_edges(source, arcs_); it != end; ++it)
        if (static_cast<int>(boost::target(*it, arcs_)) == v && arcs_[*it].latency == costs[v].first)
          candidates.push_back(*it);
    } else {
      for (auto [it, end] = boost::in_edges(v, arcs_); it != end; ++it) {
        const int u = static_cast<int>(boost::source(*it, arcs_));
        if (u != source && !transit_[u]) continue;
        const RouteCost& cu = costs[u];
        if (cu == kUnreachable) continue;
        if (RouteCost{cu.first + arcs_[*it].latency, cu.second + 1} == costs[v]) candidates.push_back(*it);
      }
    }
    if (candidates.empty()) throw std::logic_error("topology: route trace found no predecessor");
    const auto chosen = candidates[candidates.size() == 1 ? 0 : pick(static_cast<int>(candidates.size()), step)];
    vertices.push_back(v);
    hops.push_back(Hop{arcs_[chosen].link, arcs_[chosen].forward});
    v = static_cast<int>(boost::source(chosen, arcs_));
    ++step;
  }
  vertices.push_back(source);
  std::reverse(vertices.begin() + static_cast<std::ptrdiff_t>(first_vertex), vertices.end());
  std::reverse(hops.begin() + static_cast<std::ptrdiff_t>(first_hop), hops.end());
}

}  // namespace wallfacer::detail
